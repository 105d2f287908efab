"""`explain --via xdp` answers through the real kernel program, frame by frame."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.packets import build_packet, message_from_text
from camus.compiler.spec_parser import load_spec
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
        answers[via] = [(o["message"], o["actions"], o["ports"]) for o in map(json.loads, r.output.splitlines())]
    assert answers["xdp"] == answers["ir"]
    assert [a[1] for a in answers["xdp"]] == [["fwd(1,2)"], [], ["fwd(2)"], ["drop"], ["fwd(1,3)"]]
