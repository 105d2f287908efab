"""Lower-resolution domains (`@pragma query_field_domain(h.f, bits)`, Camus's technique for fields
with few distinct boundaries): the switch maps the raw value to a code in one TCAM table keyed by
the root, then matches (state, code) exactly in SRAM. The entries deliver what the IR does on
random specs and rules, the checker proves them equal (and catches a wrong code), a push is
make-before-break, the program declares what the entries use, and a bad pragma is refused at its
position."""
from __future__ import annotations

import dataclasses
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.bench.workloads import itch_rules, symbols
from camus.compiler.backends.base import OverBudget
from camus.compiler.backends.p4.budget import switch_resources
from camus.compiler.backends.p4.entries import check_entries, p4_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import Names, p4info_message, updates
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.compile import compile_rules
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.verify.check import check
from camus.verify.machines import p4_machine
from camus.verify.rules import read_rules
from tests.conftest import APPS

from .strategies import messages, random_specs, rule_files
from .test_p4_live_delta import SWITCH, _empty, _step, itch_feed

ITCH_DOMAIN = (APPS / "itch" / "itch.p4").read_text().replace(
    "@pragma query_field(add_order.price)\n",
    "@pragma query_field(add_order.price)\n@pragma query_field_domain(add_order.price, 12)\n")


def _with_domains(text: str, spec_def) -> str:
    """The random spec with a domain on every integer range field wide enough for one."""
    extra = [f"@pragma query_field_domain(msg.{f.name}, {min(16, f.width - 1)})" for f in spec_def.fields
             if f.kind in ("auto", "range") and not f.string and f.width >= 4]
    return text + "\n".join(extra) + "\n"


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_domain_entries_agree_with_the_ir_and_are_proven_equal(data) -> None:
    spec_def = data.draw(random_specs(), label="spec")
    spec = parse_spec(_with_domains(spec_def.text(), spec_def), "random.p4")
    rules = data.draw(rule_files(spec_def), label="rules")
    c = compile_rules(spec, rules)
    schema = p4_schema(spec)
    tables = p4_tables(c.pipeline, spec)
    check_entries(tables, schema)
    ir, sw = PipelineInterpreter(c.pipeline), EntryInterpreter(tables)
    for m in data.draw(messages(spec_def), label="messages"):
        want, got = ir.run(m).actions, sw.run(m)
        assert (got.ports, got.drop) == (tuple(want.ports), want.drop and not want.ports), (rules, m, got.trace)
    if not c.pipeline.state_vars and not any(t.table == "t_leaf_calls" for t in tables.entries):
        assert check(read_rules(spec, rules), p4_machine(spec, tables, schema)).verdict == "equal"


def _itch(n: int = 300):
    spec = parse_spec(ITCH_DOMAIN, "itch.p4")
    return spec, compile_rules(spec, "\n".join(itch_rules(n, 1, n_symbols=10, n_hosts=16)) + "\n")


def test_codes_are_per_boundary_under_the_root_and_the_states_match_codes_exactly() -> None:
    spec, c = _itch()
    t = p4_tables(c.pipeline, spec)
    codes = [e for e in t.entries if e.table == "t_add_order_price_code"]
    prices = {int(r.split("price > ")[1].split()[0]) for r in itch_rules(300, 1, n_symbols=10, n_hosts=16)}
    # a code per interval between boundaries where some state's outcome changes (price > P: at P + 1)
    assert 0 < len(codes) <= len(prices) and {e.matches[1].value for e in codes} <= {p + 1 for p in prices}
    assert sorted(e.params[0] for e in codes) == list(range(1, len(codes) + 1))
    assert {e.matches[0].value for e in codes} == {t.root}
    assert all(m.kind == "exact" for e in t.entries if e.table == "t_add_order_price" for m in e.matches)
    assert t.order[0] == "t_add_order_price_code" and "t_add_order_price_exact" not in t.order
    r = switch_resources(t, p4_schema(spec))
    assert r["tables"]["t_add_order_price"]["tcam_rows"] == 0 and r["tables"]["t_add_order_price"]["kind"] == "exact"
    assert r["tables"]["t_add_order_price_code"]["kind"] == "range" and r["stages"] <= 12
    # the program declares the code, its action and table; P4Runtime carries the entries
    text = program_text(spec, P4Options(arch="tna"))
    assert "bit<12> add_order_price_code;" in text
    assert re.search(r"action set_add_order_price_code\(bit<12> code\)", text)
    assert text.index("t_add_order_price_code.apply()") < text.index("t_add_order_stock_exact.apply()")
    ups = updates(Names(p4info_message(spec)), t)
    assert sum(1 for u in ups if u.entity.table_entry.priority) >= len(codes)


def test_a_wrong_code_is_caught_with_a_counterexample() -> None:
    spec, c = _itch(60)
    t = p4_tables(c.pipeline, spec)
    schema = p4_schema(spec)
    rules = read_rules(spec, "\n".join(itch_rules(60, 1, n_symbols=10, n_hosts=16)) + "\n")
    assert check(rules, p4_machine(spec, t, schema)).verdict == "equal"
    i = next(k for k, e in enumerate(t.entries) if e.table == "t_add_order_price_code")
    e = t.entries[i]
    t.entries[i] = dataclasses.replace(e, params=(e.params[0] + 1,))
    got = check(rules, p4_machine(spec, t, schema))
    assert got.verdict == "differs" and got.counterexample is not None


def test_more_boundaries_than_codes_is_over_budget_and_fitting_discretises() -> None:
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.registry import backend
    from camus.compiler.fitting import build_fitted
    spec = parse_spec(ITCH_DOMAIN.replace("add_order.price, 12", "add_order.price, 4"), "itch.p4")
    c = compile_rules(spec, "\n".join(itch_rules(200, 1, n_symbols=5, n_hosts=8)) + "\n")
    with pytest.raises(OverBudget, match="codes"):
        p4_tables(c.pipeline, spec)
    notes: list[str] = []
    fitted = build_fitted(c, backend("p4"), TargetOptions(notice=notes.append))
    assert fitted.compiled.options.alpha > 1 and any("codes" in n for n in notes)


def test_pushes_with_new_boundaries_are_make_before_break() -> None:
    spec = parse_spec(ITCH_DOMAIN, "itch.p4")
    rng = random.Random(5)
    lines = itch_rules(120, 2, n_symbols=8, n_hosts=10)
    msgs = itch_feed(spec, 40, 8)
    inc = IncrementalCompiler(spec, SWITCH)
    switch, held = _empty(spec), None
    for k in range(5):
        if k:        # new prices: new boundaries, every code above them moves
            lines += [f"stock == {rng.choice(symbols(8))} and price > {rng.randint(1, 1000)} : fwd({rng.randint(1, 10)})"
                      for _ in range(3)]
            lines.pop(rng.randrange(len(lines)))
        held, fast = _step(switch, held, inc.compile("\n".join(lines) + "\n"), spec, msgs)
        assert not fast                                  # the whole-set plan: codes are not per state


@pytest.mark.parametrize("pragma, says", [
    ("@pragma query_field_domain(add_order.price)", "takes a query field and a code width"),
    ("@pragma query_field_domain(add_order.nope, 8)", "not a query field"),
    ("@pragma query_field_domain(add_order.price, 32)", "a domain of 1..16 bits"),
    ("@pragma query_field_domain(add_order.buy_sell_indicator, 4)", "integer range fields"),
    ("@pragma query_field_domain(add_order.stock, 8)", "integer range fields"),
])
def test_a_bad_domain_is_refused_at_its_position(pragma: str, says: str) -> None:
    text = (APPS / "itch" / "itch.p4").read_text() + pragma + "\n"
    with pytest.raises(CompileErrors) as exc:
        parse_spec(text, "itch.p4")
    assert says in str(exc.value) and f":{text.count(chr(10))}:" in str(exc.value)


def test_narrow_state_ids_pack_more_entries_a_word_and_too_many_states_are_fitted() -> None:
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.registry import backend
    from camus.compiler.fitting import build_fitted
    spec, c = _itch()
    wide = backend("p4").build(c, TargetOptions(arch="tna"))
    narrow = backend("p4").build(c, TargetOptions(arch="tna", state_bits=16))
    ram = {k: __import__("json").loads(a.files["switch_resources.json"])["tables"]["t_add_order_price"]["sram_rams"]
           for k, a in (("wide", wide), ("narrow", narrow))}
    # (state, 12-bit code) -> state: 70 bits with 32-bit ids (nine in five words), 38 with 16 (three a word)
    from camus.compiler.backends.p4.tofino import exact_words, rams
    n = __import__("json").loads(narrow.files["switch_resources.json"])["tables"]["t_add_order_price"]["entries"]
    words = {"wide": exact_words(n, 44, 32), "narrow": exact_words(n, 28, 16)}
    assert ram == {k: rams(w) for k, w in words.items()}          # whole RAMs, as the table reserves them
    assert words["narrow"] * 5 <= words["wide"] * 3 + 5
    assert "bit<16> state;" in narrow.files["camus.p4"] and "set_state(bit<16> next)" in narrow.files["camus.p4"]
    assert "bitwidth: 16" in narrow.files["p4info.txtpb"]
    c = compile_rules(spec, "\n".join(itch_rules(500, 1, n_symbols=10, n_hosts=200)) + "\n")   # ids: 9 bits
    with pytest.raises(OverBudget, match="state ids"):
        backend("p4").build(c, TargetOptions(state_bits=8))
    notes: list[str] = []
    fitted = build_fitted(c, backend("p4"), TargetOptions(state_bits=8, notice=notes.append))
    assert any("state ids" in n for n in notes) and "set_state(bit<8> next)" in fitted.artefacts.files["camus.p4"]
