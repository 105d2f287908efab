"""Time an app's packets on XDP one BPF_PROG_TEST_RUN run at a time (dns_bench, ipv6_apps_bench).

One run per call: with `repeat` the kernel reruns on the frame as the last run left it, and a
packet the program rewrites (a DNS query answered, an ILA destination) is not the same packet the
second time. Each figure is the median of RUNS single runs (the kernel's own timing of each).
"""
from __future__ import annotations

import statistics

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec import Spec
from camus.compiler.language.spec_parser import load_spec
from camus.data import apps_dir

RUNS = 20000
BIG = EbpfLimits(max_states=1 << 20, max_exact=1 << 21, max_lpm=1 << 20)   # sized down by sized_limits


def time_cases(app: str, rules: str, cases: dict[str, tuple[object, str]]) -> dict[str, int]:
    """ns per packet for each case: (a frame, or a function of the compiled spec giving one, the
    verdict it must get). A wrong verdict stops the bench: it would time the wrong path."""
    from camus.dataplane.program import XdpProgram
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    spec = load_spec(apps_dir() / app / f"{app}.p4")
    c = compile_rules(spec, rules, options=CompileOptions(strategy="bdd"))
    lim = sized_limits(c.pipeline, BIG, len(c.spec.query_fields))
    prog = XdpProgram.load(c.spec, lim)
    try:
        prog.write(map_contents(c.pipeline, c.spec, lim, bank=0))
        out = {}
        for name, (frame, verdict) in cases.items():
            pkt = frame if isinstance(frame, bytes) else frame(c.spec)   # type: ignore[operator]
            got = prog.run(pkt)
            if got.verdict != verdict:
                raise SystemExit(f"{app} {name}: {got.verdict}, expected {verdict}")
            out[name] = int(statistics.median(prog.run(pkt).ns_per_run for _ in range(RUNS)))
        return out
    finally:
        prog.close()


def frame_of(msg: dict[str, int]):
    """A case's frame built from a message once the spec is compiled (addresses from its fields)."""
    from camus.compiler.codec.packets import build_packet, packet_addresses

    def build(spec: Spec) -> bytes:
        return build_packet(spec, [msg], **packet_addresses(spec, msg))
    return build


def bench_main(doc: str, n_help: str, count_label: str, columns: list[tuple[str, str]], unit: str,
               measure) -> int:
    """The command line of an app bench: `-n N` (repeatable, default 1K and 100K), one table row
    per N of `measure(N)`'s figures under `columns` ((key, title) pairs), then the JSON of all."""
    import argparse
    import json
    import os
    import sys
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, action="append", help=f"{n_help} (default 1000 100000)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (BPF_PROG_TEST_RUN)", file=sys.stderr)
        return 1
    figures = {}
    print(f"{count_label:>8} " + " ".join(f"{title:>{len(title) + 1}}" for _, title in columns) + f"   {unit}")
    for n in args.n or [1000, 100000]:
        f = measure(n)
        figures[str(n)] = f
        print(f"{n:>8} " + " ".join(f"{f[key]:>{len(title) + 1}}" for key, title in columns))
    print(json.dumps(figures))
    return 0
