"""camus-xdp verify at scale: rules read, tables built by the compiler, then decided equal (or
not) over every message. Times and peak memory of the check alone (the compile is not counted).

    python bench/verify_bench.py [--itch 100000] [--sensor 10000]

The last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import resource
import time


def run(name: str, spec, text: str, strategy: str) -> dict:
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.backends.p4.schema import p4_schema
    from camus.compiler.compile import CompileOptions, compile_rules, no_cyclic_gc
    from camus.verify.check import check
    from camus.verify.machines import ir_machine, p4_machine
    from camus.verify.rules import read_rules
    out: dict = {"workload": name}
    with no_cyclic_gc():
        c = compile_rules(spec, text, options=CompileOptions(strategy=strategy))
        for target in ("ir", "p4"):
            t0 = time.perf_counter()
            rules = read_rules(spec, text)
            m = ir_machine(spec, c.pipeline) if target == "ir" else \
                p4_machine(spec, p4_tables(c.pipeline, spec), p4_schema(spec))
            got = check(rules, m, cover=c.pipeline.cover is not None)
            out[target] = {"verdict": got.verdict, "regions": got.regions,
                           "seconds": round(time.perf_counter() - t0, 1)}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{name:<24} ir {out['ir']['verdict']} {out['ir']['seconds']} s, p4 {out['p4']['verdict']} "
          f"{out['p4']['seconds']} s, peak {out['peak_rss_mb']} MB", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--itch", type=int, default=100_000)
    ap.add_argument("--sensor", type=int, default=0, help="8-attribute sensor rules (exact diagram: small sets)")
    args = ap.parse_args()
    from camus.bench import workloads as w
    from camus.compiler.language.spec_parser import load_spec, parse_spec
    from camus.data import apps_dir
    rows = []
    if args.itch:
        rows.append(run(f"ITCH {args.itch:,}", load_spec(apps_dir() / "itch" / "itch.p4"),
                        "\n".join(w.itch_rules(args.itch, 1)) + "\n", "bdd"))
    if args.sensor:
        rows.append(run(f"sensor {args.sensor:,}", parse_spec(w.SENSOR_SPEC, "sensor.p4"),
                        "\n".join(w.sensor_rules(args.sensor, 1, n_hosts=200)) + "\n", "switch"))
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
