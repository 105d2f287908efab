"""query_default_action in the kernel: a message no rule delivers is handed to the host stack
(its custom actions run there), for the diagram and the bit-vector stage alike, as the IR says."""
from __future__ import annotations

import pytest

from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import parse_spec
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
RULES = """stock == GOOGL and price > 50 : fwd(1)
stock == AAPL : fwd(2)
stock == JUNK : drop
stock == MSFT and price < 10 : fwd(1), fwd(3)
"""
MESSAGES = ["stock=GOOGL price=60", "stock=GOOGL price=40", "stock=AAPL", "stock=JUNK", "stock=IBM price=5",
            "stock=MSFT price=5", "stock=MSFT price=50"]


@pytest.mark.parametrize("strategy", ["bdd", "bitvector"])
def test_unmatched_messages_go_to_the_stack_with_the_default(strategy: str) -> None:
    spec = parse_spec((APPS / "itch" / "itch.p4").read_text() + "\n@pragma query_action(notfound)\n"
                      "@pragma query_default_action(notfound)\n",
                      "itch_default.p4")
    c = compile_rules(spec, RULES, options=CompileOptions(strategy=strategy))
    xdp, ir = engine("xdp", c), engine("ir", c)
    try:
        for text in MESSAGES:
            values = message_from_text(spec, text)
            assert xdp.run(values, 0)[0].names() == ir.run(values, 0)[0].names(), text
        assert ir.run(message_from_text(spec, "stock=IBM"), 0)[0].names() == ["notfound()"]
        # the frame's fate: one unmatched message sends the packet up; matched-only ones do not
        prog = xdp.prog                                        # type: ignore[attr-defined]
        up = prog.classify(build_packet(spec, [message_from_text(spec, "stock=IBM")]))
        kept = prog.classify(build_packet(spec, [message_from_text(spec, "stock=JUNK")]))
        assert up.verdict == "XDP_PASS" and kept.verdict == "XDP_DROP"
    finally:
        xdp.prog.close()                                       # type: ignore[attr-defined]
