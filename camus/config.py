"""The attach configuration file, so that `sudo camus-xdp attach eth0` works on its own.

Path: /etc/camus-xdp/config.yaml (or $CAMUS_XDP_CONFIG). Created on first use with the
shipped ITCH example and comments that say what to change:

    spec: /path/to/itch.p4        # the message-format spec
    rules: /path/to/rules.txt     # the subscription rules
    ports: null                   # ports.yaml (null: delivering packets go to this host's stack)
    mode: native                  # native | generic

`--spec/--rules/--ports/--mode` on the command line override the file. Relative paths in the
file are relative to the file's folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path("/etc/camus-xdp/config.yaml")
KEYS = ("spec", "rules", "ports", "mode")


class ConfigError(ValueError):
    pass


@dataclass
class AttachConfig:
    spec: str
    rules: str
    ports: str | None
    mode: str
    path: Path
    created: bool = False


def config_path() -> Path:
    return Path(os.environ.get("CAMUS_XDP_CONFIG", str(DEFAULT_PATH)))


def _template() -> str:
    from camus.data import shipped_apps
    spec, rules = shipped_apps()["itch"]
    return ("# camus-xdp attach configuration (created on first use; edit to taste).\n"
            "# Command-line options (--spec, --rules, --ports, --mode) override these.\n"
            f"spec: {spec}        # message-format spec (P4 header file + pragmas)\n"
            f"rules: {rules}      # subscription rules, `filter : fwd(port)` per line\n"
            "ports: null          # ports.yaml: where each fwd() port goes (null: this host's stack)\n"
            "mode: native         # native (driver) or generic (any interface, slower)\n")


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

    spec, rules = resolve(data.get("spec")), resolve(data.get("rules"))
    if spec is None or rules is None:
        raise ConfigError(f"{p}: needs both `spec:` and `rules:`")
    mode = str(data.get("mode") or "native")
    if mode not in ("native", "generic"):
        raise ConfigError(f"{p}: mode must be native or generic, not {mode!r}")
    for what, value in (("spec", spec), ("rules", rules), ("ports", resolve(data.get("ports")))):
        if value is not None and not Path(value).is_file():
            raise ConfigError(f"{p}: {what} file {value} does not exist")
    return AttachConfig(spec, rules, resolve(data.get("ports")), mode, p, created)
