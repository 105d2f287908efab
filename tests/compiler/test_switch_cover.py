"""The switch cover (strategy "switch", `compile --target p4`): the exact diagram when it builds
within bounds, else a decision diagram of bounded width (structure/relaxed.py) that never
under-delivers, keeps what selects and says how much it over-delivers."""
from __future__ import annotations

import json

import random

import pytest

from camus.compiler.backends.base import OverBudget, TargetOptions
from camus.compiler.backends.registry import backend
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.fitting import build_fitted
from camus.compiler.ir.resources import render_report, resource_report
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.relaxed import CoverShape, bits_of

SPEC = """
header reading_t { bit<16> sensor; bit<8> kind; bit<32> value; bit<64> site; bit<16> flags; }
struct headers { reading_t reading; }
@pragma query_field(reading.sensor)
@pragma query_field(reading.kind)
@pragma query_field(reading.value)
@pragma query_field(reading.site)
@pragma query_field(reading.flags)
@pragma query_type(reading.site, string)
"""
SITES = ["lab1", "lab2", "roof", "cellar", "north", "south", "east", "west"]


def _atom(rng: random.Random) -> str:
    c = rng.randrange(6)
    if c == 0:
        return f"sensor == {rng.randrange(500)}"
    if c == 1:
        return f"kind {rng.choice(['==', '!='])} {rng.randrange(8)}"
    if c == 2:
        return f"value {rng.choice(['<', '>', '<=', '>='])} {rng.randrange(100000)}"
    if c == 3:
        return f'site == "{rng.choice(SITES)}"'
    if c == 4:
        return f"flags == {rng.randrange(16)}"
    lo = rng.randrange(500)
    return f"sensor >= {lo} and sensor <= {lo + rng.randrange(50)}"


def multi_attribute_rules(n: int, seed: int, ports: int) -> str:
    """Conjunctions of 1-4 constraints over five fields, a fifth of them with an `or`."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        parts = [_atom(rng) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.2:
            f = f"({parts[0]} or {_atom(rng)})" + "".join(" and " + p for p in parts[1:])
        else:
            f = " and ".join(parts)
        lines.append(f"{f} : fwd({rng.randrange(1, ports)})")
    return "\n".join(lines) + "\n"


def _messages(seed: int, count: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    def site() -> int:                           # strings: space-padded bytes, big-endian
        return int.from_bytes(rng.choice(SITES + ["x"]).encode().ljust(8, b" "), "big")
    return [{"reading.sensor": rng.randrange(520), "reading.kind": rng.randrange(9),
             "reading.value": rng.randrange(100010), "reading.site": site(),
             "reading.flags": rng.randrange(17)} for _ in range(count)]


def _deliveries(p, msgs) -> list[set[object]]:
    run = PipelineInterpreter(p).run
    return [set(run(m).actions.ports) for m in msgs]


def test_a_rule_set_whose_diagram_multiplies_out_gets_a_bounded_cover_that_still_selects() -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(300, 2, 60)
    msgs = _messages(2, 600)
    exact = _deliveries(compile_rules(spec, rules, options=CompileOptions(strategy="bitvector")).pipeline, msgs)
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=500,
                                                          cover_width=16, cover_fanout=4))
    info = c.pipeline.cover
    assert info is not None and (info.width, info.fanout) == (16, 4) and info.samples > 0
    assert all(len(t.states) <= 16 for t in c.pipeline.tables)          # the width bound holds
    got = _deliveries(c.pipeline, msgs)
    assert all(w <= g for w, g in zip(exact, got))                         # never under-delivers
    every = {p for ports in got for p in ports}
    sent, wanted = sum(map(len, got)), sum(map(len, exact))
    assert wanted < sent < len(every) * len(msgs)        # over-delivers, yet far from "all to all"
    assert info.over_delivery >= 1.0
    assert "a cover: at most 16 states per field" in render_report(resource_report(c.pipeline))


def test_a_wider_cover_over_delivers_less() -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(300, 4, 60)
    msgs = _messages(4, 600)
    sent = []
    for width in (1, 8, 256):
        c = compile_rules(spec, rules, options=CompileOptions(strategy="cover", cover_width=width))
        sent.append(sum(map(len, _deliveries(c.pipeline, msgs))))
    assert sent[0] > sent[1] > sent[2], sent
    one = compile_rules(spec, rules, options=CompileOptions(strategy="cover", cover_width=1))
    assert one.pipeline.tables == [] and len(one.pipeline.leaves) == 1       # width 1: everyone named


def test_drop_rules_leave_the_cover_and_nothing_is_lost() -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(120, 5, 8) + "kind == 3 : drop\nsensor == 7 : drop\n"
    msgs = _messages(5, 400)
    exact = _deliveries(compile_rules(spec, rules).pipeline, msgs)
    got = _deliveries(compile_rules(spec, rules, options=CompileOptions(strategy="cover", cover_width=4)).pipeline, msgs)
    assert all(w <= g for w, g in zip(exact, got))


def test_the_fitting_driver_narrows_a_cover_until_it_fits(tmp_path) -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(300, 2, 60)
    c = compile_rules(spec, rules, options=CompileOptions(strategy="cover"))
    wide = json.loads(build_fitted(c, backend("p4"), TargetOptions()).artefacts.files["switch_resources.json"])
    budget = tmp_path / "budget.yaml"                 # half the TCAMs the widest cover reserves
    budget.write_text(f"tcam_block_rows: {wide['tcam_alloc_block_rows'] // 2}\n")
    notes: list[str] = []
    fitted = build_fitted(c, backend("p4"), TargetOptions(budget_file=str(budget), notice=notes.append))
    assert fitted.compiled.pipeline.cover is not None and fitted.compiled.pipeline.cover.width < 1024
    assert any("trying a cover of at most 256 states per field" in n for n in notes), notes
    assert "a cover: at most" in fitted.artefacts.summary
    with pytest.raises(OverBudget):
        build_fitted(c, backend("p4"), TargetOptions(budget_file=str(budget)), fit=False)


def test_cover_shapes_narrow_down_to_one_state() -> None:
    shapes, s = [], CoverShape()
    while (s := s.narrower()) is not None:
        shapes.append((s.width, s.fanout))
    assert shapes[0] == (256, 16) and shapes[-1] == (1, 2) and len(shapes) == 5


def test_bits_of_lists_every_set_bit_in_order() -> None:
    rng = random.Random(7)
    for _ in range(50):
        want = sorted(rng.sample(range(3000), rng.randrange(40)))
        assert bits_of(sum(1 << b for b in want)) == want
    assert bits_of(0) == []


def test_a_spine_keeps_every_field_when_its_exact_diagram_fits() -> None:
    """300 filters over two ports whose exact diagram has a few thousand entries: the switch gets
    it, not a cover."""
    spec = parse_spec(SPEC, "tele.p4")
    rng = random.Random(5)
    sites = ["lab1", "lab2", "roof", "cellar"]

    def atom() -> str:
        c = rng.randrange(5)
        return [f"sensor == {rng.randrange(500)}", f"kind == {rng.randrange(8)}", f"value > {rng.randrange(100000)}",
                f'site == "{rng.choice(sites)}"', f"flags == {rng.randrange(16)}"][c]
    rules = "".join(" and ".join(atom() for _ in range(rng.randint(2, 4))) + f" : fwd({1 + i % 2})\n"
                    for i in range(300))
    exact = compile_rules(spec, rules, options=CompileOptions(strategy="bdd"))
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch"))
    assert c.pipeline.cover is None and c.pipeline.entry_count == exact.pipeline.entry_count <= 100_000


