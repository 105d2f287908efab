"""The live path with per-rule counters (attach counts the first 64 rules by default): a rule
set given as live lines (incremental.live_items) serves what the whole compile serves, message
by message, including which counted rules each message matched; changes that move the counted
window (a line inserted above it, a counted rule edited) agree too."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.incremental import IncrementalCompiler, counted_line, live_items, split_line
from camus.compiler.language.rules_parser import parse_rules
from camus.compiler.logic.lowering import Lowered
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.slicing import slice_pipeline
from camus.dataplane.counting import texts_of
from camus.dataplane.live_state import line_texts
from tests.compiler.test_incremental import SIENA, _line, _messages

COUNT = 5


def _live_pipeline(inc: IncrementalCompiler, root: int):
    lowered = Lowered(inc.spec, list(inc.variables), [], 0, inc._lowerer)
    assert inc.live is not None
    return slice_pipeline(lowered, inc.live.builder, root, list(range(len(inc.variables))), 0)


def _served(pipeline, msgs) -> list[tuple]:
    ip = PipelineInterpreter(pipeline)
    out = []
    for m in msgs:
        a = ip.run(m).actions
        out.append((tuple(a.ports), a.drop, tuple(a.rules)))
    return out


def _agree(inc: IncrementalCompiler, texts: list[str], msgs) -> None:
    old = set(inc.live_slots)
    items = live_items(texts, COUNT)
    root = inc.change(sorted(items - old), sorted(old - items))
    whole = compile_rules(SIENA, "".join(f"{t}\n" for t in texts), options=CompileOptions(count_rules=COUNT,
                                                                                            strategy="bdd"))
    assert _served(_live_pipeline(inc, root), msgs) == _served(whole.pipeline, msgs)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_counted_live_lines_serve_what_the_whole_compile_serves(seed: int) -> None:
    rng = random.Random(seed)
    texts = list(dict.fromkeys(_line(rng.randrange(10_000)) for _ in range(14)))
    msgs = _messages(seed)
    inc = IncrementalCompiler(SIENA, CompileOptions(count_rules=COUNT, strategy="bdd"))
    _agree(inc, texts, msgs)
    for _ in range(6):                     # edits anywhere: inside the counted window, above it, below
        k = rng.randrange(len(texts))
        what = rng.choice(["insert", "delete", "edit", "move"])
        if what == "insert":
            texts.insert(k, _line(rng.randrange(10_000)))
        elif what == "delete" and len(texts) > 1:
            texts.pop(k)
        elif what == "edit":
            texts[k] = _line(rng.randrange(10_000))
        else:
            texts.insert(rng.randrange(len(texts)), texts.pop(k))
        texts = list(dict.fromkeys(texts))
        _agree(inc, texts, msgs)


def test_counted_lines_name_their_text_and_index() -> None:
    assert split_line(counted_line("a == 1 : fwd(1)", 3)) == ("a == 1 : fwd(1)", 3)
    assert split_line("a == 1 : fwd(1)") == ("a == 1 : fwd(1)", None)
    # a rule repeated past the window is served by its counted copy
    assert live_items(["x", "y", "x", "z"], 2) == {counted_line("x", 0), counted_line("y", 1), "z"}
    assert live_items(["x", "y"], 0) == {"x", "y"}


_PIECES = st.sampled_from(["a0 == 1 : fwd(1)", "a1 > 20 : fwd(2);", "a2 == \"x#y\" : fwd(3)",
                           "a3 < 5 : fwd(1) # a comment", "  a4 == 7 : drop  ", "# only a comment", "",
                           "\t", "a0 == 2 : fwd(4) ;  # c"])


@given(st.lists(_PIECES, max_size=12))
def test_line_texts_are_the_parsed_texts_of_a_file_with_one_rule_per_line(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    rules, _ = parse_rules(text, "<t>")
    assert line_texts(text) == texts_of(text, rules)


def test_a_compiler_seeded_from_a_whole_compile_or_a_parse_builds_the_same() -> None:
    """What `attach` hands the live path (its compile) and what an update hands it (its parse)
    fill the line cache without parsing or lowering again; the diagram is the same."""
    rng = random.Random(3)
    texts = list(dict.fromkeys(_line(rng.randrange(10_000)) for _ in range(30)))
    text = "".join(f"{t}\n" for t in texts)
    opts = CompileOptions(count_rules=COUNT, strategy="bdd")
    c = compile_rules(SIENA, text, options=opts)
    msgs = _messages(11)
    served = []
    for seed in ("compiled", "parsed", None):
        inc = IncrementalCompiler(SIENA, opts)
        if seed == "compiled":
            inc.seed_compiled(texts, c)
        elif seed == "parsed":
            inc.seed_rules(texts, c.rules, c.source)
        if seed:
            assert set(inc.lines) == set(texts)
        root = inc.change(sorted(live_items(texts, COUNT)), [])
        served.append(_served(_live_pipeline(inc, root), msgs))
    assert served[0] == served[1] == served[2] == _served(c.pipeline, msgs)
