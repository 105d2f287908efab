"""Incremental compiles agree with compiles from scratch: random sequences of added and removed
subscriptions (Hypothesis stateful testing), every state checked delivery by delivery."""
from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from tests.conftest import APPS

SIENA = load_spec(APPS / "siena" / "siena.p4")
WORDS = ["alpha", "echo", "india", "tango", "yankee"]


def _relation(rng: random.Random) -> str:
    a = rng.choice(["a0", "a1", "a3", "a4", "a2", "a5"])
    op = rng.choice(["==", "<", ">", "!="])
    value = f'"{rng.choice(WORDS)}"' if a in ("a2", "a5") else str(rng.choice([0, 1, 20, 50, 51, 99]))
    return f"{a} {op} {value}"


def _line(seed: int) -> str:
    rng = random.Random(seed)
    rels = " and ".join(_relation(rng) for _ in range(rng.randint(1, 3)))
    action = rng.choice(["fwd(1)", "fwd(2)", "fwd(3)", "fwd(1), fwd(4)", "drop"])
    return f"{rels} : {action}"


def _messages(seed: int, n: int = 40) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [f"a{i}={rng.choice([0, 1, 20, 21, 50, 51, 52, 99])}" for i in (0, 1, 3, 4)]
        parts += [f"a2={rng.choice(WORDS + ['zulu', 'a'])}", f"a5={rng.choice(WORDS + ['hotel'])}"]
        out.append(message_from_text(SIENA, " ".join(parts)))
    return out


def _deliveries(c, msgs):
    ip = PipelineInterpreter(c.pipeline)
    out = []
    for m in msgs:
        a = ip.run(m).actions
        out.append((tuple(a.ports), a.drop))
    return out


class Churn(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.inc = IncrementalCompiler(SIENA, CompileOptions(strategy="bdd"))
        self.lines: list[str] = []
        self.msgs = _messages(len(self.lines))

    @rule(seed=st.integers(0, 60))
    def add(self, seed: int) -> None:
        self.lines.append(_line(seed))                # a small pool: repeats and overlaps happen

    @rule(data=st.data())
    def remove(self, data) -> None:
        if self.lines:
            self.lines.pop(data.draw(st.integers(0, len(self.lines) - 1)))

    @invariant()
    def same_as_from_scratch(self) -> None:
        text = "".join(f"{ln}\n" for ln in self.lines)
        got = self.inc.compile(text)
        want = compile_rules(SIENA, text, options=CompileOptions(strategy="bdd"))
        assert self.inc.incremental_last
        assert _deliveries(got, self.msgs) == _deliveries(want, self.msgs), text


Churn.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestChurn = Churn.TestCase


def test_errors_state_functions_and_alpha_take_the_whole_compile() -> None:
    import pytest

    from camus.compiler.language.errors import CompileErrors
    inc = IncrementalCompiler(SIENA)
    inc.compile("a0 == 1 : fwd(1)\n")
    assert inc.incremental_last
    with pytest.raises(CompileErrors) as err:
        inc.compile("a0 == 1 : fwd(1)\na9 == 2 : fwd(2)\n")
    assert "2:1" in str(err.value)                      # the real line of the mistake
    widened = IncrementalCompiler(SIENA, CompileOptions(alpha=10))
    widened.compile("a0 == 1 : fwd(1)\n")
    assert not widened.incremental_last


def test_unchanged_states_keep_their_ids() -> None:
    """One more subscription: the states it does not reach keep their ids (small deltas)."""
    inc = IncrementalCompiler(SIENA, CompileOptions(strategy="bdd"))
    base = "".join(f"{_line(s)}\n" for s in range(40))
    a = inc.compile(base).pipeline
    b = inc.compile(base + "a0 == 7 and a1 == 7 : fwd(5)\n").pipeline
    entries = lambda p: {(t.name, e.state, e.match, e.next) for t in p.tables for e in t.entries}  # noqa: E731
    kept = entries(a) & entries(b)
    assert len(kept) > len(entries(a)) // 2, (len(kept), len(entries(a)))


def test_a_cold_start_seeds_from_one_parse_and_agrees() -> None:
    text = "".join(f"{_line(s)}\n" for s in range(100))
    inc = IncrementalCompiler(SIENA, CompileOptions(strategy="bdd"))
    got = inc.compile(text)
    assert inc.incremental_last and len(inc.lines) == len(set(text.splitlines()))
    want = compile_rules(SIENA, text, options=CompileOptions(strategy="bdd"))
    msgs = _messages(7, 200)
    assert _deliveries(got, msgs) == _deliveries(want, msgs)


def test_memory_stays_flat_under_churn() -> None:
    """Lines of subscriptions long gone are forgotten: the caches follow the live set."""
    inc = IncrementalCompiler(SIENA, CompileOptions(strategy="bdd"))
    live = [f"a0 == {i} : fwd(1)" for i in range(20)]
    for k in range(3000):
        live[k % 20] = f"a0 == {k % 100} and a1 == {k} : fwd({1 + k % 3})"
        inc.compile("".join(f"{ln}\n" for ln in live))
    assert len(inc.lines) <= 2 * 20 + 1024 + 1 and len(inc.keys) <= 2 * (2 * 20 + 1024 + 1)


def test_rules_keep_their_place_in_the_file() -> None:
    text = "# header\n" + "".join(f"  {_line(s)}\n" for s in range(100))
    for inc in (IncrementalCompiler(SIENA, CompileOptions(strategy="bdd")),):
        for _ in range(2):                                   # cold (seeded), then warm (cached)
            got = inc.compile(text)
            want = compile_rules(SIENA, text, options=CompileOptions(strategy="bdd"))
            assert [r.offset for r in got.rules] == [r.offset for r in want.rules]
    small = IncrementalCompiler(SIENA)
    assert [r.offset for r in small.compile("a0 == 1 : fwd(1)\n\n  a1 == 2 : fwd(2)\n").rules] == [0, 20]


def _reachable(builder, root: int) -> set[int]:
    from camus.compiler.structure.diagram import Branch
    seen, stack = set(), [root]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            node = builder.nodes[n]
            if isinstance(node, Branch):
                stack.extend(e[2] for e in node.edges)
    return seen


def test_churn_leaves_no_trace_of_removed_subscriptions() -> None:
    """Issue 47: thousands of subscribes and unsubscribes through the live path (the compiler,
    its tables and the XDP layout, as the agent runs them): what is held follows the live set.
    Dead roots are dropped at once (each carries an edge per interval of the first field; they
    were the agent's growth), the line cache and term keys are bounded by the live lines, the
    tables and the layout hold exactly the live diagram's states, and that diagram is the one
    the final set builds from scratch."""
    from camus.compiler.backends.ebpf.delta import EbpfLayout
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.compiler.structure.diagram import EMPTY_LEAF, Branch
    from camus.compiler.structure.live_tables import LiveTables
    spec = load_spec(APPS / "itch" / "itch.p4")
    rng = random.Random(47)
    base = [f"stock == S{i % 40} and price > {rng.randint(1, 999)} : fwd({1 + i % 8})" for i in range(400)]
    inc = IncrementalCompiler(spec, CompileOptions(strategy="bdd"))
    root = inc.change(base, [])
    tables = LiveTables(inc.live.builder, inc.variables)                          # type: ignore[union-attr]
    widths = {v.index: v.width for v in inc.variables}
    layout = EbpfLayout(EbpfLimits(), 1, list(range(1, 9)), spec)
    layout.plan(tables.move(root), widths)
    held: dict[int, str] = {}
    for k in range(6000):
        c = k % 24
        if c in held:
            added, removed = [], [held.pop(c)]
        else:
            held[c] = f"stock == C{c} and price > {rng.randint(1, 999)} : fwd({1 + c % 8})"
            added, removed = [held[c]], []
        layout.reclaim(everything=True)
        layout.plan(tables.move(inc.change(added, removed)), widths)
    b, root = inc.live.builder, inc.live.root                                       # type: ignore[union-attr]
    first = inc.variables[0].index
    roots = [n for n, node in b.nodes.items() if isinstance(node, Branch) and node.var == first]
    assert len(roots) <= 2 and root in roots                     # the live root and the one before
    reachable = _reachable(b, root) | _reachable(b, inc.live.retired)               # type: ignore[union-attr]
    assert len(b.nodes) <= len(reachable) + max(2000, len(reachable))   # the amortised collection's bound
    live_lines = set(inc.live_slots)
    assert len(live_lines) == len(set(base)) + len(held)
    assert len(inc.lines) <= len(live_lines) + 1024 + len(live_lines) // 8
    assert {ln for ln, _, _ in inc.keys} <= live_lines           # no term key of a removed line
    states = _reachable(b, root) - {EMPTY_LEAF}
    assert set(tables.refs) == states                             # the tables hold the live diagram
    layout.reclaim(everything=True)
    assert set(layout.held) == states                             # and so does the map layout
    fresh = IncrementalCompiler(spec, CompileOptions(strategy="bdd"))
    fresh_root = fresh.change(sorted(live_lines), [])
    assert len(_reachable(fresh.live.builder, fresh_root)) == len(states) + 1   # type: ignore[union-attr]
