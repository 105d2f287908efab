"""Rule-file parsing time by size: the 8-attribute sensor workload (bench/workloads.py
sensor_rules: conjunctions of 1-5 relations, a fifth with an `or`) at 1K, 10K and 100K rules,
parsed as every command parses them (the cyclic collector off, as compile_rules runs it).

    python bench/parse_bench.py [-n 1000 -n 10000 -n 100000] [--repeat 3]

Prints ms per size (best of --repeat) and us per rule; the last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> int:
    from camus.bench.workloads import sensor_rules
    from camus.compiler.compile import no_cyclic_gc
    from camus.compiler.language.rules_parser import parse_rules
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, action="append", help="rules (default 1000 10000 100000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out = []
    for n in args.n or [1000, 10_000, 100_000]:
        text = "\n".join(sensor_rules(n)) + "\n"
        best = float("inf")
        for _ in range(args.repeat):
            with no_cyclic_gc():
                t0 = time.perf_counter()
                rules, _ = parse_rules(text, f"sensor-{n}.txt")
                best = min(best, time.perf_counter() - t0)
        assert len(rules) == n
        out.append({"rules": n, "ms": round(best * 1e3, 1), "us_per_rule": round(best * 1e6 / n, 2)})
        print(f"{n:>8} rules  {best * 1e3:9.1f} ms  {best * 1e6 / n:6.2f} us/rule")
    print(json.dumps({"parse": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
