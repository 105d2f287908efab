"""`@pragma query_default_action(...)`: what a message no rule delivers gets, through the rules,
the IR (diagram and bit vectors), the switch entries (the leaf table's default in every entry
format), and its refusals."""
from __future__ import annotations

import json

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.ebpf.program import generate_header, EbpfLimits
from camus.compiler.backends.p4.entries import check_entries, p4_tables
from camus.compiler.backends.p4.formats import bfrt_python, simple_switch_cli
from camus.compiler.backends.p4.runtime import Names, p4info_message, tables_from_entities, updates
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.ir.pipeline import Pipeline
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.conftest import APPS

DNS = """@pragma query_field_exact(dns_q.qname, 64)
@pragma query_field(dns_q.qtype, 16)
@pragma query_default_action({})
"""
RULES = """dns_q.qname == "example" and dns_q.qtype == 1 : fwd(1);
dns_q.qtype == 28 : fwd(2);
dns_q.qname == "blocked" : drop;
dns_q.qname == "counted" : answerDNS(10.0.0.1);"""
MESSAGES = ["qname=example qtype=1", "qname=other qtype=28", "qname=blocked qtype=5", "qname=counted qtype=5",
            "qname=other qtype=1", "qname=example qtype=2"]
RULED = [["fwd(1)"], ["fwd(2)"], ["drop"], ["answerDNS(10.0.0.1)"]]     # the first four: a rule decides


@pytest.mark.parametrize("default, names", [("notfoundDNS", ["notfoundDNS()"]), ("fwd(7)", ["fwd(7)"]),
                                            ("fwd(7, 8)", ["fwd(7,8)"]), ("drop", ["drop"]),
                                            ("reply(nx, 3)", ["reply(nx,3)"])])
@pytest.mark.parametrize("strategy", ["bdd", "bitvector"])
def test_the_default_applies_exactly_where_no_rule_delivers(default: str, names: list[str], strategy: str) -> None:
    spec = parse_spec(DNS.format(default), "dns.p4")
    c = compile_rules(spec, RULES, options=CompileOptions(strategy=strategy))
    assert (c.pipeline.bitvector is not None) == (strategy == "bitvector")
    for via in ["filters", "ir"] + (["p4"] if strategy == "bdd" else []):
        eng = engine(via, c)
        got = [eng.run(message_from_text(spec, m), 0)[0].names() for m in MESSAGES]
        assert got == RULED + [names, names], via
    back = Pipeline.from_json(json.loads(c.pipeline.dumps()))      # the IR keeps it
    assert back.default_action == c.pipeline.default_action


def test_a_leaf_that_only_counts_still_gets_the_default() -> None:
    spec = parse_spec(DNS.format("notfoundDNS"), "dns.p4")
    c = compile_rules(spec, RULES, options=CompileOptions(count_rules=4))
    a, _ = engine("ir", c).run(message_from_text(spec, "qname=other qtype=1"), 0)
    assert a.names() == ["notfoundDNS()"]
    a, _ = engine("ir", c).run(message_from_text(spec, "qname=example qtype=1"), 0)
    assert a.names() == ["fwd(1)"] and a.rules == (0,)


def test_every_switch_entry_format_sets_the_leaf_tables_default() -> None:
    spec = parse_spec(DNS.format("notfoundDNS"), "dns.p4")
    c = compile_rules(spec, RULES)
    tables = p4_tables(c.pipeline, spec)
    check_entries(tables, p4_schema(spec))
    assert tables.defaults == {"t_leaf": ("call", (1,))} and tables.calls[1] == ("notfoundDNS()",)
    assert tables.calls[2] == ("answerDNS(10.0.0.1)",)              # rules' calls after the default's id
    assert "table_set_default t_leaf call 1" in simple_switch_cli(tables)
    assert "ig.t_leaf.set_default_with_call(call_id=1)" in bfrt_python(tables)
    names = Names(p4info_message(spec, whole_program=False))
    ups = updates(names, tables)
    leaf = names.table("t_leaf").id
    assert any(u.entity.table_entry.table_id == leaf and u.entity.table_entry.is_default_action for u in ups)
    back = tables_from_entities(names, spec, [u.entity for u in ups])
    assert back.defaults == tables.defaults
    back.calls = tables.calls
    assert EntryInterpreter(back).run(message_from_text(spec, "qname=zzz qtype=9")).calls == ("notfoundDNS()",)


@pytest.mark.parametrize("default, text", [("notfoundDNS", "default_action = call(1);"),
                                           ("fwd(3)", "default_action = set_port(3);"),
                                           ("drop", "default_action = drop_msg();")])
def test_the_switch_program_declares_the_default(default: str, text: str) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    spec.default_action, spec.default_atoms = default, parse_spec(DNS.format(default), "d.p4").default_atoms
    program = program_text(spec)
    leaf = program[program.index("table t_leaf "):]
    leaf = leaf[:leaf.index("size =")]
    assert text in leaf and f"query_default_action({default})" in leaf
    assert ("call;" in leaf) == default.startswith("notfound")


def test_refusals_name_the_problem() -> None:
    for bad, why in [("fwd(99999)", "port 99999 is out of range"), ("fwd(", "query_default_action"),
                     ("", "needs an action")]:
        with pytest.raises(CompileErrors, match=why) as err:
            parse_spec(DNS.format(bad), "bad.p4")
        assert "bad.p4:3:" in str(err.value)
    with pytest.raises(CompileErrors, match="given twice"):
        parse_spec(DNS.format("a") + "@pragma query_default_action(b)\n", "twice.p4")
    spec = parse_spec(DNS.format("fwd(1), notify"), "mixed.p4")
    with pytest.raises(BackendError, match="one default action"):
        p4_tables(compile_rules(spec, RULES).pipeline, spec)
    itch = (APPS / "itch" / "itch.p4").read_text()
    with pytest.raises(BackendError, match="an XDP host applies a default of custom actions"):
        generate_header(parse_spec(itch + "\n@pragma query_default_action(fwd(2))\n", "itch.p4"), EbpfLimits())
    header = generate_header(parse_spec(itch + "\n@pragma query_action(notfound)\n@pragma query_default_action(notfound)\n",
                                        "itch.p4"), EbpfLimits())
    assert "#define CAMUS_DEFAULT_FLAGS CAMUS_LEAF_CALL" in header
