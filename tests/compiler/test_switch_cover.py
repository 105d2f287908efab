"""The switch cover (--fit, strategy "switch") leaves out no more fields than the switch needs.

The diagram estimate that picks the fields is an upper bound, loose by far on multi-attribute
filters: it once left out two fields of five where one was enough. A real, bounded build now
checks whether all but the last field the estimate picked fit."""
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
def test_cover_leaves_out_one_field_where_the_estimate_wanted_two(seed: int, monkeypatch) -> None:
    spec = parse_spec(SPEC, "tele.p4")
    rules = multi_attribute_rules(40, seed, 5)
    picked: list[tuple[list[str], int]] = []
    estimate_order = compile_mod.cover_order
    monkeypatch.setattr(compile_mod, "cover_order", lambda *a, **k: picked.append(estimate_order(*a, **k)) or picked[-1])
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=2000))
    names, needed = picked[0]
    assert names[:needed] == ["reading.sensor", "reading.kind"]    # what the estimate alone leaves out
    assert c.pipeline.covers_without == ("reading.sensor",)         # the switch still tests kind
    assert 0 < c.pipeline.entry_count <= 2000
    real = compile_mod.fewest_drops
    monkeypatch.setattr(compile_mod, "fewest_drops", lambda names, start, fits: real(names, 2, fits))
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
    assert extra["one"] < extra["two"], extra                      # testing kind saves copies


def test_fewest_drops_tries_upwards_from_start_and_keeps_the_first_that_fits() -> None:
    tried: list[frozenset[str]] = []

    def fits(drop: frozenset[str]) -> bool:
        tried.append(drop)
        return {"a", "b"} <= drop

    assert fewest_drops(["a", "b", "c"], 1, fits) == {"a", "b"}
    assert tried == [frozenset({"a"}), frozenset({"a", "b"})]
    assert fewest_drops(["a", "c", "b"], 0, fits) == {"a", "b", "c"}
    assert fewest_drops(["c"], 0, fits) is None
    assert fewest_drops([], 0, lambda d: True) == frozenset()


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
