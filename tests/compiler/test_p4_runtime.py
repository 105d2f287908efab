"""P4Runtime files and deltas: P4Info and WriteRequests parse strictly with the official schema and
agree with each other; entries read back from Updates deliver what the IR does; a delta from any
rule set to any other never classifies a message by a mix of the two."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.base import TargetOptions
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.delta import apply, plan
from camus.compiler.backends.p4.entries import P4Tables, p4_tables, schema_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.runtime import (DELETE, INSERT, MODIFY, Names, encode, p4info_message,  # the
                                                p4info_pb2, p4runtime_pb2, tables_from_entities,  # protobufs
                                                text_format, updates)                 # come with their settings
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.backends.registry import backend
from camus.compiler.compile import CompileOptions, compile_files, compile_rules
from camus.compiler.language.spec_parser import parse_spec
from tests.conftest import APPS

from .strategies import messages, random_specs, rule_files

SWITCH = CompileOptions(strategy="switch")


def _files(app: str, arch: str) -> dict[str, str]:
    c = compile_files(APPS / app / f"{app}.p4", APPS / app / "rules.txt", options=SWITCH)
    return backend("p4").build(c, TargetOptions(arch=arch)).files


@pytest.mark.parametrize("app,arch", [("itch", "v1model"), ("itch", "tna"), ("int", "v1model")])
def test_p4info_and_write_request_parse_strictly_and_agree(app: str, arch: str) -> None:
    files = _files(app, arch)
    info = text_format.Parse(files["p4info.txtpb"], p4info_pb2.P4Info())      # unknown fields: an error
    req = text_format.Parse(files["entries.txtpb"], p4runtime_pb2.WriteRequest())
    assert info.pkg_info.arch == arch
    ids = [o.preamble.id for o in (*info.tables, *info.actions, *info.registers, *info.counters)]
    assert len(ids) == len(set(ids))
    prefix = ("pipe.CamusIngress.", "pipe.CamusEgress.") if arch == "tna" else ("CamusIngress.", "CamusEgress.")
    assert all(t.preamble.id >> 24 == p4info_pb2.P4Ids.TABLE and t.preamble.name.startswith(prefix) for t in info.tables)
    egress = [t for t in info.tables if "Egress" in t.preamble.name]
    # TNA's pruning table (constant entries) and the port filters (runtime entries, t_pf_*)
    assert all(t.is_const_table == (t.preamble.alias == "t_camus_prune") for t in egress)
    assert all(t.preamble.alias == "t_camus_prune" or t.preamble.alias.startswith("t_pf_") for t in egress)
    assert ("t_camus_prune" in {t.preamble.alias for t in egress}) == (arch == "tna")
    assert all(a.preamble.id >> 24 == p4info_pb2.P4Ids.ACTION for a in info.actions)
    tables = {t.preamble.id: t for t in info.tables}
    actions = {a.preamble.id: a for a in info.actions}
    for obj in (*info.counters, *info.registers):     # every extern of the P4Info is in the program
        assert re.search(rf"\b{obj.preamble.alias};", files["camus.p4"]), obj.preamble.name
    assert info.counters                              # v1model: delivered per port; TNA: oversize
    assert req.updates and req.updates[-1].entity.table_entry.is_default_action     # the root flip comes last
    for u in req.updates:
        if u.entity.WhichOneof("entity") == "packet_replication_engine_entry":
            assert u.type == INSERT and u.entity.packet_replication_engine_entry.multicast_group_entry.replicas
            continue
        te = u.entity.table_entry
        t = tables[te.table_id]
        assert te.action.action.action_id in {r.id for r in t.action_refs}
        fields = {m.id: m for m in t.match_fields}
        for fm in te.match:
            decl = fields[fm.field_id]
            kind = p4info_pb2.MatchField.MatchType.Name(decl.match_type).lower()
            assert fm.WhichOneof("field_match_type") == kind
            for v in ([fm.exact.value] if kind == "exact" else [fm.range.low, fm.range.high] if kind == "range"
                      else [fm.lpm.value]):
                assert v == encode(int.from_bytes(v, "big"), decl.bitwidth)      # canonical
        ranged = any(m.match_type == p4info_pb2.MatchField.RANGE for m in t.match_fields)
        assert (te.priority > 0) == (ranged and not te.is_default_action)
        params = {p.id: p for p in actions[te.action.action.action_id].params}
        assert {p.param_id for p in te.action.action.params} == set(params)
        assert u.type == (MODIFY if te.is_default_action else INSERT)


def test_entries_read_back_from_updates_deliver_what_the_tables_do() -> None:
    c = compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", options=SWITCH)
    tables = p4_tables(c.pipeline, c.spec)
    names = Names(p4info_message(c.spec))
    back = tables_from_entities(names, c.spec, [u.entity for u in updates(names, tables)])
    assert back.root == tables.root and back.groups == tables.groups
    assert sorted(map(repr, back.entries)) == sorted(map(repr, tables.entries))


def test_a_switch_refuses_entries_its_p4info_does_not_allow() -> None:
    c = compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", options=SWITCH)
    names = Names(p4info_message(c.spec))
    good = next(u.entity.table_entry for u in updates(names, p4_tables(c.pipeline, c.spec))
                if u.entity.table_entry.priority)
    cases = []
    bad = p4runtime_pb2.TableEntry()
    bad.CopyFrom(good)
    bad.table_id = 0x02000001
    cases.append((bad, "not in the P4Info"))
    bad = p4runtime_pb2.TableEntry()
    bad.CopyFrom(good)
    bad.priority = 0
    cases.append((bad, "priority"))
    bad = p4runtime_pb2.TableEntry()
    bad.CopyFrom(good)
    bad.match[0].exact.value = b"\x01\x00\x00\x00\x00"             # 40 bits into the 32-bit state
    cases.append((bad, "not a value of 32 bits"))
    for te, words in cases:
        ent = p4runtime_pb2.Entity(table_entry=te)
        with pytest.raises(BackendError, match=words):
            tables_from_entities(names, c.spec, [ent])


def _run(t: P4Tables, m: dict) -> tuple:
    v = EntryInterpreter(t).run(m)
    return (v.ports, v.drop, v.calls)


def _install(current: P4Tables, target: P4Tables, msgs: list[dict]) -> P4Tables:
    """Apply the plan from `current` to `target` update by update; after each, every message
    is classified as by the whole old set or the whole new set."""
    p = plan(current, target)
    before = {i: _run(current, m) for i, m in enumerate(msgs)}
    after = {i: _run(p.tables, m) for i, m in enumerate(msgs)}
    assert after == {i: _run(target, m) for i, m in enumerate(msgs)}      # renumbering changes nothing
    # custom-action ids are the controller's to know (calls.json), not the switch's; both numberings
    # agree where they overlap (a new list of calls gets an id the old set does not use)
    current.calls = {**current.calls, **p.tables.calls}
    for ch in p.changes:
        apply(current, ch)
        for i, m in enumerate(msgs):
            assert _run(current, m) in (before[i], after[i]), (str(ch), m)
    assert {i: _run(current, m) for i, m in enumerate(msgs)} == after
    current.calls = dict(p.tables.calls)
    return current


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_delta_never_classifies_by_a_mix_of_old_and_new(data) -> None:
    spec_def = data.draw(random_specs(), label="spec")
    spec = parse_spec(spec_def.text(), "random.p4")
    msgs = data.draw(messages(spec_def), label="messages")
    schema = p4_schema(spec)                        # a switch running the program, no entries yet
    switch = schema_tables(schema)
    for k in range(3):                              # fresh switch, then two changes
        rules = data.draw(rule_files(spec_def), label=f"rules{k}")
        c = compile_rules(spec, rules, options=SWITCH)
        switch = _install(switch, p4_tables(c.pipeline, spec), msgs)
    again = plan(switch, p4_tables(c.pipeline, spec))
    assert not again.changes                        # the same rules again: nothing to write


def test_one_more_subscription_changes_a_few_entries_not_the_table() -> None:
    spec_path, rules_path = APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"
    rules = rules_path.read_text()
    c = compile_files(spec_path, rules_path, options=SWITCH)
    old = p4_tables(c.pipeline, c.spec)
    c2 = compile_rules(c.spec, rules + "\nstock == ZZZZ and price > 7 : fwd(2)\n", options=SWITCH)
    p = plan(old, p4_tables(c2.pipeline, c.spec))
    n = p.counts()
    assert 0 < n["insert"] + n["modify"] + n["delete"] < len(old.entries), n
    assert [c.table for c in p.phases[-1] if c.what == "default"] in ([], ["t_root"]) or p.phases
    assert DELETE and P4Options()


@pytest.mark.parametrize("arch", ["v1model", "tna"])
def test_p4info_matches_golden(arch: str, update_goldens: bool) -> None:
    from camus.compiler.language.spec_parser import load_spec
    from camus.compiler.backends.p4.runtime import text

    from .test_golden import check_golden
    spec = load_spec(APPS / "itch" / "itch.p4")
    got = text(p4info_message(spec, P4Options(arch=arch)))
    assert got == text(p4info_message(spec, P4Options(arch=arch)))           # deterministic
    check_golden(f"itch_p4info_{arch}.txtpb", got, update_goldens)
