"""The P4 entries, executed with P4 match semantics, deliver exactly what the IR does."""
from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.p4.budget import switch_resources
from camus.compiler.backends.p4.entries import p4_tables
from camus.compiler.backends.p4.formats import simple_switch_cli
from camus.compiler.backends.p4.runtime import Names, p4info_message, updates
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.compile import CompileOptions, compile_files, compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.language.spec_parser import parse_spec
from tests.conftest import APPS

from .strategies import messages, random_specs, rule_files


def calls_text(actions) -> tuple:
    return tuple(f"{n}({','.join(a)})" for n, a in actions.calls)


@settings(max_examples=600)
@given(data=st.data(), compress=st.sampled_from([0, 64]))
def test_entries_agree_with_the_ir(data, compress: int) -> None:
    spec_def = data.draw(random_specs(), label="spec")
    spec = parse_spec(spec_def.text(), "random.p4")
    rules = data.draw(rule_files(spec_def), label="rules")
    c = compile_rules(spec, rules, options=CompileOptions(compress_max=compress))
    ir = PipelineInterpreter(c.pipeline)
    sw = EntryInterpreter(p4_tables(c.pipeline, spec if data.draw(st.booleans(), label="static") else None))
    for m in data.draw(messages(spec_def), label="messages"):
        want = ir.run(m).actions
        got = sw.run(m)
        assert (got.ports, got.drop, got.calls) == (tuple(want.ports), want.drop and not want.ports,
                                                     calls_text(want)), (rules, m, got.trace)


def test_priority_conventions_and_formats() -> None:
    c = compile_files(APPS / "int" / "int.p4", APPS / "int" / "rules.txt")
    t = p4_tables(c.pipeline)
    ranged = [e for e in t.entries if any(m.kind == "range" for m in e.matches)]
    assert ranged and all(e.priority > 0 and e.cli_priority == (1 << 24) - e.priority for e in ranged)
    cli = simple_switch_cli(t)
    assert "table_add t_int_report_hop_latency set_state" in cli and "->" in cli
    assert "mc_mgrp_create 1" in cli and "mc_node_associate 1 0" in cli
    ups = updates(Names(p4info_message(c.spec)), p4_tables(c.pipeline, c.spec))
    assert any(u.entity.table_entry.priority for u in ups)            # P4Runtime: higher wins, as Entry.priority
    assert any(u.entity.WhichOneof("entity") == "packet_replication_engine_entry" for u in ups)
    rows = switch_resources(t)["tables"]["t_int_report_hop_latency"]["tcam_rows"]
    assert rows >= sum(1 for e in t.entries if e.table == "t_int_report_hop_latency")


def test_every_entry_is_checked_against_the_declared_tables() -> None:
    """The schema is the one declaration: an entry naming another table, key, kind, action,
    parameter count or a value too wide for its key is refused."""
    import dataclasses

    import pytest

    from camus.compiler.backends.emit import BackendError
    from camus.compiler.backends.p4.entries import Match, check_entries
    from camus.compiler.backends.p4.schema import p4_schema
    from camus.compiler.compile import compile_files
    from tests.conftest import APPS

    c = compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt")
    schema = p4_schema(c.spec)
    tables = p4_tables(c.pipeline, c.spec)
    check_entries(tables, schema)
    e = next(x for x in tables.entries if x.table == "t_add_order_price")
    bad = [dataclasses.replace(e, table="t_nowhere"),
           dataclasses.replace(e, matches=e.matches[:1]),
           dataclasses.replace(e, matches=(e.matches[0], Match(e.matches[1].field, "exact", 5))),
           dataclasses.replace(e, matches=(e.matches[0], Match(e.matches[1].field, "range", 0, 1 << 40))),
           dataclasses.replace(e, action="set_mgid"),
           dataclasses.replace(e, params=()),
           dataclasses.replace(e, priority=0)]
    for b in bad:
        with pytest.raises(BackendError):
            check_entries(dataclasses.replace(tables, entries=[b]), schema)
