"""The benchmark's BPF run-time accounting (bench/bpf_cpu.py) reads what the kernel counted."""
from __future__ import annotations

import pytest

from camus.bench.bpf_cpu import SYSCTL, BpfStats, broker_seconds, run_times
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane.program import XdpProgram
from tests.conftest import APPS

pytestmark = pytest.mark.bpf


def test_run_time_and_count_of_the_classifier_while_stats_are_on() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    c = compile_rules(spec, "stock == GOOGL : fwd(1)\n")
    prog = XdpProgram.load(spec)
    try:
        prog.write(map_contents(c.pipeline, spec, prog.limits, bank=0))
        pkt = build_packet(spec, [message_from_text(spec, "stock=GOOGL")] * 3)
        was = SYSCTL.read_text().strip()
        with BpfStats():
            assert SYSCTL.read_text().strip() == "1"
            before, seconds = run_times(), broker_seconds()
            prog.run(pkt, repeat=5000)
            after = run_times()
            assert broker_seconds() > seconds
        assert SYSCTL.read_text().strip() == was                       # restored
        runs = after["camus_xdp"][1] - before.get("camus_xdp", (0, 0))[1]
        spent = after["camus_xdp"][0] - before.get("camus_xdp", (0, 0))[0]
        assert runs >= 5000 and 0 < spent / runs < 100_000            # ns per run, whatever else ran
        assert after.get("camus_msg", (0, 0))[1] == before.get("camus_msg", (0, 0))[1]   # tail calls: the caller's
    finally:
        prog.close()
