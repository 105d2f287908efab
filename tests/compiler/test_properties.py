"""Differential property tests: for random specs, rule files and messages, the rules evaluated
directly, the binary BDD and the Pipeline IR interpreter deliver the same actions."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.compiler.binary_bdd import BinaryBdd
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.semantics.filter_eval import FilterEvaluator, atoms_to_actions, outcome
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.ir.pipeline import Pipeline
from camus.compiler.language.spec_parser import parse_spec

from .strategies import messages, random_specs, rule_files


def _case(data, state: bool = False):
    spec_def = data.draw(random_specs(allow_counter=state), label="spec")
    spec = parse_spec(spec_def.text(), "random.p4")
    rules = data.draw(rule_files(spec_def, state=state), label="rules")
    msgs = data.draw(messages(spec_def), label="messages")
    return spec, rules, msgs


@settings(max_examples=1500)
@given(data=st.data())
def test_filters_bdd_and_pipeline_agree(data) -> None:
    spec, rules, msgs = _case(data)
    c = compile_rules(spec, rules, "random.rules")
    direct = FilterEvaluator(c.rules, c.lowered)
    tables = PipelineInterpreter(c.pipeline)
    bdd = BinaryBdd(c.builder, c.root)
    assert bdd.check_reductions([v.width for v in c.lowered.variables]) == []
    for m in msgs:
        want = outcome(direct.run(m))
        got_ir = outcome(tables.run(m).actions)
        leaf = bdd.evaluate([m[q.path] for q in spec.query_fields])
        got_bdd = outcome(atoms_to_actions(c.builder.nodes[leaf].atoms))  # type: ignore[union-attr]
        assert got_ir == want, (rules, m)
        assert got_bdd == want, (rules, m)


@settings(max_examples=400)
@given(data=st.data())
def test_options_and_json_round_trip_keep_deliveries(data) -> None:
    """Field order, domain compression and a JSON round trip change tables, never deliveries."""
    spec, rules, msgs = _case(data)
    base = PipelineInterpreter(compile_rules(spec, rules).pipeline)
    variant = compile_rules(spec, rules, options=CompileOptions(order="heuristic", compress_max=64))
    again = PipelineInterpreter(Pipeline.from_json(variant.pipeline.to_json()))
    for m in msgs:
        assert outcome(again.run(m).actions) == outcome(base.run(m).actions), (rules, m)


@settings(max_examples=400)
@given(data=st.data(), alpha=st.sampled_from([2, 4, 10, 64]))
def test_alpha_discretisation_never_under_delivers(data, alpha: int) -> None:
    spec, rules, msgs = _case(data)
    exact = PipelineInterpreter(compile_rules(spec, rules).pipeline)
    approx = PipelineInterpreter(compile_rules(spec, rules, options=CompileOptions(alpha=alpha)).pipeline)
    for m in msgs:
        a, b = exact.run(m).actions, approx.run(m).actions
        assert set(a.ports) <= set(b.ports), (rules, m)
        assert a.drop == b.drop
        assert set(a.calls) <= set(b.calls)


@settings(max_examples=400)
@given(data=st.data(), steps=st.lists(st.integers(0, 700), min_size=12, max_size=12))
def test_stateful_rules_agree_over_time(data, steps: list[int]) -> None:
    """count/sum/avg over tumbling windows: same verdicts message after message."""
    spec, rules, msgs = _case(data, state=True)
    c = compile_rules(spec, rules)
    direct = FilterEvaluator(c.rules, c.lowered)
    tables = PipelineInterpreter(c.pipeline)
    now = 0
    for m, step in zip(msgs, steps):
        now += step
        assert outcome(tables.run(m, now).actions) == outcome(direct.run(m, now)), (rules, m, now)


@settings(max_examples=600)
@given(data=st.data())
def test_bitvector_stage_agrees_with_the_rules(data) -> None:
    """The bit-vector strategy on random rule sets (forced, whatever the cost model would pick):
    same deliveries as the rules; a JSON round trip of the IR keeps them."""
    spec, rules, msgs = _case(data)
    c = compile_rules(spec, rules, "random.rules", CompileOptions(strategy="bitvector"))
    assert c.pipeline.bitvector is not None and not c.pipeline.tables
    direct = FilterEvaluator(c.rules, c.lowered)
    tables = PipelineInterpreter(c.pipeline)
    again = PipelineInterpreter(Pipeline.from_json(json.loads(c.pipeline.dumps())))
    for m in msgs:
        want = outcome(direct.run(m))
        assert outcome(tables.run(m).actions) == want, (rules, m)
        assert outcome(again.run(m).actions) == want, (rules, m)


def test_cost_model_keeps_itch_on_the_diagram_and_many_attributes_on_bit_vectors() -> None:
    from camus.bench.workloads import itch_rules, siena_rules, siena_schema
    from camus.compiler.language.spec_parser import load_spec
    from tests.conftest import APPS
    itch = compile_rules(load_spec(APPS / "itch" / "itch.p4"), "\n".join(itch_rules(2000, 1)))
    assert itch.pipeline.bitvector is None
    schema = siena_schema(10)
    siena = compile_rules(parse_spec(schema.spec_text(), "siena.p4"), "\n".join(siena_rules(300, schema, seed=2)))
    assert siena.pipeline.bitvector is not None


@settings(max_examples=300, deadline=None)
@given(data=st.data(), budget=st.sampled_from([1, 20, 200]), width=st.sampled_from([1, 2, 8, 1024]),
       fanout=st.sampled_from([2, 3, 32]))
def test_switch_cover_never_under_delivers(data, budget: int, width: int, fanout: int) -> None:
    """The switch strategy with a tiny entry budget (the exact diagram given up: a cover of
    bounded width, nodes and intervals joined, drop rules left out): every port the rules select
    is still selected."""
    spec, rules, msgs = _case(data)
    exact = PipelineInterpreter(compile_rules(spec, rules).pipeline)
    c = compile_rules(spec, rules, options=CompileOptions(strategy="switch", switch_entries=budget,
                                                          cover_width=width, cover_fanout=fanout))
    assert c.pipeline.bitvector is None
    cover = PipelineInterpreter(c.pipeline)
    for m in msgs:
        a, b = exact.run(m).actions, cover.run(m).actions
        assert set(a.ports) <= set(b.ports), (rules, m, c.pipeline.cover)
