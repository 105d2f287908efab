"""The embedded default run: the shipped ITCH example, compiled and fed with packets.

Until the XDP data plane lands this runs without root: it compiles apps/itch, builds a
MoldUDP64 feed (1-12 Add Order messages per packet), sends every packet through the compiled
tables and through the rules themselves, and prints what each port would receive.
"""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import click

from camus.bench.workloads import itch_messages
from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.backends.registry import engine
from camus.compiler.semantics.explain import explain_packets
from camus.compiler.semantics.filter_eval import outcome
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.codec.render import format_message
from camus.compiler.ir.resources import render_report, resource_report
from camus.data import apps_dir

APPS = apps_dir()


def run_demo(n_messages: int, seed: int) -> int:
    spec_path, rules_path = APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"
    click.echo(f"== compile {spec_path.relative_to(APPS.parent)} + {rules_path.relative_to(APPS.parent)}")
    c = compile_files(spec_path, rules_path)
    click.echo(render_report(resource_report(c.pipeline)))

    stocks = ["GOOGL", "AAPL", "MSFT", "NVDA", "NVAX", "TSLA", "JUNK", "IBM", "ORCL"]
    rng = random.Random(seed)
    msgs = itch_messages(n_messages, seed, stocks)
    frames: list[tuple[int, bytes]] = []
    i = 0
    while i < len(msgs):
        k = min(rng.randint(1, 12), len(msgs) - i)
        batch = [message_from_text(c.spec, " ".join(f"{f}={v}" for f, v in m.items()))
                 for m in msgs[i:i + k]]
        frames.append((len(frames) * 1000, build_packet(c.spec, batch, sequence=i + 1)))
        i += k
    click.echo(f"\n== feed: {len(msgs)} Add Order messages in {len(frames)} MoldUDP64 packets "
               f"(1-12 messages each)")
    via_ir, notes = explain_packets(c, frames, engine("ir", c))
    via_rules, _ = explain_packets(c, frames, engine("filters", c))
    xdp_line = _xdp_check(c, frames, via_ir)
    for n in notes:
        click.echo(f"  packet {n.packet}: {n.note}")
    agree = sum(outcome(a.actions) == outcome(b.actions) for a, b in zip(via_ir, via_rules, strict=True))

    per_port: dict[object, list[int]] = defaultdict(list)
    dropped = explicit = 0
    for r in via_ir:
        for p in r.actions.ports:
            per_port[p].append(r.message)
        if r.actions.drop:
            explicit += 1
        elif not r.actions.ports:
            dropped += 1
    click.echo("\n== first messages")
    for r in via_ir[:8]:
        acts = ", ".join(r.actions.names()) or "-"
        click.echo(f"  #{r.message:<3} pkt {r.packet:<3} {format_message(c.spec, r.values):<60} -> {acts}")
    click.echo("\n== delivery report (through the compiled tables)")
    click.echo(f"  {'port':<6} {'messages':>8}  first message numbers")
    for port in sorted(per_port, key=lambda p: (isinstance(p, str), p)):
        ids = per_port[port]
        click.echo(f"  {port!s:<6} {len(ids):>8}  {', '.join(map(str, ids[:12]))}{' ...' if len(ids) > 12 else ''}")
    click.echo(f"  {'none':<6} {dropped:>8}  (nobody subscribed: dropped early)")
    click.echo(f"  {'drop':<6} {explicit:>8}  (explicit drop rule)")
    ok = agree == len(via_ir)
    click.echo(f"\n== check: {agree}/{len(via_ir)} messages get the same actions from the compiled "
               f"tables and from the rules themselves: {'OK' if ok else 'MISMATCH'}")
    click.echo(f"== {xdp_line}")
    click.echo("   next: `camus-xdp explain apps/itch/itch.p4 apps/itch/rules.txt --message "
               "'stock=GOOGL price=60'` shows the path through the tables")
    return 0 if ok and "MISMATCH" not in xdp_line else 1


def _xdp_check(c, frames, via_ir) -> str:
    """As root: the same packets through the real XDP program in the kernel."""
    import os
    if os.geteuid() != 0:
        return "XDP: skipped (run as root to check the kernel data plane too)"
    from camus.dataplane.program import DataplaneError
    try:
        via_xdp, _ = explain_packets(c, frames, engine("xdp", c))
    except DataplaneError as exc:
        return f"XDP: could not load the program: {exc}"
    same = sum(tuple(a.actions.ports) == tuple(b.actions.ports) for a, b in zip(via_ir, via_xdp, strict=True))
    word = "OK" if same == len(via_ir) else "MISMATCH"
    return f"XDP (kernel, BPF_PROG_TEST_RUN): {same}/{len(via_ir)} messages get the same ports: {word}"


def run_lab_demo(n_messages: int, seed: int) -> int:
    """As root: the namespace lab — a publisher sends an ITCH feed to a broker interface running
    camus-xdp, which delivers to three subscribers; prints what each one received."""
    import tempfile

    from camus.lab.namespaces import Lab, mold_order_refs
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.dataplane import counting, runtime

    spec_path, rules_path = APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"
    c = compile_files(spec_path, rules_path, CompileOptions(count_rules=64))     # as `attach` does
    click.echo(f"== lab: publisher -> broker (camus-xdp, native XDP + TC) -> 3 subscribers; "
               f"{len(c.rules)} rules from {rules_path.relative_to(APPS.parent)}")
    stocks = ["GOOGL", "AAPL", "MSFT", "NVDA", "NVAX", "TSLA", "JUNK", "IBM", "ORCL"]
    rng = random.Random(seed)
    interp = PipelineInterpreter(c.pipeline)
    with Lab("camus-demo", 3) as lab, tempfile.TemporaryDirectory() as tmp:
        ports = lab.write_ports(Path(tmp) / "ports.yaml")
        runtime.attach(lab.broker, c, str(spec_path), str(rules_path), "native", ports_path=str(ports))
        want: dict[int, list[int]] = {p: [] for p in lab.ports}
        frames, ref, sent = [], 1, 0
        while sent < n_messages:
            batch = []
            for m in itch_messages(min(rng.randint(1, 12), n_messages - sent), rng.randint(0, 1 << 30), stocks):
                values = message_from_text(c.spec, " ".join(f"{f}={v}" for f, v in m.items()))
                for p in interp.run(values).actions.ports:
                    want[p].append(ref)
                values["add_order.order_ref_number"] = ref
                batch.append(values)
                ref += 1
            sent += len(batch)
            frames.append(build_packet(c.spec, batch, dst_mac=lab.broker_mac(), src_ip=f"{lab.net}.0.1",
                                       dst_ip=f"{lab.net}.0.2", sequence=ref))
        seconds = 2.0 + len(frames) / 2000
        procs = {p: lab.capture(p, seconds) for p in lab.ports}
        lab.send(frames)
        got = {p: [r for payload in lab.collect(procs[p], p) for r in mold_order_refs(payload)] for p in lab.ports}
        stats = runtime.stats(lab.broker)
        per_rule = counting.rule_counts(lab.broker)
    click.echo(f"   feed: {sent} Add Order messages in {len(frames)} MoldUDP64 packets (1-12 each)")
    click.echo(f"   broker: {stats['packets']} packets classified, {stats['no_match']} dropped in XDP "
               f"(nobody subscribed), {stats['explicit_drop']} messages hit a drop rule")
    click.echo("   messages each rule matched (the broker's per-rule counters):")
    for text, n in per_rule:
        click.echo(f"   {n:>7}  {text}")
    click.echo("\n== delivery report (what each subscriber's socket received)")
    click.echo(f"  {'subscriber':<12} {'kind':<10} {'packets':>7} {'messages':>8} {'expected':>8} {'missing':>7} {'extra':>5}")
    ok = True
    for p in lab.ports:
        missing = len(set(want[p]) - set(got[p]))
        extra = len(got[p]) - len(set(got[p]) & set(want[p]))
        ok &= missing == 0 and extra == 0
        kind = "endpoint" if p == lab.remote else "interface"
        click.echo(f"  port {p:<7} {kind:<10} {stats.get(f'port {p}', 0):>7} {len(got[p]):>8} {len(want[p]):>8} "
                   f"{missing:>7} {extra:>5}")
    click.echo(f"\n== check: every subscriber got exactly the messages its filters select: {'OK' if ok else 'MISMATCH'}")
    click.echo("   the lab is torn down; `sudo camus-xdp attach IFACE --spec ... --rules ... --ports ...` "
               "does the same on a real interface")
    return 0 if ok else 1
