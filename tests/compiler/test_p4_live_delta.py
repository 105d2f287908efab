"""Pushes planned from the IR states an incremental compile keeps (p4/live_delta.py): after every
single update a message is classified by the whole old set or the whole new set; after the last,
the switch delivers what the new rules' tables do; what the map says the switch holds is what it
holds; and shapes the map was not made for fall back to the whole-set plan."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from camus.bench.workloads import itch_messages, itch_rules, symbols
from camus.compiler.backends.p4.delta import apply, plan
from camus.compiler.backends.p4.entries import P4Tables, p4_tables, schema_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.live_delta import LiveHeld, live_plan
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import CompileOptions
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.language.spec import Spec
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.conftest import APPS

from .strategies import messages, random_specs, rule_files

SWITCH = CompileOptions(strategy="switch")


def _run(t: P4Tables, m: dict) -> tuple:
    v = EntryInterpreter(t).run(m)
    return (v.ports, v.drop, v.calls)


def _empty(spec: Spec) -> P4Tables:
    schema = p4_schema(spec)
    return schema_tables(schema)


def _entries(t: P4Tables) -> set:
    return {(e.table, e.matches, e.action, tuple(e.params), e.priority) for e in t.entries}


def _step(switch: P4Tables, held: LiveHeld | None, c, spec: Spec, msgs: list[dict]) -> tuple[LiveHeld | None, bool]:
    """Push `c` to `switch` (changed in place) as the controller's target does: the live plan
    when the map applies, else the whole-set plan; every update checked against a mix."""
    want = {i: _run(p4_tables(c.pipeline, spec), m) for i, m in enumerate(msgs)}
    before = {i: _run(switch, m) for i, m in enumerate(msgs)}
    fast = live_plan(held, c, spec)
    step = fast if fast is not None else plan(switch, p4_tables(c.pipeline, spec))
    switch.calls = {**switch.calls, **step.tables.calls}     # custom-action ids are the controller's
    for ch in step.changes:
        apply(switch, ch)
        for i, m in enumerate(msgs):
            assert _run(switch, m) in (before[i], want[i]), (str(ch), m)
    assert {i: _run(switch, m) for i, m in enumerate(msgs)} == want
    assert switch.root == step.tables.root and _entries(switch) == _entries(step.tables)
    assert switch.groups == step.tables.groups
    switch.calls = dict(step.tables.calls)
    return (held if fast is not None else LiveHeld.from_plan(c, spec, step)), fast is not None


def itch_feed(spec: Spec, n: int, n_symbols: int) -> list[dict]:
    """n ITCH messages over the workload's symbols and one nobody subscribes to, as values."""
    return [message_from_text(spec, f"stock={m['stock']} price={m['price']} shares={m['shares']}")
            for m in itch_messages(n, 3, stocks=symbols(n_symbols) + ["ZZ"])]


def test_itch_subscriptions_come_and_go_as_small_live_pushes() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    rng = random.Random(4)
    lines = itch_rules(400, 2, n_symbols=20, n_hosts=12)
    msgs = itch_feed(spec, 60, 20)
    inc = IncrementalCompiler(spec, SWITCH)
    switch, held = _empty(spec), None
    fast_steps = 0
    for k in range(12):
        if k:
            for _ in range(rng.randint(1, 3)):
                lines.append(f"stock == {rng.choice(['GOOGL', 'AAPL', 'ZZ', 'MSFT'])} and price > "
                             f"{rng.randint(1, 2_000_000)} : fwd({rng.randint(1, 14)})")
            for _ in range(rng.randint(0, 2)):
                lines.pop(rng.randrange(len(lines)))
        c = inc.compile("\n".join(lines) + "\n")
        before = len(switch.entries)
        held, fast = _step(switch, held, c, spec, msgs)
        fast_steps += fast
        if fast:
            assert held is not None and len(held.entries_of) <= len(switch.entries)
            assert abs(len(switch.entries) - before) < 200            # a change, not the table
    assert fast_steps == 11                                             # every push after the first
    assert held is not None and _entries(held.tables()) == _entries(switch)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_live_pushes_never_mix_old_and_new_on_random_rules(data) -> None:
    spec_def = data.draw(random_specs(), label="spec")
    spec = parse_spec(spec_def.text(), "random.p4")
    msgs = data.draw(messages(spec_def), label="messages")
    inc = IncrementalCompiler(spec, SWITCH)
    switch, held = _empty(spec), None
    lines: list[str] = []
    for k in range(4):               # each set: the last one without its first line, two new ones
        extra = [ln for ln in data.draw(rule_files(spec_def), label=f"rules{k}").splitlines() if ln.strip()]
        lines = lines[1:] + extra[:2]
        c = inc.compile("\n".join(lines) + "\n")
        held, _ = _step(switch, held, c, spec, msgs)


def test_another_builder_or_shape_falls_back_to_the_whole_set() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    text = "\n".join(itch_rules(50, 1)) + "\n"
    inc = IncrementalCompiler(spec, SWITCH)
    c = inc.compile(text)
    held = LiveHeld.from_plan(c, spec, plan(_empty(spec), p4_tables(c.pipeline, spec)))
    assert held is not None
    other = IncrementalCompiler(spec, SWITCH).compile(text + "stock == ZZ : fwd(3)\n")
    assert live_plan(held, other, spec) is None                        # node ids of another builder
    widened = inc.compile(text + "shares > 7 : fwd(3)\n")              # a new table: another shape
    assert live_plan(held, widened, spec) is None
