"""Compile the per-device rule sets of a large topology in parallel on Spark and collect the
resource reports (the controller's work for thousands of devices, spread over a cluster).

    python bench/spark_compile.py [--nodes N | --edge-list FILE] [--policy mst|mst++|mr|tr]
                                  [--per-host K] [--master local[*]]

Every executor imports camus and compiles its share of (device, rules) pairs; the driver gets
one resource report per device. The last line is one JSON object with the totals.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"


def compile_partition(spec_text: str, alpha: int):
    """A mapPartitions function: (device, rules) -> (device, report, seconds)."""
    def run(rows):
        from camus.compiler.compile import CompileOptions, compile_rules
        from camus.compiler.ir.resources import resource_report
        from camus.compiler.language.spec_parser import parse_spec
        spec = parse_spec(spec_text, "spec.p4")
        for device, rules in rows:
            t0 = time.perf_counter()
            c = compile_rules(spec, rules, f"<{device}>", CompileOptions(alpha=alpha))
            yield device, json.dumps(resource_report(c.pipeline)), time.perf_counter() - t0
    return run


def compile_on_spark(spark, device_rules: dict[str, str], spec_text: str, alpha: int = 1,
                     partitions: int | None = None) -> dict[str, dict]:
    sc = spark.sparkContext
    rdd = sc.parallelize(sorted(device_rules.items()), partitions or max(2, sc.defaultParallelism * 2))
    out = rdd.mapPartitions(compile_partition(spec_text, alpha)).collect()
    return {d: {**json.loads(r), "compile_s": s} for d, r, s in out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--edge-list")
    ap.add_argument("--policy", default="mst++", choices=["mst", "mst++", "mr", "tr"])
    ap.add_argument("--per-host", type=int, default=2)
    ap.add_argument("--alpha", type=int, default=1)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from camus.bench.analysis import quiet, spark_session
    from camus.bench.routing_bench import itch_subscriptions
    from camus.controller.routing import route
    from camus.controller.topology import fat_tree, from_edge_list, random_graph
    if args.policy in ("mr", "tr"):
        t = fat_tree(4)
    elif args.edge_list:
        t = from_edge_list(Path(args.edge_list).read_text().splitlines())
    else:
        t = random_graph(args.nodes, seed=args.seed)
    routing = route(t, itch_subscriptions(t.hosts, args.per_host, args.seed), args.policy)
    rules = {d: routing.device_rules(d) for d in routing.filters}
    spark = quiet(spark_session(args.master, "camus-compile"))
    try:
        t0 = time.perf_counter()
        reports = compile_on_spark(spark, rules, SPEC.read_text(), args.alpha)
        wall = time.perf_counter() - t0
    finally:
        spark.stop()
    entries = sum(r["total_entries"] for r in reports.values())
    busy = sum(r["compile_s"] for r in reports.values())
    print(f"{len(reports):,} devices compiled on {args.master} in {wall:.1f} s wall ({busy:.1f} s of compile "
          f"work, x{busy / wall:.2f} parallel); {entries:,} entries in all, "
          f"largest device {max(r['total_entries'] for r in reports.values()):,}")
    print(json.dumps({"devices": len(reports), "wall_s": round(wall, 2), "compile_work_s": round(busy, 2),
                      "entries": entries, "policy": args.policy}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
