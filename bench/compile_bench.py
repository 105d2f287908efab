"""Compile-time benchmark on the Camus paper's ITCH workload.

    python bench/compile_bench.py                      # 1K, 10K, 100K subscriptions
    python bench/compile_bench.py --subscriptions 1000000

For each size: table entries (field tables; leaf and domain entries beside), multicast groups,
compile seconds (rule text to validated Pipeline IR) and peak memory. Each size runs in its own
process so peak memory is that size's alone. The last line is one JSON object with the figures.
The paper reports 21,401 entries and 198 multicast groups for 100K filters.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

PAPER = {"entries": 21401, "groups": 198}
SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"


def measure(n: int, seed: int) -> dict:
    from camus.bench.workloads import itch_rules
    from camus.compiler.compile import compile_rules
    from camus.compiler.resources import resource_report
    from camus.compiler.spec_parser import load_spec

    spec = load_spec(SPEC)
    text = "\n".join(itch_rules(n, seed)) + "\n"
    t0 = time.perf_counter()
    c = compile_rules(spec, text, f"itch-{n}")
    seconds = time.perf_counter() - t0
    r = resource_report(c.pipeline)
    return {"subscriptions": n, "entries": r["entries"], "leaf_entries": r["leaf_entries"],
            "domain_entries": r["domain_entries"], "groups": r["groups"],
            "group_members": r["group_members"], "seconds": round(seconds, 3),
            "stages": {k: round(v, 3) for k, v in c.timings.items()},
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "tables": {t["table"]: t["entries"] for t in r["tables"]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, action="append",
                    help="subscription count (repeatable; default 1000 10000 100000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)   # child process: one size, JSON out
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.seed)))
        return 0
    sizes = args.subscriptions or [1000, 10000, 100000]
    rows = []
    print(f"ITCH workload, seed {args.seed}: stock == S and price > P : fwd(H), 100 symbols, "
          f"P in (0,1000), 200 hosts", flush=True)
    print(f"{'subs':>9} {'entries':>8} {'leaf':>7} {'groups':>7} {'members':>9} {'seconds':>8} "
          f"{'peak MB':>8}   stages", flush=True)
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--seed", str(args.seed)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        stages = " ".join(f"{k}={v}" for k, v in r["stages"].items())
        print(f"{n:>9} {r['entries']:>8} {r['leaf_entries']:>7} {r['groups']:>7} "
              f"{r['group_members']:>9} {r['seconds']:>8.2f} {r['peak_mb']:>8.0f}   {stages}", flush=True)
    print(f"paper (100K): {PAPER['entries']} entries, {PAPER['groups']} multicast groups")
    print("entries = match entries of the field tables (stock, price); leaf = leaf-table rows "
          "(one per distinct action set); groups = distinct port sets of 2+ ports")
    key = lambda k: {str(r["subscriptions"]): r[k] for r in rows}  # noqa: E731
    if len(rows) == 1:
        summary = {k: rows[0][k] for k in ("subscriptions", "entries", "leaf_entries", "groups", "seconds", "peak_mb")}
    else:
        summary = {k: key(k) for k in ("entries", "leaf_entries", "groups", "seconds", "peak_mb")}
    summary["paper_100k"] = PAPER
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
