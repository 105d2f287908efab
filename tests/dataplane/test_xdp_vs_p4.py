"""A switch and a host given the same rules deliver the same messages: the P4 entries (run with
P4 match semantics) against the XDP program loaded in the kernel, on multi-message ITCH
packets, with the original-syntax (P4_14) Camus spec."""
from __future__ import annotations

import random

import pytest

from camus.bench.workloads import itch_messages, itch_rules, symbols
from camus.compiler.backends.p4.entries import check_program_fit
from camus.compiler.compile import compile_rules
from camus.compiler.backends.registry import engine
from camus.compiler.semantics.explain import explain_packets
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS

pytestmark = pytest.mark.bpf


def _frames(spec, seed: int, n: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    names = symbols(100)[:20] + ["GOOGL", "AAPL", "MSFT", "NVDA", "ZZZZ"]
    out = []
    for i in range(n):
        vals = itch_messages(rng.randint(1, 12), seed=seed * 1000 + i, stocks=names)
        msgs = [message_from_text(spec, f"stock={v['stock']} price={v['price']} shares={v['shares']} "
                                        f"buy_sell_indicator={ord(v['buy_sell_indicator'])}") for v in vals]
        out.append((i * 1000, build_packet(spec, msgs)))
    return out


@pytest.mark.parametrize("rules", ["compat", "itch-50", "itch-400"])
def test_switch_entries_and_xdp_program_deliver_alike(rules: str) -> None:
    spec = load_spec(APPS / "camus_compat" / "itch.p4")
    text = ((APPS / "camus_compat" / "rules.txt").read_text() if rules == "compat"
            else "\n".join(itch_rules(int(rules.split("-")[1]), seed=3)))
    c = compile_rules(spec, text)
    check_program_fit(c.pipeline, spec)
    frames = _frames(spec, seed=len(text), n=120)
    xdp, _ = explain_packets(c, frames, engine("xdp", c))
    sw, _ = explain_packets(c, frames, engine("p4", c))
    assert len(xdp) == len(sw) > 120
    delivered = 0
    for a, b in zip(xdp, sw):
        assert (a.packet, a.values) == (b.packet, b.values)
        # a drop rule only matters where nothing else delivers (the switch's leaf has one action)
        assert (tuple(a.actions.ports), a.actions.drop and not a.actions.ports) == \
            (tuple(b.actions.ports), b.actions.drop and not b.actions.ports), a.values
        delivered += bool(a.actions.ports)
    assert delivered > 0
