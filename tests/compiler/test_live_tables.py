"""Live table deltas: a change's new states, new root and dropped states, applied to the table
set before it, classify every message as a compile from scratch of the new rule set does
(Hypothesis stateful testing over random adds and removes), and cost what the change reaches."""
from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.ir.pipeline import Pipeline
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.live_tables import LiveTables, NeedsFullWrite
from camus.compiler.structure.slicing import default_action
from tests.compiler.test_incremental import SIENA, _deliveries, _line, _messages
from tests.conftest import APPS

ITCH = load_spec(APPS / "itch" / "itch.p4")
BDD = CompileOptions(strategy="bdd")


def _names(inc: IncrementalCompiler) -> dict:
    return {v.index: (v.name, v.width, v.field.path if v.field else None) for v in inc.variables}


def _empty(spec) -> Pipeline:
    return Pipeline(spec.name, 0, [], {}, {}, default_action=default_action(spec.default_atoms))


class LiveChurn(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.inc = IncrementalCompiler(SIENA, BDD)
        self.inc.change([], [])
        self.tables = LiveTables(self.inc.live.builder, self.inc.variables)
        self.pipeline = _empty(SIENA)
        self.lines: list[str] = []
        self.msgs = _messages(3)

    def _move(self, added: list[str], removed: list[str]) -> None:
        root = self.inc.change(added, removed)
        try:
            delta = self.tables.move(root)
        except NeedsFullWrite:                # a range test where a table was made exact: a whole set
            self.tables = LiveTables(self.inc.live.builder, self.inc.variables)
            self.pipeline = _empty(SIENA)
            delta = self.tables.move(root)
        self.pipeline = delta.apply(self.pipeline, _names(self.inc))

    @rule(seeds=st.lists(st.integers(0, 60), min_size=1, max_size=3))
    def add(self, seeds: list[int]) -> None:
        new = [_line(s) for s in seeds]
        self.lines += new
        self._move(new, [])

    @rule(data=st.data())
    def remove(self, data) -> None:
        if self.lines:
            gone = self.lines.pop(data.draw(st.integers(0, len(self.lines) - 1)))
            self._move([], [gone])

    @invariant()
    def classifies_as_from_scratch(self) -> None:
        self.pipeline.validate()
        want = compile_rules(SIENA, "".join(f"{ln}\n" for ln in self.lines), options=BDD)

        class View:                          # what _deliveries reads
            pipeline = self.pipeline
        assert _deliveries(View, self.msgs) == _deliveries(want, self.msgs), self.lines
        live = {self.pipeline.root} | set(self.pipeline.leaves) | {s for t in self.pipeline.tables for s in t.states}
        assert live - {0} == set(self.tables.refs)         # exactly the reachable states are held


LiveChurn.TestCase.settings = settings(max_examples=50, stateful_step_count=20, deadline=None)
TestLiveChurn = LiveChurn.TestCase


def test_one_itch_change_is_a_small_delta() -> None:
    """At 2,000 subscriptions a new one for a held symbol writes its symbol's states and a new
    root, not the table set; removing it again brings the old states back."""
    from camus.bench.workloads import itch_rules
    inc = IncrementalCompiler(ITCH, BDD)
    lines = [r for r in itch_rules(2000, 1) if r.strip()]
    root = inc.change(lines, [])
    tables = LiveTables(inc.live.builder, inc.variables)
    full = tables.move(root)
    extra = "stock == GOOGL and price > 5 : fwd(7)"
    delta = tables.move(inc.change([extra], []))
    assert 0 < delta.size() < full.size() // 5, (delta.size(), full.size())
    assert delta.root != full.root and full.root in delta.removed
    back = tables.move(inc.change([], [extra]))
    assert back.root == full.root                          # the memo: the old states, the old ids
    p = delta.apply(full.apply(_empty(ITCH), _names(inc)), _names(inc))
    p = back.apply(p, _names(inc))
    scratch = compile_rules(ITCH, "".join(f"{ln}\n" for ln in lines), options=BDD).pipeline
    assert len(p.leaves) == len(scratch.leaves) and sum(len(t.entries) for t in p.tables) == scratch.entry_count
    ip, want = PipelineInterpreter(p), PipelineInterpreter(scratch)
    from camus.compiler.codec.packets import message_from_text
    for stock in ("GOOGL", "MSFT", "HD", "ZZZ"):
        for price in (0, 6, 300, 999):
            m = message_from_text(ITCH, f"stock={stock} price={price}")
            assert ip.run(m).actions.ports == want.run(m).actions.ports
