"""Compile-time benchmark: table entries, map memory, compile seconds, peak memory and (as
root, --xdp) the XDP program's ns per message, per workload and size.

    python bench/compile_bench.py                                  # ITCH: 1K, 10K, 100K
    python bench/compile_bench.py --workload siena                 # 10 attributes, 1K 10K 100K
    python bench/compile_bench.py --workload sensors -n 1000 -n 10000
    sudo python bench/compile_bench.py --workload siena --xdp --count-rules 64   # as attach counts
    sudo python bench/compile_bench.py --workload siena --xdp      # + ns/message in the kernel

Workloads (bench/workloads.py): itch (`stock == S and price > P`, the Camus paper's), siena
(10 attributes, 1-6 constraints, Zipf attribute choice, values 0-100), sensors (8 reading
attributes, 1-5 constraints with == != < <= > >=, a fifth with `or`, wide value ranges).
Each size runs in its own process, so peak memory is that size's alone. The strategy column
says what the cost model picked (bdd: decision diagram; bitvector). XDP ns: BPF_PROG_TEST_RUN,
repeat 2e5, median over 5 messages, best of 3 rounds, pinned to one CPU, next to the parse-only
floor of the same message. The last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

PAPER = {"entries": 21401, "groups": 198}
SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"
WORKLOADS = ("itch", "siena", "sensors", "topics")
TOPIC_SPEC = SPEC.parent.parent / "topics" / "topics.p4"


def workload(name: str, n: int, seed: int):
    """(spec, rule text, a message generator) for a workload."""
    from camus.bench import workloads as w
    from camus.compiler.codec.packets import message_from_text
    from camus.compiler.language.spec_parser import load_spec, parse_spec
    if name == "itch":
        spec = load_spec(SPEC)
        syms = w.symbols(100)
        return spec, "\n".join(w.itch_rules(n, seed)), lambda rng: message_from_text(
            spec, f"stock={rng.choice(syms)} price={rng.randint(1, 999)} shares=10 buy_sell_indicator='B'")
    if name == "siena":
        schema = w.siena_schema(10)
        spec = parse_spec(schema.spec_text(), "siena.p4")
        return spec, "\n".join(w.siena_rules(n, schema, seed)), lambda rng: message_from_text(
            spec, w.siena_message(schema, rng))
    if name == "topics":
        spec = load_spec(TOPIC_SPEC)
        return spec, "\n".join(w.topic_rules(n, seed)), lambda rng: message_from_text(
            spec, f"topic={w.topic_name(rng)} value={rng.randint(0, 100)}")
    spec = parse_spec(w.SENSOR_SPEC, "sensors.p4")
    return spec, "\n".join(w.sensor_rules(n, seed)), lambda rng: message_from_text(spec, w.sensor_message(rng))


def xdp_ns(spec, compiled, make_message) -> dict:
    """ns per one-message packet through the loaded program, and the parse-only floor."""
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.compiler.backends.ebpf.tables import map_contents
    from camus.compiler.codec.packets import build_packet
    from camus.dataplane.program import XdpProgram
    from camus.compiler.backends.ebpf.contents import CapacityError
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    try:
        lim = sized_limits(compiled.pipeline, EbpfLimits(max_states=1 << 20, max_exact=1 << 20),
                           len(spec.query_fields))
    except CapacityError as exc:
        return {"xdp_ns": None, "floor_ns": None, "xdp_note": str(exc)}
    prog, floor = XdpProgram.load(spec, lim), XdpProgram.load(spec, EbpfLimits(parse_only=True))
    try:
        prog.write(map_contents(compiled.pipeline, spec, lim))
        rng = random.Random(7)
        pkts = [build_packet(spec, [make_message(rng)]) for _ in range(5)]

        def ns(p) -> int:
            return sorted(p.run(x, repeat=200_000).ns_per_run for x in pkts)[len(pkts) // 2]
        return {"xdp_ns": min(ns(prog) for _ in range(3)), "floor_ns": min(ns(floor) for _ in range(3))}
    finally:
        prog.close()
        floor.close()


def measure(name: str, n: int, seed: int, with_xdp: bool, count_rules: int = 0) -> dict:
    from camus.compiler.compile import CompileOptions, compile_rules
    from camus.compiler.ir.resources import resource_report
    spec, text, make_message = workload(name, n, seed)
    t0 = time.perf_counter()
    c = compile_rules(spec, text + "\n", f"{name}-{n}", CompileOptions(count_rules=count_rules))
    seconds = time.perf_counter() - t0
    r = resource_report(c.pipeline)
    bv = r["bitvector"]
    out = {"workload": name, "subscriptions": n, "strategy": r["strategy"], "entries": r["entries"],
           "leaf_entries": r["leaf_entries"], "groups": r["groups"],
           "map_kib": round((bv["memory_bytes"] if bv else 0) / 1024, 1),
           "seconds": round(seconds, 3), "stages": {k: round(v, 3) for k, v in c.timings.items()},
           "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if bv is None:     # the diagram on a host: descriptors, exact slots, radix buckets, leaves
        out["map_kib"] = round((r["entries"] * 24 + r["leaf_entries"] * 40) / 1024, 1)
    if with_xdp:
        out.update(xdp_ns(spec, c, make_message))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=WORKLOADS, default="itch", help="which rule generator (default itch)")
    ap.add_argument("-n", "--subscriptions", type=int, action="append",
                    help="subscription count (repeatable; default 1000 10000 100000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--xdp", action="store_true", help="also measure ns/message in the kernel (root)")
    ap.add_argument("--count-rules", type=int, default=0, metavar="N",
                    help="give the first N rules their own counters, as attach does (64 there; default 0)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)   # child process: one size, JSON out
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.workload, args.one, args.seed, args.xdp, args.count_rules)))
        return 0
    if args.xdp and os.geteuid() != 0:
        print("--xdp needs root (it loads the XDP program)", file=sys.stderr)
        return 2
    sizes = args.subscriptions or [1000, 10000, 100000]
    rows = []
    print(f"workload {args.workload}, seed {args.seed}  (command: python bench/compile_bench.py "
          f"{' '.join(sys.argv[1:])})", flush=True)
    print(f"{'subs':>9} {'strategy':>9} {'entries':>8} {'leaf':>6} {'map KiB':>9} {'seconds':>8} {'peak MB':>8}"
          f"{'  xdp ns  floor ns' if args.xdp else ''}   stages", flush=True)
    for n in sizes:
        cmd = [sys.executable, __file__, "--workload", args.workload, "--one", str(n), "--seed", str(args.seed),
               "--count-rules", str(args.count_rules)]
        out = subprocess.run(cmd + (["--xdp"] if args.xdp else []), capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        stages = " ".join(f"{k}={v}" for k, v in r["stages"].items())
        xdp = f"  {r['xdp_ns'] or '-':>6}  {r['floor_ns'] or '-':>8}" if args.xdp else ""
        print(f"{n:>9} {r['strategy']:>9} {r['entries']:>8} {r['leaf_entries']:>6} {r['map_kib']:>9} "
              f"{r['seconds']:>8.2f} {r['peak_mb']:>8.0f}{xdp}   {stages}", flush=True)
        if r.get("xdp_note"):
            print(f"{'':>9} xdp: {r['xdp_note']}", flush=True)
    if args.workload == "itch":
        print(f"paper (100K): {PAPER['entries']} entries, {PAPER['groups']} multicast groups")
    print("entries = match entries (diagram: field-table entries; bit vectors: intervals over all fields); "
          "leaf = distinct action sets; map KiB = what the XDP maps hold for the tables")
    print(json.dumps({"workload": args.workload, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
