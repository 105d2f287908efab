"""Data-plane commands on an attached interface: update, overload, detach, stats, status (root);
`attach` is cli_attach.py. The helpers here serve both."""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

import click

from camus.cli_options import APP_OPTION, unit_of as _unit
from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.backends.ebpf.program import BV_MAX_PORT_WORDS
from camus.dataplane.program import DataplaneError

if TYPE_CHECKING:
    from camus.compiler.language.rules_ast import Rule
    from camus.compiler.language.rules_parser import SourceText
    from camus.dataplane.attachment import UpdateReport

    Parsed = tuple[list[Rule], SourceText]

MODES = ("native", "generic")


def fail(exc: Exception) -> NoReturn:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


COUNT_RULES = 64     # rules with their own counter unless --count-rules says otherwise


def compile_for(spec: str, rules: str, count_rules: int = COUNT_RULES, allow_empty: bool = False,
                parsed: Parsed | None = None):
    """The rules compiled for a data plane; an empty rule set is refused unless `allow_empty`:
    live, it drops the whole feed (nobody subscribed), which a truncated or wrong file would
    otherwise do silently. `parsed`: the file's parse_rules, when the caller has it already."""
    progress = lambda m: click.echo(m, err=True)      # noqa: E731
    try:
        if parsed is not None:
            from camus.compiler.compile import compile_parsed
            from camus.compiler.language.spec_parser import load_spec
            c = compile_parsed(load_spec(spec), *parsed, CompileOptions(count_rules=count_rules),
                               progress=progress if _big(rules) else None)
        else:
            c = compile_files(spec, rules, CompileOptions(count_rules=count_rules), progress=progress)
    except (CompileErrors, CompileError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    if not c.rules and not allow_empty:
        click.echo(f"{rules}: error: no rules in the file; live, that drops the whole feed (nobody subscribed). "
                   "Pass --allow-empty to do that on purpose.", err=True)
        sys.exit(1)
    return c


def _big(rules: str) -> bool:
    """A rules file large enough for progress on stderr (compile_files' threshold)."""
    from camus.compiler.compile import PROGRESS_BYTES
    try:
        return os.path.getsize(rules) > PROGRESS_BYTES
    except OSError:
        return False


def _parsed(rules: str) -> Parsed | None:
    """The rules file's parse_rules (rules, source), or None when it cannot be read or parsed
    (the whole compile then reports why, with positions)."""
    from camus.compiler.compile import no_cyclic_gc
    from camus.compiler.language.errors import read_source
    from camus.compiler.language.rules_parser import parse_rules
    if _big(rules):
        click.echo(f"{rules}: {os.path.getsize(rules) / 1e6:.0f} MB of rules; parsing", err=True)
    try:
        with no_cyclic_gc():                 # 100K rules: 0.7 s, and 2.6 s with the collector on
            return parse_rules(read_source(rules, "rules"), rules)
    except (CompileError, CompileErrors, RecursionError):
        return None


def _already_live(unit: str, rules: str, count_rules: int, parsed: Parsed | None) -> UpdateReport | None:
    """The update's report when the live tables already hold these rules, found from the file's
    parse alone (compiling 100K rules takes seconds; re-running an update with the same file, as
    configuration tools do, needs no compile); None when they must be compiled (a file with no
    rule too: the whole path says why it is refused)."""
    from camus.dataplane import runtime
    from camus.dataplane.counting import parsed_key
    if parsed is None or not parsed[0]:
        return None
    found, src = parsed
    return runtime.already_live(unit, parsed_key(src.text, found, CompileOptions(count_rules=count_rules)), rules)


def _live_from_parse(unit: str, rules: str, parsed: Parsed, progress) -> UpdateReport | None:
    """The update through the live path from the file's parse (a file with rules over several
    lines; or no saved live state, which a whole write through the live path leaves for the next
    update); None when the whole path must serve it. Raises live_state.BadRules for a rule that
    does not compile."""
    from camus.dataplane import installed as state, live_state
    from camus.dataplane.counting import texts_of
    found, src = parsed
    texts = texts_of(src.text, found)
    per_line = live_state.line_texts(src.text) == texts
    if state.live_state_path(unit).exists():
        rep = live_state.update(unit, rules, texts, per_line)
        if rep is not None:
            return rep
    if not state.load_installed(unit).live_path:
        return None
    return live_state.rebuild(unit, rules, texts, per_line, progress, parsed)


def prime_live(unit: str, c, rules: str, hold=None, say=None) -> None:
    """After `attach` wrote the rules: when they take the live path, write them through it once
    more, leaving its state for the next update (a delta then, not a whole compile). `hold`:
    the unit's lock, already taken (prime_live_detached); `say`: where its lines go (stderr)."""
    say = say or (lambda m: click.echo(m, err=True))
    from camus.compiler.incremental import takes_live_path
    from camus.dataplane import live_state
    from camus.dataplane.counting import rule_texts
    if not takes_live_path(c) or not c.rules:
        return
    texts = rule_texts(c)
    try:
        live_state.rebuild(unit, rules, texts, live_state.line_texts(c.source.text) == texts,
                           progress=say, compiled=c, hold=hold)
    except (DataplaneError, OSError) as exc:       # the attachment serves; only the next update is slower
        say(f"{unit}: warning: no live state for later updates ({exc}); they take the whole path")


def prime_live_detached(unit: str, c, rules: str, keep: str | None = None) -> bool:
    """prime_live in a child process that outlives this command: the rules serve already, and
    the live state is only what makes the next update a delta (100K rules: 2-3 s, 10K: half a
    second). The unit's lock is taken here and inherited, so a command run right after waits
    for the live state instead of racing it; the child's lines go to syslog (camus-xdp). False
    (nothing started) when the rules do not take the live path. `keep`: the compile cache's key
    for `c` (dataplane/compile_cache.py): the child keeps it there once the live state is saved."""
    from camus.compiler.incremental import takes_live_path
    from camus.dataplane.installed import lock_for_command
    live = takes_live_path(c) and bool(c.rules)
    if not live and keep is None:
        return False
    hold = lock_for_command(unit) if live else None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        if hold is not None:
            os.close(hold.fd)         # the child's copy keeps the lock (one open file description)
        return True
    code = 0
    try:
        os.setsid()                   # not in the terminal's process group: a Ctrl-C there leaves it
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        import syslog
        syslog.openlog("camus-xdp", syslog.LOG_PID)
        if hold is not None:
            from camus.dataplane.compile_cache import with_rules
            c = with_rules(c)         # (a kept compile has no syntax trees; the live state needs them)
            prime_live(unit, c, rules, hold=hold, say=lambda m: syslog.syslog(syslog.LOG_INFO, m))
            hold.release()            # (commands wait for the live state, not for the cache below)
        if keep is not None:
            from camus.dataplane import compile_cache
            compile_cache.keep(keep, c)
    except BaseException as exc:      # (a child never returns into the command's code)
        code = 1
        try:
            syslog.syslog(syslog.LOG_WARNING, f"{unit}: the live state for later updates failed: {exc!r}")
        except Exception:
            pass
    finally:
        if hold is not None:
            hold.release()
        os._exit(code)


def run_update(iface: str, rules: str, allow_empty: bool) -> dict:
    """`camus-xdp update` in this process (no host agent holds the unit): what changed, as
    cli_update.say_update prints it."""
    from camus.dataplane import installed as state, live_state, runtime
    progress = lambda m: click.echo(m, err=True)      # noqa: E731
    try:
        rep = live_state.update(iface, rules)            # a delta, the file diffed by its lines
        if rep is None:
            inst = state.load_installed(iface)
            parsed = _parsed(rules)
            rep = _already_live(iface, rules, inst.count_rules, parsed)
            if rep is None and parsed is not None and parsed[0]:
                try:
                    rep = _live_from_parse(iface, rules, parsed, progress)
                except live_state.BadRules:
                    pass                                  # the whole compile says where, below
            if rep is None:
                c = compile_for(inst.spec, rules, inst.count_rules, allow_empty, parsed)
                rep = runtime.update(iface, c, rules, progress=progress)
                if rep.grown:                        # a new program: the live state for it, once
                    prime_live(iface, c, rules)
    except DataplaneError as exc:
        fail(exc)
    return {"written": rep.written, "grown": rep.grown, "path": rep.path, "ms": round(rep.seconds * 1000, 1),
            "added": rep.added, "removed": rep.removed, "old_entries": rep.old_entries,
            "new_entries": rep.new_entries}


@click.command()
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
        fail(exc)
    click.echo(f"{iface}: filtering bypassed above {bypass_pps} packets/s per CPU" if bypass_pps else
               f"{iface}: overload bypass off (every packet filtered exactly)")


@click.command()
@click.argument("iface")
def detach(iface: str) -> None:
    """Remove camus-xdp from IFACE: the interface is back as it was."""
    from camus.dataplane import runtime
    try:
        note = runtime.detach(iface)
    except DataplaneError as exc:
        fail(exc)
    click.echo(note or f"detached from {iface}")


@click.command()
@click.argument("iface")
@click.option("--watch", type=float, default=0, help="Refresh every N seconds with rates (Ctrl-C stops).")
@click.option("--rules/--no-rules", "show_rules", default=True, show_default=True,
              help="Also list the counted rules and the messages each matched.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object (with --watch: one per refresh, a line each); schema in docs/hosts.md.")
@APP_OPTION
def stats(iface: str, watch: float, show_rules: bool, as_json: bool, app: str | None) -> None:
    """Packet, message, port and per-rule counters of IFACE's classifier.

    Counters are grouped by what they count: packets, messages (a MoldUDP64 packet holds up to
    12) and copies sent to each port. Per-rule counts cover the rules `attach --count-rules`
    chose (the first 64 by default) and survive `update` for rules that stay. On an interface
    serving several apps: every app's counters and the frames the dispatcher handed each (or
    one app with --app). The last line is the kernel's receive counters of the interface:
    frames its driver or ring dropped before XDP ran (rx_dropped, rx_missed_errors) mean the
    broker is not keeping up. With --watch on a terminal the table is redrawn in place.
    """
    import json as jsonlib
    import sys
    from camus.dataplane import counting, dispatch, netdev, report, runtime
    try:
        shared = not app and "@" not in iface and dispatch.dispatch_record_path(iface).exists()
        units = {"": _unit(iface, app)}
        if shared:
            units = {f"[{name}]": f"{iface}@{name}" for name in dispatch.load_record(iface)["apps"]}

        nic = iface.split("@")[0]
        for unit in units.values():                    # counters of what serves, not of a crash's journal
            note = runtime.recover_unit(unit)
            if note:
                click.echo(note, err=True)

        def read() -> dict[str, dict[str, int]]:
            out = {"dispatch:": dispatch.dispatch_counts(iface)} if shared else {}
            out |= {label: runtime.stats(unit) for label, unit in units.items()}
            received = netdev.receive_counters(nic)
            return out | ({f"{nic} (kernel):": received} if received else {})

        def rate(k: str, v: int, label: str, prev: dict[str, dict[str, int]] | None, dt: float) -> str:
            return f" ({(v - prev[label].get(k, v)) / dt:.0f}/s)" if prev and dt > 0 else ""

        def document(cur: dict[str, dict[str, int]], prev: dict[str, dict[str, int]] | None,
                     dt: float) -> dict[str, object]:
            doc: dict[str, object] = {"schema": report.SCHEMA, "iface": iface, "time": round(time.time(), 3),
                                      "dispatch": cur.get("dispatch:"), "kernel": cur.get(f"{nic} (kernel):")}
            per_unit = {}
            for label, unit in units.items():
                entry: dict[str, object] = dict(report.grouped(cur[label]))
                entry["rules"] = [{"rule": text, "messages": n} for text, n in counting.rule_counts(unit)]
                if prev and dt > 0:
                    entry["per_second"] = {k: round((v - prev[label].get(k, v)) / dt, 1) for k, v in cur[label].items()}
                per_unit[unit] = entry
            doc["units"] = per_unit
            return doc

        def show(cur: dict[str, dict[str, int]], prev: dict[str, dict[str, int]] | None, dt: float) -> None:
            if as_json:
                click.echo(jsonlib.dumps(document(cur, prev, dt)))
                return
            if prev and sys.stdout.isatty():
                click.clear()
            for label, counters in cur.items():
                if label not in units:
                    click.echo(f"{label} " + "  ".join(f"{k}={v}{rate(k, v, label, prev, dt)}"
                                                        for k, v in counters.items()))
                    continue
                pad = f"{label} " if label else ""
                for kind, group in report.grouped(counters).items():
                    if group:
                        name = "copies to ports" if kind == "port_copies" else kind
                        prefix = "port " if kind == "port_copies" else ""
                        click.echo(f"{pad}{name + ':':<16} " + "  ".join(
                            f"{k}={v}{rate(prefix + k, v, label, prev, dt)}" for k, v in group.items()))
                if show_rules:
                    for text, n in counting.rule_counts(units[label]):
                        click.echo(f"{n:>12}  {text}")

        prev, t_prev = read(), time.monotonic()
        show(prev, None, 0)
        while watch > 0:
            time.sleep(watch)
            cur, now = read(), time.monotonic()
            show(cur, prev, now - t_prev)
            prev, t_prev = cur, now
    except DataplaneError as exc:
        fail(exc)
    except KeyboardInterrupt:
        pass


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: every unit; schema in docs/hosts.md.")
def status(as_json: bool) -> None:
    """Interfaces with camus-xdp attached: rules, bank, the XDP program (id and tag, as
    `bpftool prog show` names it), when it was attached, capacity and how copies are made."""
    import datetime
    import json as jsonlib
    from camus.dataplane import dispatch, netdev, report, runtime
    from camus.dataplane import installed as state
    from camus.dataplane.netlink import interface_exists
    rows = state.installed()
    if not rows and not as_json:
        click.echo("camus-xdp is not attached anywhere")
    shared_doc = []
    for rec in dispatch.shared_interfaces():
        by_app: dict[int, list[str]] = {}
        for key, slot in rec["keys"].items():
            by_app.setdefault(slot, []).append(dispatch.describe_key(int(key)))
        shared_doc.append({"iface": rec["iface"], "mode": rec["mode"], "apps": list(rec["apps"]),
                           "claims": {name: by_app.get(i, []) for i, name in enumerate(rec["apps"])}})
        if not as_json:
            click.echo(f"{rec['iface']}: {rec['mode']} XDP dispatcher for {len(rec['apps'])} apps: " +
                       "; ".join(f"{name} ({', '.join(by_app.get(i, []))})" for i, name in enumerate(rec["apps"])))
    units_doc = []
    for inst in rows:
        root = os.geteuid() == 0                          # the maps and the lock need root
        note = runtime.recover_unit(inst.unit) if root else ""   # the state file then names what serves
        if note:
            click.echo(note, err=as_json)
            inst = state.load_installed(inst.unit)
        up = interface_exists(inst.iface)
        live = runtime.live_root(inst.unit) if root and up else None
        holder = state.unit_holder(inst.unit) if root else ""
        doc = report.unit_status(inst, live, up, holder) if root else report.unit_status(inst, None, False)
        units_doc.append(doc)
        if as_json:
            continue
        gone = "" if up else "  [interface gone: run `detach` to clean up]"
        name = f"{inst.iface} app {inst.app}" if inst.app else inst.iface
        click.echo(f"{name}: {inst.mode} XDP, {len(inst.rule_lines)} rules from {inst.rules}, "
                   f"bank {inst.bank}, root state {inst.root}{gone}")
        prog = doc["program"]
        if isinstance(prog, dict):
            when = (datetime.datetime.fromtimestamp(inst.attached_at).strftime(" attached %Y-%m-%d %H:%M:%S")
                    if inst.attached_at else "")
            click.echo(f"  program: id {prog['id']} ({prog['name']}), tag {prog['tag']}{when}")
        steered = netdev.rps_enabled(inst.iface) if inst.ports and up else {}
        if steered:
            click.echo(f"  warning: RPS is on for {inst.iface}'s {', '.join(steered)}: packets TC copies "
                       "must stay on the CPU that classified them, so copies are lost; "
                       f"`echo 0 > /sys/class/net/{inst.iface}/queues/<rx-N>/rps_cpus`")
        if holder:
            click.echo(f"  held for live changes by {holder}: its rules change through it (`update` hands "
                       "it the rules file unless it serves a controller); `detach` is refused until it stops")
        if inst.pending:
            click.echo("  an update is in progress or was interrupted (journaled): " +
                       ("another command holds the unit" if root else "run `status` as root to finish or undo it"))
        elif live is not None and live != inst.root and not holder:
            click.echo(f"  warning: the maps serve root state {live}, not the recorded "
                       f"{inst.root} (a host agent's changes since its last save, or a crash): the next "
                       "`update` rewrites the tables whole")
        elif live is not None and live != inst.root and holder:
            click.echo(f"  {holder} has changed the tables since it last saved this record (about once a "
                       f"minute under changes, and when it stops): the rule count and root above lag "
                       f"(live root state {live})")
        lim = inst.limits()
        stage = (f"bit-vector stage {64 * lim.bv_words} terms, {lim.max_bv_bitmaps // 2} bitmaps and "
                 f"{lim.max_bv_segs} segments per bank" if lim.port_words <= BV_MAX_PORT_WORDS
                 else "no bit-vector stage (more ports than it serves)")
        click.echo(f"  capacity: {lim.max_states // 2} states per bank; {64 * lim.port_words} subscriber ports; "
                   + stage + (f", port columns {4 * lim.bv_columns} words" if lim.bv_columns else ""))
        if inst.fanout:
            click.echo(f"  copies: {inst.fanout}")
        from camus.dataplane.report import next_update
        click.echo("  next update: " + {
            "delta": "a delta (the changed lines' states only; the live state is saved)",
            "live": "a whole set through the live path, which leaves the state for deltas after it",
            "compile": "a whole compile (these rules do not take the live path)"}[next_update(inst)])
    if as_json:
        click.echo(jsonlib.dumps({"schema": report.SCHEMA, "units": units_doc, "dispatchers": shared_doc}, indent=1))


@click.command()
@click.option("--listen", default="127.0.0.1:9435", show_default=True,
              help="HOST:PORT to serve /metrics on (:PORT for every address).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="What the exporter logs (scrape errors at warning).")
def metrics(listen: str, log_level: str) -> None:
    """Serve Prometheus metrics of every attached interface until stopped.

    Each scrape reads the pinned maps: one counter per classifier counter by unit
    (camus_xdp_packets_total, camus_xdp_messages_total, camus_xdp_no_match_packets_total, ...),
    camus_xdp_port_copies_total, camus_xdp_rule_messages_total (counted rules by id;
    camus_xdp_rule_info has their text), camus_xdp_interface_rx_dropped_total and the other
    receive counters (drops before XDP ran) and camus_xdp_unit_info (the XDP program's id and
    tag). Only /metrics answers (404 elsewhere). Needs root (the maps are root's).

    \b
      sudo camus-xdp metrics --listen :9435 &
      curl -s localhost:9435/metrics | grep camus_xdp_packets
    """
    import logging
    import threading
    from camus.dataplane import metrics as exporter
    from camus.dataplane.program import require_root
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        require_root()
        host, port = exporter.parse_listen(listen)
        server, thread = exporter.serve(host, port)
    except (DataplaneError, ValueError) as exc:
        fail(exc)
    except OSError as exc:
        fail(DataplaneError(f"--listen {listen}: {exc.strerror or exc}"))
    logging.getLogger("camus.metrics").info("serving http://%s:%d/metrics", host, port)
    click.echo(f"serving Prometheus metrics on http://{host}:{port}/metrics (Ctrl-C stops)", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()




@click.command("install-units")
@click.option("--dir", "unit_dir", type=click.Path(file_okay=False), default="/etc/systemd/system", show_default=True,
              help="Where systemd reads units from.")
@click.option("--command", "command", type=click.Path(dir_okay=False), default=None,
              help="The camus-xdp executable the units run (default: this installation's).")
def install_units(unit_dir: str, command: str | None) -> None:
    """Write the systemd units for this host: camus-xdp@IFACE attaches IFACE at boot from
    /etc/camus-xdp/config.yaml (and detaches it on stop), camus-xdp-metrics serves the Prometheus
    exporter. ExecStart names this installation's camus-xdp; the units are checked with
    `systemd-analyze verify` before anything in DIR changes (nothing is written if they fail).

    \b
      sudo camus-xdp install-units
      sudo systemctl daemon-reload
      sudo systemctl enable --now camus-xdp@eth0 camus-xdp-metrics
    """
    from pathlib import Path
    from camus.dataplane import units
    try:
        exe = Path(command).absolute() if command else units.this_command()
        written = units.install_units(exe, Path(unit_dir))
    except (DataplaneError, OSError) as exc:
        fail(exc)
    for path in written:
        click.echo(f"wrote {path}")
    click.echo("next: systemctl daemon-reload; systemctl enable --now camus-xdp@IFACE camus-xdp-metrics")


COMMANDS: list[click.Command] = [overload, detach, stats, status, metrics, install_units]
