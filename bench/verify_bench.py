"""camus-xdp verify at scale: rules read, tables built by the compiler, then decided equal (or
not) over every message. Times and peak memory of the check alone (the compile is not counted).

    python bench/verify_bench.py [--itch 100000] [--sensor 10000]
    sudo python bench/verify_bench.py --itch 0 --attached 100000    # `verify IFACE` of a live unit

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


def attached(n: int) -> dict:
    """`camus-xdp verify IFACE` of a unit attached (XDP, generic mode, on a veth pair made here)
    with n ITCH rules: the whole command, maps read from the kernel and decided."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from camus.bench import workloads as w
    from camus.data import apps_dir
    a, b = "cxvb-a", "cxvb-b"
    cmd = [sys.executable, "-c", "from camus.cli import main; main()"]
    subprocess.run(["ip", "link", "del", a], capture_output=True)
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.txt"
        rules.write_text("\n".join(w.itch_rules(n, 1)) + "\n")
        try:
            for x in (a, b):
                subprocess.run(["ip", "link", "set", x, "up"], check=True)
            subprocess.run(cmd + ["attach", a, "--spec", str(apps_dir() / "itch" / "itch.p4"), "--rules", str(rules),
                                  "--mode", "generic"], check=True, capture_output=True)
            t0 = time.perf_counter()
            done = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd + ["verify", a, "--json"],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - t0
        finally:
            subprocess.run(cmd + ["detach", a], capture_output=True)
            subprocess.run(["ip", "link", "del", a], capture_output=True)
    doc = json.loads(done.stdout)
    out = {"workload": f"attached ITCH {n:,}", "verdict": doc["verdict"], "regions": doc.get("regions"),
           "command_seconds": round(seconds, 1), "check_seconds": doc.get("seconds"),
           "peak_rss_mb": int(done.stderr.strip().splitlines()[-1]) // 1024, "exit": done.returncode}
    print(f"{out['workload']:<24} verify IFACE {out['verdict']} {out['command_seconds']} s (command), "
          f"peak {out['peak_rss_mb']} MB", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--itch", type=int, default=100_000)
    ap.add_argument("--sensor", type=int, default=0, help="8-attribute sensor rules (exact diagram: small sets)")
    ap.add_argument("--attached", type=int, default=0, help="ITCH rules attached to a veth (root): verify IFACE")
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
    if args.attached:
        rows.append(attached(args.attached))
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
