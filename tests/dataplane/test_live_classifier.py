"""Lab test (root, namespaces): a LiveClassifier holding an attached veth. Subscription changes
go to the maps as deltas while real frames from the publisher namespace cross the veth: each
change is seen by the next frame, unchanged subscriptions never miss one, a bad change changes
nothing, a change the bank cannot hold becomes a whole write, and the state file follows, so
`camus-xdp update` and `detach` work after it."""
from __future__ import annotations

import os

import pytest

from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import attachment, runtime
from camus.dataplane import installed as state
from camus.dataplane.live import LiveClassifier
from camus.dataplane.program import DataplaneError
from tests.conftest import APPS
from tests.dataplane.test_lab_attach import BRK, lab, received  # noqa: F401  (the lab fixture)

pytestmark = pytest.mark.netns
SPEC_PATH = APPS / "itch" / "itch.p4"


def _frame(spec, stock: str, price: int) -> bytes:
    return build_packet(spec, [message_from_text(spec, f"stock={stock} price={price}")],
                        src_ip="10.77.0.1", dst_ip="10.77.0.2")


def test_changes_reach_the_attached_program_as_deltas(lab, tmp_path) -> None:  # noqa: F811
    spec = load_spec(SPEC_PATH)
    base = ["stock == GOOGL and price > 10 : fwd(1)", "stock == MSFT : fwd(2)"]
    rules = tmp_path / "rules.txt"
    rules.write_text("".join(f"{ln}\n" for ln in base))
    runtime.attach(BRK, compile_rules(spec, rules.read_text()), str(SPEC_PATH), str(rules), "native")
    googl, msft, ibm = _frame(spec, "GOOGL", 50), _frame(spec, "MSFT", 5), _frame(spec, "IBM", 70)
    with LiveClassifier(BRK) as live:
        assert received([googl, msft, ibm]) == [True, True, False]      # the takeover kept the set
        rep = live.apply(["stock == IBM and price > 60 : fwd(2)"], [])
        assert not rep.whole and 0 < rep.writes < 50
        assert received([googl, msft, ibm]) == [True, True, True]
        live.apply([], ["stock == MSFT : fwd(2)"])
        assert received([googl, msft, ibm]) == [True, False, True]
        assert live.apply(["stock == IBM and price > 60 : fwd(2)"], ["stock == IBM and price > 60 : fwd(2)"]).writes == 0
        with pytest.raises(CompileErrors):                   # a bad line: nothing changes
            live.apply(["stock == AAPL : fwd(4)", "stok == X : fwd(1)"], [])
        with pytest.raises(KeyError):                        # removing what is not there
            live.apply([], ["stock == AAPL : fwd(4)"])
        assert received([googl, msft, ibm, _frame(spec, "AAPL", 1)]) == [True, False, True, False]
        # many changes and their removal: ids and storage are reused after the quarantine
        for k in range(30):
            assert not live.apply([f"stock == Z{k:03d} and price > {k} : fwd({1 + k % 2})"], []).whole
        for k in range(30):
            live.apply([], [f"stock == Z{k:03d} and price > {k} : fwd({1 + k % 2})"])
        # a port no rule used (no ports file: port bits follow the rules): a whole write
        assert live.apply(["stock == HD : fwd(7)"], []).whole
        assert received([_frame(spec, "HD", 1)]) == [True]
        live.apply([], ["stock == HD : fwd(7)"])
        assert received([googl, msft, ibm, _frame(spec, "Z001", 50)]) == [True, False, True, False]
        # a range test on the exact stock table: a whole write into the other bank
        bank = live.layout.bank
        rep = live.apply(["stock > ZZZ : fwd(1)"], [])
        assert rep.whole and live.layout.bank == 1 - bank
        assert received([googl, _frame(spec, "ZZZZ", 1), ibm]) == [True, True, True]
        live.apply([], ["stock > ZZZ : fwd(1)"])
    inst = state.load_installed(BRK)                        # the state file follows the live set
    assert sorted(inst.rule_lines) == sorted(["stock == GOOGL and price > 10 : fwd(1)",
                                              "stock == IBM and price > 60 : fwd(2)"])
    rep = runtime.update(BRK, compile_rules(spec, "stock == MSFT : fwd(2)\n"), "msft.txt")   # the CLI path
    assert rep.written
    assert received([googl, msft, ibm]) == [False, True, False]


def test_what_the_live_path_does_not_take_is_refused(lab, tmp_path) -> None:  # noqa: F811
    spec = load_spec(SPEC_PATH)
    runtime.attach(BRK, compile_rules(spec, "stock == GOOGL : fwd(1)\n"), str(SPEC_PATH), "r", "native")
    with LiveClassifier(BRK) as live:
        with pytest.raises(DataplaneError):                  # a change that cannot fit anywhere
            live.apply([f"stock == S{k:03d} : fwd({k})" for k in range(1, 300)], [])   # 300 ports: at most 256
        assert received([_frame(spec, "GOOGL", 1)]) == [True]
        live.apply(["stock == IBM : fwd(1)"], [])
        assert received([_frame(spec, "IBM", 1)]) == [True]


def test_the_agent_takes_deltas_right_after_a_whole_update(lab, tmp_path) -> None:  # noqa: F811
    """The whole update itself hands the compiler that holds the set to a live classifier (no
    second build of the set on the first delta: at 1M subscriptions that took longer than the
    controller waits for a delta); a later whole update compiles on the same compiler."""
    from camus.controller.agent import Agent
    spec = load_spec(SPEC_PATH)
    agent = Agent(BRK, str(SPEC_PATH), "secret", workdir=tmp_path)
    try:
        agent.apply("stock == GOOGL and price > 10 : fwd(1)\nstock == MSFT : fwd(2)\n", "d1")
        assert agent.live is not None and agent.compiler is None
        compiler = agent.live.compiler
        assert compiler.live_lines() == {"stock == GOOGL and price > 10 : fwd(1)": 1, "stock == MSFT : fwd(2)": 1}
        googl, ibm = _frame(spec, "GOOGL", 50), _frame(spec, "IBM", 70)
        assert received([googl, ibm]) == [True, False]
        assert "delta" in agent.apply_changes(["stock == IBM : fwd(2)"], [], "d1", "d2")
        assert agent.live.compiler is compiler and received([googl, ibm]) == [True, True]
        # while the agent holds the interface, commands that would rewrite it are refused and
        # change nothing (its next delta would be written against tables no longer serving)
        assert state.unit_holder(BRK) == f"the host agent (pid {os.getpid()})"
        with pytest.raises(DataplaneError, match="held for live changes by the host agent"):
            runtime.update(BRK, compile_rules(spec, "stock == AAPL : fwd(1)\n"), "aapl.txt")
        with pytest.raises(DataplaneError, match="held for live changes by the host agent"):
            runtime.detach(BRK)
        assert received([googl, ibm, _frame(spec, "AAPL", 1)]) == [True, True, False]
        assert "delta" in agent.apply_changes(["stock == AAPL : fwd(1)"], [], "d2", "d2a")
        assert received([googl, ibm, _frame(spec, "AAPL", 1)]) == [True, True, True]
        agent.apply("stock == IBM : fwd(2)\n", "d3")                     # whole again: warm, and live again
        assert agent.live is not None and agent.live.compiler is compiler
        assert received([googl, ibm]) == [False, True]
    finally:
        agent.close()
    assert state.unit_holder(BRK) == ""                  # released: commands take the unit again


def test_a_delta_past_the_program_asks_for_the_whole_set_which_grows_it(lab, tmp_path, monkeypatch) -> None:  # noqa: F811
    """A change the attached program cannot hold is a conflict (the controller then sends the
    whole set), not a failure: the whole update grows the program (dataplane/grow.py) and the
    agent takes deltas again."""
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.controller.agent import Agent, Conflict
    spec = load_spec(SPEC_PATH)
    agent = Agent(BRK, str(SPEC_PATH), "secret", workdir=tmp_path)
    try:
        with monkeypatch.context() as m:             # attach sizes the program small
            m.setattr(attachment, "sized_limits", lambda *_a: EbpfLimits(max_exact=16))
            agent.apply("stock == GOOGL : fwd(1)\n", "d1")
        many = [f"stock == Z{i:03d} : fwd(2)" for i in range(40)]
        with pytest.raises(Conflict, match="grows the program"):
            agent.apply_changes(many, [], "d1", "d2")
        assert agent.digest == "d1" and received([_frame(spec, "Z007", 1)]) == [False]
        agent.apply("stock == GOOGL : fwd(1)\n" + "\n".join(many) + "\n", "d2")
        assert state.load_installed(BRK).generation == 1 and agent.live is not None
        assert received([_frame(spec, "Z007", 1), _frame(spec, "IBM", 1)]) == [True, False]
        assert "delta" in agent.apply_changes(["stock == IBM : fwd(2)"], [], "d2", "d3")
        assert received([_frame(spec, "IBM", 1)]) == [True]
    finally:
        agent.close()
