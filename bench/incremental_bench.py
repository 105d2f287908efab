"""Incremental compile against compiling from scratch, on ITCH rule sets.

    python bench/incremental_bench.py [-n 1000 -n 10000 -n 100000] [--changes 10]

Per size: a from-scratch `compile_rules`, the first `IncrementalCompiler.compile` (cold), then
`--changes` one-subscription changes (a new rule added, then removed again, alternately), each
compiled incrementally; the medians and maxima. The last line is one JSON object.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"


def measure(n: int, changes: int) -> dict:
    from camus.bench.workloads import itch_rules
    from camus.compiler.compile import CompileOptions, compile_rules
    from camus.compiler.incremental import IncrementalCompiler
    from camus.compiler.language.spec_parser import load_spec
    spec = load_spec(SPEC)
    opts = CompileOptions(strategy="bdd")
    base = "".join(f"{r}\n" for r in itch_rules(n, 1) if r.strip())
    t0 = time.perf_counter()
    compile_rules(spec, base, options=opts)
    scratch = time.perf_counter() - t0
    inc = IncrementalCompiler(spec, opts)
    t0 = time.perf_counter()
    inc.compile(base)
    cold = time.perf_counter() - t0
    times = []
    for k in range(changes):
        text = base + (f"stock == ZZ{k:02d} and price > {k + 1} : fwd(7)\n" if k % 2 == 0 else "")
        t0 = time.perf_counter()
        inc.compile(text)
        times.append(time.perf_counter() - t0)
        assert inc.incremental_last
    return {"subscriptions": n, "scratch_s": round(scratch, 3), "cold_s": round(cold, 3),
            "change_ms_p50": round(statistics.median(times) * 1e3, 1), "change_ms_max": round(max(times) * 1e3, 1)}


def main() -> int:
    from camus.bench.sizes import run_sizes, size_args
    default = [1000, 10000, 100000]
    ap = size_args(__doc__, default)
    ap.add_argument("--changes", type=int, default=10)
    args = ap.parse_args()
    return run_sizes("incremental", f"incremental_bench.py --changes {args.changes}", args.n or default,
                     f"{'subs':>8} {'from scratch':>13} {'cold':>8} {'one change p50 / max':>22}",
                     lambda n: measure(n, args.changes),
                     lambda n, r: f"{n:>8,} {r['scratch_s']:>11.2f} s {r['cold_s']:>6.2f} s "
                                  f"{r['change_ms_p50']:>10.0f} / {r['change_ms_max']:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
