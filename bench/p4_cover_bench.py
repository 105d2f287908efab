"""The switch cover of multi-attribute rule sets: compile time, size and over-delivery per port.

For each rule set (sensor-style filters over 8 attributes, or Siena-style over 10), the rules are
compiled as `camus-xdp compile SPEC RULES --target p4` does (strategy "switch", fitted to the
default Tofino budget), then random messages from the workload's own generator are classified
three ways: the exact rules (the bit-vector stage through the reference interpreter), the
switch's tables (the IR interpreter) and the P4 entries (`explain --via p4`'s engine). The last
two must agree on every message and must never deliver less than the exact rules; the table
gives how many more (message, port) deliveries the switch makes: over all ports, and per port
(median, 90th percentile, worst; ports the exact rules never reach are left out of the per-port
figures since any delivery there is infinitely more).

    python bench/p4_cover_bench.py                                   # sensor 1K, 32, 200 and 500 ports
    python bench/p4_cover_bench.py --workload siena -n 10000 --ports 200

Each configuration prints one JSON line at the end. Ports run from 0 to 511 at most: a switch's
egress port is 9 bits (the compile refuses a rule naming port 512 or more, and so does this bench).
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time


def rules_for(workload: str, n: int, ports: int, seed: int) -> tuple[str, str, object]:
    """(spec text, rules text, message generator) of a workload."""
    from camus.bench import workloads as w
    if workload == "sensor":
        return w.SENSOR_SPEC, "\n".join(w.sensor_rules(n, seed, n_hosts=ports)), w.sensor_message
    schema = w.siena_schema(10, seed)
    return (schema.spec_text(), "\n".join(w.siena_rules(n, schema, seed, n_hosts=ports)),
            lambda rng: w.siena_message(schema, rng))


def run(workload: str, n: int, ports: int, messages: int, seed: int) -> dict[str, object]:
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.p4.backend import check_ports
    from camus.compiler.backends.registry import backend, engine
    from camus.compiler.codec.packets import message_from_text
    from camus.compiler.compile import CompileOptions, compile_rules
    from camus.compiler.fitting import build_fitted
    from camus.compiler.language.spec_parser import parse_spec
    from camus.compiler.semantics.explain import IrEngine

    spec_text, text, message = rules_for(workload, n, ports, seed)
    spec = parse_spec(spec_text, f"{workload}.p4")
    notices: list[str] = []
    t0 = time.perf_counter()
    c = compile_rules(spec, text, f"{workload}-{n}.txt", CompileOptions(strategy="switch"))
    fitted = build_fitted(c, backend("p4"), TargetOptions(notice=notices.append))
    seconds = time.perf_counter() - t0
    cover = fitted.compiled
    check_ports(cover.pipeline, cover.source)      # what `compile --target p4` refuses
    exact = IrEngine(compile_rules(spec, text, options=CompileOptions(strategy="bitvector")))
    tables, entries = IrEngine(cover), engine("p4", cover)
    rng = random.Random(seed + 1)
    got_exact: dict[object, int] = {}
    got_cover: dict[object, int] = {}
    for _ in range(messages):
        values = message_from_text(spec, message(rng))       # type: ignore[operator]
        want = set(exact.run(values, 0)[0].ports)
        have = set(tables.run(values, 0)[0].ports)
        p4 = set(entries.run(values, 0)[0].ports)
        if have != p4:
            raise SystemExit(f"the P4 entries and the tables disagree on {values}: {sorted(p4)} vs {sorted(have)}")
        if not want <= have:
            raise SystemExit(f"the switch under-delivers {sorted(want - have)} for {values}")
        for p in want:
            got_exact[p] = got_exact.get(p, 0) + 1
        for p in have:
            got_cover[p] = got_cover.get(p, 0) + 1
    per_port = sorted(got_cover[p] / got_exact[p] for p in got_exact)
    total_exact, total_cover = sum(got_exact.values()), sum(got_cover.values())
    info = cover.pipeline.cover
    return {
        "workload": workload, "filters": n, "ports": ports, "messages": messages,
        "compile_s": round(seconds, 2), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "entries": cover.pipeline.entry_count, "groups": len(cover.pipeline.groups),
        "cover": info.to_json() if info else None, "fitted": notices,
        "exact_per_message": round(total_exact / messages, 2), "switch_per_message": round(total_cover / messages, 2),
        "over_delivery": round(total_cover / total_exact, 3) if total_exact else None,
        "port_median": round(statistics.median(per_port), 2) if per_port else None,
        "port_p90": round(per_port[int(0.9 * (len(per_port) - 1))], 2) if per_port else None,
        "port_worst": round(per_port[-1], 2) if per_port else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["sensor", "siena"], default="sensor")
    ap.add_argument("-n", "--filters", type=int, action="append", help="default 1000")
    ap.add_argument("--ports", type=int, action="append", help="subscriber ports (default 32, 200 and 500; at most 511)")
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rows = [run(args.workload, n, p, args.messages, args.seed)
            for n in args.filters or [1000] for p in args.ports or [32, 200, 500]]
    print(f"{'workload':<8} {'filters':>7} {'ports':>5} {'compile s':>9} {'entries':>7} {'exact/msg':>9} "
          f"{'switch/msg':>10} {'over':>5} {'port med':>8} {'p90':>6} {'worst':>6}")
    for r in rows:
        print(f"{r['workload']:<8} {r['filters']:>7} {r['ports']:>5} {r['compile_s']:>9} {r['entries']:>7} "
              f"{r['exact_per_message']:>9} {r['switch_per_message']:>10} {r['over_delivery']!s:>5} "
              f"{r['port_median']!s:>8} {r['port_p90']!s:>6} {r['port_worst']!s:>6}")
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
