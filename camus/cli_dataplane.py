"""Data-plane commands: attach, update, detach, stats, status (root)."""
from __future__ import annotations

import sys
import time

import click

from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.ir.resources import resource_report

MODES = ("native", "generic")


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


COUNT_RULES = 64     # rules with their own counter unless --count-rules says otherwise


def _compile_for(spec: str, rules: str, count_rules: int = COUNT_RULES):
    try:
        return compile_files(spec, rules, CompileOptions(count_rules=count_rules))
    except (CompileErrors, CompileError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)


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
                 xdp_redirect: bool, fanout_mode: str) -> None:
    from camus.dataplane import apps
    from camus.dataplane.program import DataplaneError
    todo = []
    for name, spec, rules, ports in entries:       # every app compiles before anything is loaded
        click.echo(f"compiling {name}: {rules}", err=True)
        todo.append(apps.App(name, _compile_for(spec, rules, count_rules), spec, rules, ports))
    try:
        done = apps.attach_apps(iface, todo, mode, xdp_redirect, fanout_mode)
    except DataplaneError as exc:
        _fail(exc)
    click.echo(f"attached to {iface} ({mode} XDP) serving {len(done)} apps; each takes --app NAME in "
               "update/stats/overload:")
    for app, inst in zip(todo, done):
        keys = ", ".join(apps.dispatch_keys(app.compiled.spec).values())
        click.echo(f"  {app.name}: {keys}; {len(app.compiled.rules)} rules, "
                   f"{resource_report(app.compiled.pipeline)['entries']} table entries; pinned at {inst.pins}")


def _unit(iface: str, app: str | None) -> str:
    return f"{iface}@{app}" if app else iface


APP_OPTION = click.option("--app", "app", default=None, metavar="NAME",
                          help="On an interface serving several apps: which one.")


def register(main: click.Group) -> None:
    from camus.dataplane.program import DataplaneError

    @main.command()
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
                       "way out; other ports still by TC). auto: broadcast packets going to 16 or more ports (a "
                       "fraction of the CPU per copy, no copies refused in bursts), TC below (its copies arrive "
                       "a little sooner); xdp: broadcast whenever possible; tc: never. `status` shows it.")
    @click.option("--count-rules", type=click.IntRange(0), default=COUNT_RULES, show_default=True,
                  help="Give the first N rules their own match counters (`stats` shows them). Each "
                       "counted rule may keep apart table states that would otherwise merge; 0 turns "
                       "them off for the smallest tables.")
    @click.option("--app", "app_args", multiple=True, metavar="NAME=SPEC,RULES[,PORTS]",
                  help="Serve several applications on IFACE (repeat, 2 to 16): frames go to the app whose "
                       "spec claims their UDP port (@pragma udp_port) or EtherType (0x9001 attribute "
                       "framings); each has its own rules, counters and updates (--app NAME there).")
    def attach(iface: str, spec: str | None, rules: str | None, mode: str | None, ports: str | None,
               config_file: str | None, xdp_redirect: bool, fanout_mode: str, count_rules: int,
               app_args: tuple[str, ...]) -> None:
        """Turn IFACE into an edge broker's ingress: classify the feed, drop what nobody wants.

        `sudo camus-xdp attach eth0` alone takes spec, rules, ports and mode from the config
        file (created with the shipped ITCH example on first use; an `apps:` list there serves
        several applications); options override it. Traffic that is not a spec's feed (ARP,
        SSH, other UDP) passes untouched. Maps are pinned under /sys/fs/bpf/camus/IFACE (one
        folder per app: IFACE@NAME); `update` swaps rules without reloading.

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
                _fail(ValueError("give either --app (several apps) or --spec/--rules/--ports (one), not both"))
            _attach_apps(iface, [_app_files(a) for a in app_args], mode or "native", count_rules, xdp_redirect,
                         fanout_mode)
            return
        if spec is None or rules is None or mode is None:
            try:
                cfg = load_config(Path(config_file) if config_file else None)
            except (ConfigError, OSError) as exc:
                _fail(exc)
            if cfg.created:
                click.echo(f"created {cfg.path} (the shipped ITCH example; edit it to choose your spec, "
                           "rules and ports)", err=True)
            if cfg.apps and not (spec or rules):
                _attach_apps(iface, [(a.name, a.spec, a.rules, a.ports) for a in cfg.apps], mode or cfg.mode,
                             count_rules, xdp_redirect, fanout_mode)
                return
            if cfg.apps:
                _fail(ValueError(f"{cfg.path} lists apps; give both --spec and --rules to attach one spec instead"))
            spec, rules = spec or cfg.spec, rules or cfg.rules
            ports, mode = ports or cfg.ports, mode or cfg.mode
        assert spec is not None and rules is not None and mode is not None
        c = _compile_for(spec, rules, count_rules)
        try:
            inst = runtime.attach(iface, c, spec, rules, mode, ports_path=ports, xdp_redirect=xdp_redirect,
                                  fanout_mode=fanout_mode)
        except DataplaneError as exc:
            _fail(exc)
        r = resource_report(c.pipeline)
        distinct = len(inst.rule_lines)                  # what `status` counts: each rule once
        rules_said = f"{len(c.rules)} rules" + (f" ({distinct} distinct)" if distinct != len(c.rules) else "")
        click.echo(f"attached to {iface} ({mode} XDP): {rules_said}, {r['entries']} table entries, "
                   f"{len(inst.keys['leaf'])} leaves; maps pinned at {inst.pins}")
        if inst.fanout:
            click.echo(f"copies: {inst.fanout}")

    @main.command()
    @click.argument("iface")
    @click.option("--rules", required=True, type=click.Path(exists=True, dir_okay=False))
    @APP_OPTION
    def update(iface: str, rules: str, app: str | None) -> None:
        """Replace the rules on IFACE (or its app NAME) atomically (no reload); prints what changed.

        Rules that outgrow the program attach sized (its maps, with room to spare) get a larger
        program, swapped in without a gap in filtering; counters carry over."""
        from camus.dataplane import runtime
        iface = _unit(iface, app)
        try:
            inst = runtime.load_installed(iface)
            c = _compile_for(inst.spec, rules, inst.count_rules)
            rep = runtime.update(iface, c, rules)
        except DataplaneError as exc:
            _fail(exc)
        if not rep.written:
            click.echo(f"{iface} unchanged: these rules compile to the tables already live; nothing written")
            return
        click.echo(f"updated {iface} in {rep.seconds * 1000:.0f} ms: +{len(rep.added)} -{len(rep.removed)} rules; "
                   f"states {rep.old_entries} -> {rep.new_entries}")
        if rep.grown:
            click.echo("  the rules outgrew the program: a larger one took over (no gap in filtering)")
        for line in rep.added[:20]:
            click.echo(f"  + {line}")
        for line in rep.removed[:20]:
            click.echo(f"  - {line}")

    @main.command()
    @click.argument("iface")
    @click.option("--bypass-pps", type=click.IntRange(0, 0xFFFFFFFF), required=True,
                  help="Packets per second per CPU above which filtering is bypassed; 0 turns it off.")
    @APP_OPTION
    def overload(iface: str, bypass_pps: int, app: str | None) -> None:
        """Graceful degradation under overload (SANDS): above the rate, IFACE stops exact filtering.

        Each CPU keeps a token bucket (10 ms of the rate). A packet over it is not classified:
        its messages go to every port any rule forwards to (the cover of all filters), so
        subscribers get more than they asked for, never less. `stats` counts them as
        `bypassed` (messages). Takes effect at once; survives `update`.
        """
        from camus.dataplane import runtime
        iface = _unit(iface, app)
        try:
            runtime.set_bypass_pps(iface, bypass_pps)
        except DataplaneError as exc:
            _fail(exc)
        click.echo(f"{iface}: filtering bypassed above {bypass_pps} packets/s per CPU" if bypass_pps else
                   f"{iface}: overload bypass off (every packet filtered exactly)")

    @main.command()
    @click.argument("iface")
    def detach(iface: str) -> None:
        """Remove camus-xdp from IFACE: the interface is back as it was."""
        from camus.dataplane import runtime
        try:
            note = runtime.detach(iface)
        except DataplaneError as exc:
            _fail(exc)
        click.echo(note or f"detached from {iface}")

    @main.command()
    @click.argument("iface")
    @click.option("--watch", type=float, default=0, help="Refresh every N seconds with rates (Ctrl-C stops).")
    @click.option("--rules/--no-rules", "show_rules", default=True, show_default=True,
                  help="Also list the counted rules and the messages each matched.")
    @APP_OPTION
    def stats(iface: str, watch: float, show_rules: bool, app: str | None) -> None:
        """Packet, message, port and per-rule counters of IFACE's classifier.

        Per-rule counts cover the rules `attach --count-rules` chose (the first 64 by default)
        and survive `update` for rules that stay. On an interface serving several apps: every
        app's counters and the frames the dispatcher handed each (or one app with --app).
        """
        from camus.dataplane import apps, runtime
        try:
            shared = not app and "@" not in iface and apps.dispatch_record_path(iface).exists()
            units = {"": _unit(iface, app)}
            if shared:
                units = {f"[{name}]": f"{iface}@{name}" for name in apps.load_record(iface)["apps"]}

            def read() -> dict[str, dict[str, int]]:
                out = {"dispatch:": apps.dispatch_counts(iface)} if shared else {}
                return out | {label: runtime.stats(unit) for label, unit in units.items()}

            def show(cur: dict[str, dict[str, int]], prev: dict[str, dict[str, int]] | None, dt: float) -> None:
                for label, counters in cur.items():
                    line = "  ".join(f"{k}={v}" + (f" ({(v - prev[label][k]) / dt:.0f}/s)" if prev else "")
                                     for k, v in counters.items())
                    click.echo(f"{label} {line}" if label else line)
                    if show_rules and label in units:
                        for text, n in runtime.rule_counts(units[label]):
                            click.echo(f"{n:>12}  {text}")

            prev, t_prev = read(), time.monotonic()
            show(prev, None, 0)
            while watch > 0:
                time.sleep(watch)
                cur, now = read(), time.monotonic()
                show(cur, prev, now - t_prev)
                prev, t_prev = cur, now
        except DataplaneError as exc:
            _fail(exc)
        except KeyboardInterrupt:
            pass

    @main.command()
    def status() -> None:
        """Interfaces with camus-xdp attached."""
        from camus.dataplane import apps, runtime
        rows = runtime.installed()
        if not rows:
            click.echo("camus-xdp is not attached anywhere")
        for rec in apps.shared_interfaces():
            by_app: dict[int, list[str]] = {}
            for key, slot in rec["keys"].items():
                by_app.setdefault(slot, []).append(apps.describe_key(int(key)))
            click.echo(f"{rec['iface']}: {rec['mode']} XDP dispatcher for {len(rec['apps'])} apps: " +
                       "; ".join(f"{name} ({', '.join(by_app.get(i, []))})" for i, name in enumerate(rec["apps"])))
        for inst in rows:
            gone = "" if runtime.interface_exists(inst.iface) else "  [interface gone: run `detach` to clean up]"
            name = f"{inst.iface} app {inst.app}" if inst.app else inst.iface
            click.echo(f"{name}: {inst.mode} XDP, {len(inst.rule_lines)} rules from {inst.rules}, "
                       f"bank {inst.bank}, root state {inst.root}{gone}")
            lim = inst.limits()
            click.echo(f"  capacity: {lim.max_states // 2} states per bank; bit-vector stage {64 * lim.bv_words} "
                       f"terms, {lim.max_bv_bitmaps // 2} bitmaps and {lim.max_bv_segs} segments per bank")
            if inst.fanout:
                click.echo(f"  copies: {inst.fanout}")

