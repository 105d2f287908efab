"""`camus-xdp attach`: turn an interface into an edge broker's ingress (root)."""
from __future__ import annotations

import click

from camus.compiler.ir.resources import resource_report
from camus.dataplane.program import DataplaneError

from camus.cli_dataplane import COUNT_RULES, MODES, compile_for, fail, prime_live, prime_live_detached
from camus.cli_options import ALLOW_EMPTY


def _app_files(value: str) -> tuple[str, str, str, str | None]:
    """`--app NAME=SPEC,RULES[,PORTS]` -> its parts, the files checked."""
    from pathlib import Path
    name, eq, files = value.partition("=")
    parts = files.split(",")
    if not eq or not name or len(parts) not in (2, 3):
        raise click.BadParameter(f"{value!r}: expected NAME=SPEC,RULES[,PORTS] (e.g. dns=apps/dns/dns.p4,"
                                 "apps/dns/rules.txt)", param_hint="--app")
    for part in parts:
        if not Path(part).is_file():
            raise click.BadParameter(f"{value!r}: no file {part}", param_hint="--app")
    return name, parts[0], parts[1], parts[2] if len(parts) == 3 else None


def _attach_apps(iface: str, entries: list[tuple[str, str, str, str | None]], mode: str, count_rules: int,
                 xdp_redirect: bool, fanout_mode: str, allow_empty: bool) -> None:
    from camus.dataplane import apps
    from camus.dataplane.program import DataplaneError
    from camus.dataplane import runtime
    try:
        runtime.check_free(iface, mode=mode)      # before seconds of compiling: a busy interface
    except DataplaneError as exc:
        fail(exc)
    todo = []
    for name, spec, rules, ports in entries:       # every app compiles before anything is loaded
        click.echo(f"compiling {name}: {rules}", err=True)
        todo.append(apps.App(name, compile_for(spec, rules, count_rules, allow_empty), spec, rules, ports))
    try:
        done = apps.attach_apps(iface, todo, mode, xdp_redirect, fanout_mode, progress=lambda m: click.echo(m, err=True))
    except DataplaneError as exc:
        fail(exc)
    click.echo(f"attached to {iface} ({mode} XDP) serving {len(done)} apps; each takes --app NAME in "
               "update/stats/overload:")
    for app, inst in zip(todo, done):
        keys = ", ".join(apps.dispatch_keys(app.compiled.spec).values())
        click.echo(f"  {app.name}: {keys}; {len(app.compiled.rules)} rules, "
                   f"{resource_report(app.compiled.pipeline)['entries']} table entries; pinned at {inst.pins}")
    for app, inst in zip(todo, done):
        prime_live(inst.unit, app.compiled, app.rules_path)
    for inst in done:
        _say_rps(iface, inst.rps)


@click.command()
@click.argument("iface")
@click.option("--spec", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Message-format spec (default: the config file's).")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Subscription rules (default: the config file's).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="native: in the driver (veth, most NICs); generic: any interface, slower "
                   "(default: the config file's, else native).")
@click.option("--ports", type=click.Path(exists=True, dir_okay=False), default=None,
              help="ports.yaml: where each fwd() port's copies go (interface, subscriber endpoint "
                   "or local). Without it (and none in the config file), delivering packets go to "
                   "this host's stack.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Attach configuration (default /etc/camus-xdp/config.yaml or $CAMUS_XDP_CONFIG; "
                   "created with the shipped ITCH example on first use).")
@click.option("--xdp-redirect", is_flag=True,
              help="Send packets whose messages all go to one interface port straight from XDP "
                   "(XDP_REDIRECT, no skb). The receiving device must accept XDP frames (veth: "
                   "its peer needs an XDP program or GRO on).")
@click.option("--fanout", "fanout_mode", type=click.Choice(["auto", "xdp", "tc"]), default="auto",
              show_default=True,
              help="How a packet for several ports is copied: by TC clones, or by one XDP broadcast to "
                   "the ports whose interface is theirs alone and takes XDP frames (each copy pruned on its "
                   "way out; other ports still by TC). auto: when every such port is on a NIC (or virtio-net), "
                   "broadcast whenever possible (half the CPU per copy, twice the lossless feed rate in "
                   "bench/sink_bench.py); with veths among them, broadcast packets going to 16 or more "
                   "ports and TC below (on veths its copies arrive sooner and keep up under a sustained "
                   "feed); xdp: broadcast whenever possible; tc: never. `status` shows it.")
@click.option("--count-rules", type=click.IntRange(0), default=COUNT_RULES, show_default=True,
              help="Give the first N rules their own match counters (`stats` shows them). Each "
                   "counted rule may keep apart table states that would otherwise merge; 0 turns "
                   "them off for the smallest tables.")
@click.option("--app", "app_args", multiple=True, metavar="NAME=SPEC,RULES[,PORTS]",
              help="Serve several applications on IFACE (repeat, 2 to 16): frames go to the app whose "
                   "spec claims their UDP port (@pragma udp_port) or EtherType (0x9001 attribute "
                   "framings); each has its own rules, counters and updates (--app NAME there).")
@ALLOW_EMPTY
@click.option("--json", "as_json", is_flag=True,
              help="Print the attached unit as `status --json` shows it (one object) instead of the summary.")
def attach(iface: str, spec: str | None, rules: str | None, mode: str | None, ports: str | None,
           config_file: str | None, xdp_redirect: bool, fanout_mode: str, count_rules: int,
           app_args: tuple[str, ...], allow_empty: bool, as_json: bool) -> None:
    """Turn IFACE into an edge broker's ingress: classify the feed, drop what nobody wants.

    `sudo camus-xdp attach eth0` alone takes spec, rules, ports and mode from the config
    file (created with the shipped ITCH example on first use; an `apps:` list there serves
    several applications); options override it. Traffic that is not a spec's feed (ARP,
    SSH, other UDP) passes untouched. Maps are pinned under /sys/fs/bpf/camus/IFACE (one
    folder per app: IFACE@NAME); `update` swaps rules without reloading. With a ports
    file, receive packet steering (RPS) is off on IFACE while attached: copies are made on
    the CPU that classified the packet; `detach` restores it.

    \b
    Several applications on one interface:
      sudo camus-xdp attach eth0 --app itch=apps/itch/itch.p4,apps/itch/rules.txt \\
                                 --app dns=apps/dns/dns.p4,apps/dns/rules.txt
      sudo camus-xdp update eth0 --app dns --rules new_dns_rules.txt
    """
    from pathlib import Path

    from camus.config import ConfigError, load_config
    from camus.dataplane import runtime
    if app_args:
        if spec or rules or ports:
            fail(ValueError("give either --app (several apps) or --spec/--rules/--ports (one), not both"))
        _attach_apps(iface, [_app_files(a) for a in app_args], mode or "native", count_rules, xdp_redirect,
                     fanout_mode, allow_empty)
        return
    if spec is None or rules is None or mode is None:
        try:
            cfg = load_config(Path(config_file) if config_file else None)
        except (ConfigError, OSError) as exc:
            fail(exc)
        if cfg.created:
            click.echo(f"created {cfg.path} (the shipped ITCH example; edit it to choose your spec, "
                       "rules and ports)", err=True)
        if cfg.apps and not (spec or rules):
            _attach_apps(iface, [(a.name, a.spec, a.rules, a.ports) for a in cfg.apps], mode or cfg.mode,
                         count_rules, xdp_redirect, fanout_mode, allow_empty)
            return
        if cfg.apps:
            fail(ValueError(f"{cfg.path} lists apps; give both --spec and --rules to attach one spec instead"))
        spec, rules = spec or cfg.spec, rules or cfg.rules
        ports, mode = ports or cfg.ports, mode or cfg.mode
    assert spec is not None and rules is not None and mode is not None
    try:
        runtime.check_free(iface, mode=mode)      # in milliseconds, before compiling and building
    except DataplaneError as exc:
        fail(exc)
    from camus.dataplane import compile_cache
    key = compile_cache.compile_key(spec, rules, count_rules)
    c = compile_cache.load(key, rules)   # these files attached before: their compile, kept
    if c is None or not (c.rules or allow_empty):
        c = compile_for(spec, rules, count_rules, allow_empty)
    else:
        click.echo(f"{iface}: the rules' compile from an earlier attach of these files (compile cache)", err=True)
    try:
        inst = runtime.attach(iface, c, spec, rules, mode, ports_path=ports, xdp_redirect=xdp_redirect,
                              fanout_mode=fanout_mode, progress=lambda m: click.echo(m, err=True))
        inst = runtime.Attachment(iface).installed
        prime_live_detached(iface, c, rules, keep=key)   # the next update's live state, after this exits
    except DataplaneError as exc:
        fail(exc)
    if as_json:
        import json
        from camus.dataplane.report import unit_status
        doc = unit_status(inst, inst.root, True)
        doc["entries"] = resource_report(c.pipeline)["entries"]
        click.echo(json.dumps(doc))
        return
    r = resource_report(c.pipeline)
    distinct = len(inst.rule_lines)                  # what `status` counts: each rule once
    rules_said = f"{len(c.rules)} rules" + (f" ({distinct} distinct)" if distinct != len(c.rules) else "")
    click.echo(f"attached to {iface} ({mode} XDP): {rules_said}, {r['entries']} table entries, "
               f"{len(inst.keys['leaf'])} leaves; maps pinned at {inst.pins}")
    if inst.fanout:
        click.echo(f"copies: {inst.fanout}")
    _say_rps(iface, inst.rps)


def _say_rps(iface: str, found: dict[str, str]) -> None:
    """What attach did to receive packet steering (dataplane/netdev.py), in words."""
    if found:
        queues = ", ".join(f"{q} (was {m})" for q, m in found.items())
        click.echo(f"RPS turned off on {iface}'s {queues} while attached: copies are made on the CPU "
                   "that classified the packet; `detach` turns it back on")


COMMANDS: list[click.Command] = [attach]
