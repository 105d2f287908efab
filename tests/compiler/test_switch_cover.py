"""The switch cover (--fit, strategy "switch") leaves out no more fields than the switch needs.

The diagram estimate that ranks the fields bounds paths, not entries, and is loose by far on
multi-attribute filters: it left out two fields of five where none had to go. Real, bounded
builds now decide how many of the fields it ranks go (structure/fit.py)."""
from __future__ import annotations

import random

import pytest

import camus.compiler.compile as compile_mod
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.fit import fewest_drops

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


@pytest.mark.parametrize("seed", [1, 3])
def test_the_switch_keeps_the_fields_the_estimate_would_drop_when_they_fit(seed: int, monkeypatch) -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(40, seed, 5)
    picked: list[tuple[list[str], int]] = []
    estimate_order = compile_mod.cover_order
    monkeypatch.setattr(compile_mod, "cover_order", lambda *a, **k: picked.append(estimate_order(*a, **k)) or picked[-1])
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=2000))
    names, needed = picked[0]
    assert names[:needed] == ["reading.sensor", "reading.kind"]    # what the estimate alone leaves out
    assert c.pipeline.covers_without == ()                          # built, the exact diagram fits
    assert 0 < c.pipeline.entry_count <= 2000
    def estimate_alone(names, start, fits, floor=0):           # the two fields the estimate picked
        return frozenset(names[:2]) if fits(frozenset(names[:2]), True) else None
    monkeypatch.setattr(compile_mod, "fewest_drops", estimate_alone)
    both = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=2000))
    assert both.pipeline.covers_without == ("reading.kind", "reading.sensor")
    exact = PipelineInterpreter(compile_rules(spec, rules).pipeline)
    extra = {"one": 0, "two": 0}
    for m in _messages(seed, 400):
        want = set(exact.run(m).actions.ports)
        for name, p in (("one", c.pipeline), ("two", both.pipeline)):
            got = set(PipelineInterpreter(p).run(m).actions.ports)
            assert want <= got, m                                  # over-delivers, never under
            extra[name] += len(got - want)
    assert extra["one"] == 0 < extra["two"], extra                 # exact: no copy too many


def test_fewest_drops_goes_up_until_one_fits_and_down_while_they_fit() -> None:
    tried: list[tuple[frozenset[str], bool]] = []

    def fits_from(need: set[str]):
        def fits(drop: frozenset[str], thorough: bool) -> bool:
            tried.append((drop, thorough))
            return need <= drop
        return fits

    assert fewest_drops(["a", "b", "c"], 1, fits_from({"a", "b"})) == {"a", "b"}      # up: a fails
    assert tried == [(frozenset({"a"}), True), (frozenset({"a", "b"}), True)]          # no way down
    tried.clear()
    assert fewest_drops(["a", "b", "c"], 3, fits_from({"a"})) == {"a"}                 # down while it fits
    assert tried == [(frozenset({"a", "b", "c"}), True), (frozenset({"a", "b"}), False),
                     (frozenset({"a"}), False), (frozenset(), False)]
    assert fewest_drops(["a", "b"], 2, fits_from(set()), floor=1) == {"a"}             # never below floor
    assert fewest_drops(["a"], 0, fits_from({"z"})) is None
    assert fewest_drops([], 0, fits_from(set())) == frozenset()


def test_a_spine_keeps_every_field_when_its_exact_diagram_fits() -> None:
    """300 filters over two ports: the estimate puts the diagram at 13.2M paths and would leave
    `value` out (then every message goes both ways: no filtering at all); built, the exact
    diagram has a few thousand entries, so the switch gets it."""
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
    assert c.pipeline.covers_without == () and c.pipeline.entry_count == exact.pipeline.entry_count <= 100_000
    names, needed = compile_mod.cover_order(exact.lowered, [(t, r.atoms) for r in exact.lowered.rules
                                                            for t in compile_mod.to_dnf(r.formula, [
                                                                v.width for v in exact.lowered.variables])],
                                            exact.order, 100_000)
    assert needed >= 1                                  # the estimate alone would have dropped a field


def test_a_cover_the_estimate_passes_is_built_and_checked(monkeypatch) -> None:
    """The estimate bounds paths, not entries: where it says the whole diagram fits and the
    tables do not, fields still go until they do."""
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(40, 1, 5)
    exact = compile_rules(spec, rules, options=CompileOptions(strategy="bdd"))
    budget = exact.pipeline.entry_count - 1
    monkeypatch.setattr(compile_mod, "cover_order", lambda *a, **k: (["reading.sensor", "reading.value"], 0))
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=budget))
    assert c.pipeline.covers_without and c.pipeline.entry_count <= budget
