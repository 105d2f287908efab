"""`explain --via xdp` answers through the real kernel program, frame by frame."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
SPEC, RULES = str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")


def test_explain_via_xdp_matches_the_ir_on_a_batched_frame() -> None:
    spec = load_spec(SPEC)
    texts = ["stock=GOOGL price=2000000", "stock=IBM", "stock=AAPL", "stock=JUNK", "stock=TSLA buy_sell_indicator='S'"]
    frame = build_packet(spec, [message_from_text(spec, t) for t in texts]).hex()
    answers = {}
    for via in ("xdp", "ir"):
        r = CliRunner().invoke(main, ["explain", SPEC, RULES, "--via", via, "--packet", frame, "--json"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        answers[via] = [(o["message"], o["actions"], o["ports"]) for o in map(json.loads, r.output.splitlines())
                        if "message" in o]
    assert answers["xdp"] == answers["ir"]
    assert [a[1] for a in answers["xdp"]] == [["fwd(1,2)"], [], ["fwd(2)"], ["drop"], ["fwd(1,3)"]]


def test_explain_via_xdp_prints_each_ports_pruned_packet() -> None:
    from camus.compiler.compile import compile_files
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.lab.namespaces import mold_order_refs
    from camus.compiler.codec.packets import decode_packet
    spec = load_spec(SPEC)
    interp = PipelineInterpreter(compile_files(SPEC, RULES).pipeline)
    texts = ["stock=GOOGL price=2000000", "stock=IBM", "stock=AAPL", "stock=JUNK", "stock=TSLA buy_sell_indicator='S'"]
    msgs = [message_from_text(spec, t) for t in texts]
    for i, m in enumerate(msgs):
        m["add_order.order_ref_number"] = 100 + i
    frames = [build_packet(spec, msgs), build_packet(spec, [message_from_text(spec, "stock=IBM")])]
    args = ["explain", SPEC, RULES, "--via", "xdp", "--json"] + [a for f in frames for a in ("--packet", f.hex())]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    outputs = [o for o in map(json.loads, r.output.splitlines()) if "copies" in o]
    assert [o["verdict"] for o in outputs] == ["XDP_PASS", "XDP_DROP"]
    copies = {c["port"]: c for c in outputs[0]["copies"]}
    want = {p: [i for i, m in enumerate(msgs) if p in interp.run(m).actions.ports] for p in (1, 2, 3)}
    assert sorted(copies) == [p for p in (1, 2, 3) if want[p]]
    for port, copy in copies.items():
        assert copy["messages"] == want[port]
        frame = bytes.fromhex(copy["frame"])
        decoded = decode_packet(spec, frame)            # lengths, count and checksum consistent
        assert decoded.error is None, decoded.error
        assert mold_order_refs(frame[14 + 20 + 8:]) == [100 + i for i in want[port]]
    assert outputs[1]["copies"] == []
