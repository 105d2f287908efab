"""Pairs vs bitmask (EtherType 0x9001 attribute encodings, p4bsub Fig. 5): bytes on the wire and
XDP ns per frame by the number of attributes a frame carries.

For k = 1..N attributes present (of the N 32-bit attributes of a generated dictionary), both
encodings of the same message: frame bytes (Ethernet included) and the XDP program's time per
frame through BPF_PROG_TEST_RUN (rules: one equality filter per attribute, so the classifier
reads every attribute), next to the parse-only floor of the same encoding.

    sudo python bench/attrs_bench.py --attributes 16
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from camus.compiler.codec import attrs
from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import parse_spec


def spec_text(n: int, kind: str) -> str:
    fields = "".join(f"    bit<32> a{i};\n" for i in range(1, n + 1))
    pragmas = "".join(f"@pragma query_field(attrs.a{i})\n" for i in range(1, n + 1))
    return ("header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }\n"
            f"header attrs_t {{\n{fields}}}\nstruct headers {{ ethernet_t ethernet; attrs_t attrs; }}\n"
            f"@pragma message_framing(attrs_{kind})\n{pragmas}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attributes", type=int, default=16)
    ap.add_argument("--xdp", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    n = args.attributes
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x90\x01"
    rows = []
    progs = {}
    if args.xdp:
        from camus.compiler.backends.ebpf.program import EbpfLimits
        from camus.compiler.backends.ebpf.tables import map_contents
        from camus.dataplane.program import XdpProgram
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    for kind in ("pairs", "bitmask"):
        spec = parse_spec(spec_text(n, kind), f"attrs{n}_{kind}.p4")
        if args.xdp:
            c = compile_rules(spec, "\n".join(f"a{i} == {i} : fwd({1 + i % 4})" for i in range(1, n + 1)))
            prog, floor = XdpProgram.load(spec), XdpProgram.load(spec, EbpfLimits(parse_only=True))
            prog.write(map_contents(c.pipeline, spec))
            progs[kind] = (spec, prog, floor)
    print(f"(command: python bench/attrs_bench.py {' '.join(sys.argv[1:])})")
    print(f"{'present':>7} {'pairs B':>8} {'bitmask B':>9}" + (f" {'pairs ns':>9} {'floor':>6} {'bitmask ns':>10} {'floor':>6}"
                                                              if args.xdp else ""))
    for k in range(1, n + 1):
        values = {f"attrs.a{i}": i for i in range(1, n + 1)}
        present = [f"attrs.a{i}" for i in range(1, k + 1)]
        row: dict = {"present": k}
        for kind in ("pairs", "bitmask"):
            spec = parse_spec(spec_text(n, kind), "x.p4")
            frame = eth + attrs.encode(spec, values, present)
            row[f"{kind}_bytes"] = len(frame)
            if args.xdp:
                _, prog, floor = progs[kind]
                row[f"{kind}_ns"] = min(prog.run(frame, repeat=200_000).ns_per_run for _ in range(3))
                row[f"{kind}_floor_ns"] = min(floor.run(frame, repeat=200_000).ns_per_run for _ in range(3))
        rows.append(row)
        line = f"{k:>7} {row['pairs_bytes']:>8} {row['bitmask_bytes']:>9}"
        if args.xdp:
            line += (f" {row['pairs_ns']:>9} {row['pairs_floor_ns']:>6} {row['bitmask_ns']:>10} "
                     f"{row['bitmask_floor_ns']:>6}")
        print(line, flush=True)
    for _, prog, floor in progs.values():
        prog.close()
        floor.close()
    print(json.dumps({"attributes": n, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
