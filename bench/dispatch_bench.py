"""What sharing an interface costs: ns per packet of each app's classifier run alone and run
behind the dispatcher (bpf/camus_dispatch.c: EtherType / UDP port lookup, then a tail call).

Three apps as `attach --app` loads them (dataplane/apps.py): ITCH with N generated
subscriptions (UDP 26400, MoldUDP64 batches of 1 and 12 messages), the Kafka shim (UDP 9092,
topic levels) and the attribute-pairs feed (EtherType 0x9001, no IP). Each figure is the
kernel's own timing of BPF_PROG_TEST_RUN with `repeat`, median of interleaved rounds, on one
pinned CPU; the verdict of every case is checked to be the same both ways first.

    sudo .venv/bin/python bench/dispatch_bench.py -n 1000 -n 100000
"""
from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics

from camus.bench.workloads import itch_messages, itch_rules
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.data import apps_dir

ROUNDS = 7


def load_apps(n_rules: int):
    """(name, XdpProgram, frames by case) for the three apps, tables written, app ids 0..2."""
    from camus.dataplane.program import XdpProgram
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    from camus.compiler.backends.ebpf.program import EbpfLimits
    itch = load_spec(apps_dir() / "itch" / "itch.p4")
    kafka = load_spec(apps_dir() / "kafka" / "kafka.p4")
    attrs = load_spec(apps_dir() / "attrs" / "pairs.p4")
    texts = [message_from_text(itch, " ".join(f"{k}={v}" for k, v in m.items())) for m in itch_messages(12, seed=3)]
    cases = [
        ("itch", itch, "\n".join(itch_rules(n_rules)) + "\n",
         {"itch 1 msg": build_packet(itch, texts[:1]),
          "itch 12 msgs": build_packet(itch, texts)}),
        ("kafka", kafka, (apps_dir() / "kafka" / "rules.txt").read_text(),
         {"kafka record": build_packet(kafka, [message_from_text(kafka, "topic=orders partition=2 key_hash=5")])}),
        ("attrs", attrs, (apps_dir() / "attrs" / "rules.txt").read_text(),
         {"attrs pairs": build_packet(attrs, [message_from_text(attrs, "kind=3 temperature=3001 sensor=1")])}),
    ]
    loaded = []
    for slot, (name, spec, rules, frames) in enumerate(cases):
        c = compile_rules(spec, rules, options=CompileOptions())
        lim = sized_limits(c.pipeline, EbpfLimits(), len(c.spec.query_fields))
        prog = XdpProgram.load(c.spec, lim, app_id=slot)
        prog.write(map_contents(c.pipeline, c.spec, lim, bank=0))
        loaded.append((name, prog, frames))
    return loaded


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--subscriptions", type=int, action="append", help="ITCH rules (repeatable; default 1000)")
    ap.add_argument("--repeat", type=int, default=200_000, help="BPF_PROG_TEST_RUN repeat per round")
    args = ap.parse_args()
    from camus.dataplane import apps
    from camus.dataplane.testrun import test_run
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    random.seed(1)
    for n in args.subscriptions or [1000]:
        loaded = load_apps(n)
        bpf, fn = apps.load_dispatcher()
        try:
            for slot, (name, prog, frames) in enumerate(loaded):
                bpf[b"dispatch_progs"][ctypes.c_int(slot)] = ctypes.c_int(prog.fn.fd)
                for key in apps.dispatch_keys(prog.spec):
                    apps.write_key(bpf, key, slot)
            print(f"# {n} ITCH subscriptions; ns per packet, median of {ROUNDS} rounds x {args.repeat} runs")
            print(f"{'case':<14} {'alone':>7} {'shared':>7} {'cost':>6}")
            for name, prog, frames in loaded:
                for case, pkt in frames.items():
                    alone, shared = test_run(prog.fn.fd, pkt, 1), test_run(fn.fd, pkt, 1)
                    if alone.verdict != shared.verdict:
                        raise SystemExit(f"{case}: {alone.verdict} alone but {shared.verdict} behind the dispatcher")
                    a, s = [], []
                    for _ in range(ROUNDS):
                        a.append(test_run(prog.fn.fd, pkt, args.repeat).ns_per_run)
                        s.append(test_run(fn.fd, pkt, args.repeat).ns_per_run)
                    ma, ms = statistics.median(a), statistics.median(s)
                    print(f"{case:<14} {ma:>7.0f} {ms:>7.0f} {ms - ma:>+6.0f}   ({alone.verdict})")
        finally:
            bpf.cleanup()
            for _, prog, _ in loaded:
                prog.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
