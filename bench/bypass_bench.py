"""What the overload bypass saves: XDP ns per packet with exact filtering vs bypassed (the packet
goes by the cover, no table walk), on the ITCH feed (12 Add Orders per packet) at 1K and 100K
subscriptions and on Siena-style events (bit-vector stage) at 1K, through BPF_PROG_TEST_RUN.

    sudo python bench/bypass_bench.py
"""
from __future__ import annotations

import json
import os
import random
import sys

from camus.bench.workloads import itch_rules, siena_rules, siena_schema
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import Compiled, compile_rules
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.data import apps_dir

REPEAT = 20000


def exact_vs_bypass(c: Compiled, packet: bytes) -> tuple[int, int]:
    from camus.dataplane.maps import CFG_BYPASS_PPS
    from camus.dataplane.program import XdpProgram
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    lim = sized_limits(c.pipeline, EbpfLimits(), len(c.spec.query_fields))
    prog = XdpProgram.load(c.spec, lim)
    try:
        prog.write(map_contents(c.pipeline, c.spec, lim, bank=0))
        out = []
        for pps in (0, 1):                  # 1 packet/s: every packet of the run is over budget
            prog.maps.cfg(CFG_BYPASS_PPS, pps)
            out.append(min(prog.run(packet, REPEAT).ns_per_run for _ in range(5)))
        return out[0], out[1]
    finally:
        prog.close()


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("needs root (loads the XDP program): sudo python bench/bypass_bench.py")
    rows = []
    spec = load_spec(apps_dir() / "itch" / "itch.p4")
    rng = random.Random(1)
    for n in (1000, 100000):
        c = compile_rules(spec, "\n".join(itch_rules(n, 1)))
        msgs = [message_from_text(spec, f"stock={rng.choice(['GOOGL', 'AAPL', 'MSFT', 'NVDA'])} "
                                        f"price={rng.randint(1, 1000)}") for _ in range(12)]
        rows.append(("itch", n, *exact_vs_bypass(c, build_packet(spec, msgs))))
    schema = siena_schema(10)
    sspec = parse_spec(schema.spec_text(), "siena.p4")
    c = compile_rules(sspec, "\n".join(siena_rules(1000, schema, seed=2)))
    rows.append(("siena", 1000, *exact_vs_bypass(c, build_packet(sspec, [{q.path: rng.randint(0, 100)
                                                                          for q in sspec.query_fields}]))))
    print(f"{'workload':>8} {'subs':>7} {'exact ns':>9} {'bypass ns':>10}")
    for w, n, e, b in rows:
        print(f"{w:>8} {n:>7} {e:>9} {b:>10}")
    print(json.dumps([{"workload": w, "subscriptions": n, "exact_ns": e, "bypass_ns": b} for w, n, e, b in rows]))


if __name__ == "__main__":
    main()
