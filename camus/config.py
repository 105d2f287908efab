"""The attach configuration file, so that `sudo camus-xdp attach eth0` works on its own.

Path: /etc/camus-xdp/config.yaml (or $CAMUS_XDP_CONFIG). Created on first use with the
shipped ITCH example and comments that say what to change:

    spec: /path/to/itch.p4        # the message-format spec
    rules: /path/to/rules.txt     # the subscription rules
    ports: null                   # ports.yaml (null: delivering packets go to this host's stack)
    mode: native                  # native | generic

Or, for an interface that serves several applications (dispatched by UDP port or EtherType,
dataplane/apps.py), a list of them instead of spec/rules/ports:

    apps:
      - {name: itch, spec: apps/itch/itch.p4, rules: apps/itch/rules.txt}
      - {name: dns, spec: apps/dns/dns.p4, rules: apps/dns/rules.txt, ports: dns_ports.yaml}
    mode: native

`--spec/--rules/--ports/--app/--mode` on the command line override the file. Relative paths in
the file are relative to the file's folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path("/etc/camus-xdp/config.yaml")
KEYS = ("spec", "rules", "ports", "mode", "apps")
APP_KEYS = ("name", "spec", "rules", "ports")


class ConfigError(ValueError):
    pass


@dataclass
class AppFiles:
    """One application of an interface that serves several."""
    name: str
    spec: str
    rules: str
    ports: str | None = None


@dataclass
class AttachConfig:
    spec: str | None                  # None when `apps` names the applications
    rules: str | None
    ports: str | None
    mode: str
    path: Path
    created: bool = False
    apps: list[AppFiles] = field(default_factory=list)


def config_path() -> Path:
    return Path(os.environ.get("CAMUS_XDP_CONFIG", str(DEFAULT_PATH)))


def _template() -> str:
    from camus.data import shipped_apps
    shipped = shipped_apps()
    spec, rules = shipped["itch"]
    dns_spec, dns_rules = shipped["dns"]
    return ("# camus-xdp attach configuration (created on first use; edit to taste).\n"
            "# Command-line options (--spec, --rules, --ports, --app, --mode) override these.\n"
            f"spec: {spec}        # message-format spec (P4 header file + pragmas)\n"
            f"rules: {rules}      # subscription rules, `filter : fwd(port)` per line\n"
            "ports: null          # ports.yaml: where each fwd() port goes (null: this host's stack)\n"
            "mode: native         # native (driver) or generic (any interface, slower)\n"
            "# Several applications on one interface instead of spec/rules/ports (each spec needs its\n"
            "# own `@pragma udp_port`, or EtherType 0x9001 framing; frames go to the app they belong to):\n"
            "# apps:\n"
            f"#   - {{name: itch, spec: {spec}, rules: {rules}}}\n"
            f"#   - {{name: dns, spec: {dns_spec}, rules: {dns_rules}, ports: null}}\n")


def load_config(path: Path | None = None) -> AttachConfig:
    """The configuration, created from the template when the file does not exist yet."""
    import yaml
    p = path or config_path()
    created = False
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(_template())
        created = True
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{p}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected `key: value` lines ({', '.join(KEYS)})")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")

    def resolve(value: object) -> str | None:
        if value in (None, ""):
            return None
        q = Path(str(value)).expanduser()
        return str(q if q.is_absolute() else (p.parent / q))

    mode = str(data.get("mode") or "native")
    if mode not in ("native", "generic"):
        raise ConfigError(f"{p}: mode must be native or generic, not {mode!r}")

    def existing(what: str, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ConfigError(f"{p}: {what} file {value} does not exist")
        return value

    if data.get("apps") is not None:
        if any(data.get(k) for k in ("spec", "rules", "ports")):
            raise ConfigError(f"{p}: give either `apps:` or `spec:`/`rules:`/`ports:`, not both")
        return AttachConfig(None, None, None, mode, p, created, _apps(p, data["apps"], resolve, existing))
    spec, rules = resolve(data.get("spec")), resolve(data.get("rules"))
    if spec is None or rules is None:
        raise ConfigError(f"{p}: needs both `spec:` and `rules:` (or a list of `apps:`)")
    for what, value in (("spec", spec), ("rules", rules), ("ports", resolve(data.get("ports")))):
        existing(what, value)
    return AttachConfig(spec, rules, resolve(data.get("ports")), mode, p, created)


def _apps(p: Path, entries: object, resolve, existing) -> list[AppFiles]:
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{p}: `apps:` is a list of {{name, spec, rules, ports}} entries")
    out = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ConfigError(f"{p}: app {i}: expected name/spec/rules[/ports] keys")
        unknown = sorted(set(entry) - set(APP_KEYS))
        if unknown or not all(entry.get(k) for k in ("name", "spec", "rules")):
            raise ConfigError(f"{p}: app {i}: needs name, spec and rules (ports optional)"
                              + (f"; unknown key(s) {', '.join(unknown)}" if unknown else ""))
        files = [existing(f"app {entry['name']}: {k}", resolve(entry.get(k))) for k in ("spec", "rules", "ports")]
        out.append(AppFiles(str(entry["name"]), files[0] or "", files[1] or "", files[2]))
    return out
