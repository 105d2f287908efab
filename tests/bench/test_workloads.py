from __future__ import annotations

import random
import re
from collections import Counter

from camus.bench.workloads import itch_rules, siena_message, siena_rules, siena_schema, symbols
from camus.compiler.compile import compile_rules
from camus.compiler.semantics.filter_eval import FilterEvaluator, outcome
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import message_from_text
from camus.compiler.language.spec_parser import parse_spec

ITCH_RULE = re.compile(r"stock == (\w+) and price > (\d+) : fwd\((\d+)\)")


def test_itch_workload_follows_the_paper() -> None:
    rules = itch_rules(5000, seed=4)
    assert rules == itch_rules(5000, seed=4) and rules != itch_rules(5000, seed=5)
    parsed = [ITCH_RULE.fullmatch(r).groups() for r in rules]
    assert {s for s, _, _ in parsed} <= set(symbols(100)) and len({s for s, _, _ in parsed}) == 100
    assert all(0 < int(p) < 1000 for _, p, _ in parsed)
    assert {int(h) for _, _, h in parsed} <= set(range(1, 201)) and len({h for _, _, h in parsed}) > 190


def test_siena_workload_distribution() -> None:
    schema = siena_schema(10, seed=2)
    assert len(schema.str_attrs) == 4 and len(schema.int_attrs) == 6
    rules = siena_rules(3000, schema, seed=9)
    assert rules == siena_rules(3000, schema, seed=9)
    sizes = Counter(r.count(" and ") + 1 for r in rules)
    assert set(sizes) == set(range(1, 7))
    ops = Counter(m for r in rules for m in re.findall(r" (==|<|>) ", r))
    total = sum(ops.values())
    assert abs(ops["=="] / total - 0.5) < 0.03 and abs(ops["<"] / total - 0.25) < 0.03
    ints = [int(v) for r in rules for v in re.findall(r"(?:==|<|>) (\d+)", r)]
    assert min(ints) >= 0 and max(ints) <= 100
    zipf = Counter(a for r in rules for a in re.findall(r"\b(a\d)\b", r))
    assert zipf["a0"] > 2 * zipf["a9"]
    uniform = Counter(a for r in siena_rules(3000, schema, seed=9, zipf=False) for a in re.findall(r"\b(a\d)\b", r))
    assert max(uniform.values()) < 1.3 * min(uniform.values())


def test_siena_workload_compiles_and_agrees() -> None:
    schema = siena_schema(6, seed=3)
    spec = parse_spec(schema.spec_text(), "siena.p4")
    c = compile_rules(spec, "\n".join(siena_rules(25, schema, seed=3)))
    direct, tables = FilterEvaluator(c.rules, c.lowered), PipelineInterpreter(c.pipeline)
    rng = random.Random(1)
    for _ in range(400):
        m = message_from_text(spec, siena_message(schema, rng))
        assert outcome(direct.run(m)) == outcome(tables.run(m).actions)
