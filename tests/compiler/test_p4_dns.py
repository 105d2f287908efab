"""DNS queries on the switch (compiler/backends/p4/dns.py): the v1model parser that reads a name
label by label, walked in Python against the name semantics the XDP program and the filters use;
the answer the ingress writes; the program, its entries and the refusals around it. (The answer's
bytes against the XDP program's own answer, in the kernel: tests/dataplane/test_xdp_dns.py.)"""
from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.dns import parser_walk
from camus.compiler.backends.p4.layout import dns_topic
from camus.compiler.backends.p4.entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import p4info_message
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.compile import compile_files
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.language.topics import derived_values, dns_wire
from tests.compiler.test_golden import check_golden
from tests.compiler.test_p4_program import check_entries_fit_program
from tests.conftest import APPS

SPEC, RULES = APPS / "dns" / "dns.p4", APPS / "dns" / "rules.txt"
COMPILED = compile_files(str(SPEC), str(RULES))
TOPIC = dns_topic(COMPILED.spec)
assert TOPIC is not None

# label bytes the reading treats apart: upper case, '.', NUL, the bytes around 'A'..'Z'
BYTE = st.sampled_from(b"aZAzM@[`{.\x00-09\xff")
LABEL = st.lists(BYTE, min_size=1, max_size=70).map(bytes)


def _reference(data: bytes) -> dict[str, int]:
    """What the tables must see: the XDP program's reading of the field's bytes."""
    field = data[:TOPIC.nbytes].ljust(TOPIC.nbytes, b"\0")
    return derived_values(TOPIC, int.from_bytes(field, "big"))


@settings(max_examples=400, deadline=None)
@given(labels=st.lists(LABEL, max_size=8), tail=st.binary(max_size=8), bad=st.none() | st.integers(64, 255))
def test_the_parser_reads_names_as_the_xdp_program_does(labels, tail, bad) -> None:
    wire = b"".join(bytes([min(len(lv), 255)]) + lv for lv in labels)
    if bad is not None:                     # a length byte no label has (or a compression pointer)
        wire += bytes([bad])
    data = wire + b"\0" + b"\x00\x01\x00\x01" + tail           # the root label, the question's type, class
    got = parser_walk(TOPIC, data)
    assert got is not None                  # the packet holds the whole name: it is classified
    variables, wire_len, ok = got
    assert variables == _reference(data)
    if ok:
        assert wire_len == len(wire) + 1 and data[wire_len - 1] == 0
    else:
        assert variables[f"{TOPIC.instance}.{TOPIC.name}/depth"] == 0


@pytest.mark.parametrize("name", ["www.example.com", "WWW.Example.COM", "a.b.c.d.e.cdn.example.com",
                                  "x.y", "authentication-service.example.com"])
def test_names_from_the_corpus_read_their_labels_from_the_right(name: str) -> None:
    wire = dns_wire(name, TOPIC.nbytes)
    variables, wire_len, ok = parser_walk(TOPIC, wire + b"\x00\x01\x00\x01")     # type: ignore[misc]
    assert ok and wire_len == len(wire)
    labels = name.lower().split(".")[::-1]
    head = f"{TOPIC.instance}.{TOPIC.name}"
    assert variables[f"{head}/depth"] == len(labels)
    for i in range(TOPIC.levels):
        want = labels[i].encode().ljust(TOPIC.nbytes, b"\0") if i < len(labels) else bytes(TOPIC.nbytes)
        assert variables[f"{head}/{i}"] == int.from_bytes(want, "big"), (name, i)


def test_a_packet_ending_inside_the_name_is_not_classified() -> None:
    wire = dns_wire("www.example.com", TOPIC.nbytes)
    for cut in range(len(wire)):
        assert parser_walk(TOPIC, wire[:cut]) is None, cut


def test_the_v1model_program_reads_names_and_writes_answers(update_goldens: bool) -> None:
    text = program_text(COMPILED.spec)
    check_golden("dns_v1model.p4", text, update_goldens)
    check_program_fit(COMPILED.pipeline, COMPILED.spec, "v1model")
    tables = p4_tables(COMPILED.pipeline, COMPILED.spec)
    check_entries_fit_program(text, p4info_message(COMPILED.spec), tables)
    check_entries(tables, p4_schema(COMPILED.spec))
    # the name is not a header field (a packet is shorter than 64 bytes of it): bytes, then the question
    assert "bit<512> qname;" not in text
    members = re.search(r"struct headers \{(.*?)\}", text, re.S).group(1).split()     # type: ignore[union-attr]
    assert members[-6:] == ["camus_byte_t[64]", "camus_qname;", "camus_dns_q_t", "camus_dns_q;",
                            "camus_dns_rr_t", "camus_dns_rr;"]
    emits = re.findall(r"packet\.emit\(hdr\.(\w+)\);", text)
    assert emits[-4:] == ["dns", "camus_qname", "camus_dns_q", "camus_dns_rr"]     # the record after the question
    # every state the walk goes through is in the program, and only after the name is read is it classified
    states = set(re.findall(r"state (camus_dns_qname_\w+)", text))
    assert states == {f"camus_dns_qname_{s}" for s in ("begin", "len", "label", "sep", "go", "byte", "char", "upper",
                                                         "dot", "nul", "next", "root", "last", "question", "bad")}
    assert text.count("meta.camus.classify = 1;") == 2              # the name's end, or a malformed name
    assert "truncate((bit<32>)(14 + 20 + 8 + dns_len));" in text
    assert "standard_metadata.egress_spec = standard_metadata.ingress_port;" in text
    # a query the switch does not answer (AAAA, `resolve`) is routed on to the resolver, not dropped
    tail = text[text.index("// DNS: a standard query"):text.index("control CamusEgress")]
    assert "if (meta.camus.call_id != 0 && meta.camus.deliver == 0 && meta.camus.drop == 0)" in tail
    assert tail.index("route = true;") < tail.index("ipv4_lpm.apply();")


def test_answering_leaves_carry_their_address_and_the_switch_answers_with_it() -> None:
    tables = p4_tables(COMPILED.pipeline, COMPILED.spec)
    answers = {e.params[1] for e in tables.entries if e.action == "answer_dns"}
    assert answers == {int(ipaddress.IPv4Address(a)) for a in ("10.0.0.105", "10.0.0.106", "10.0.0.107",
                                                                "10.0.0.200")}
    sw = EntryInterpreter(tables)
    for name, address in (("www.example.com", "10.0.0.105"), ("A.B.CDN.example.com", "10.0.0.200"),
                          ("api.example.com", "10.0.0.106")):
        variables, _, _ = parser_walk(TOPIC, dns_wire(name, TOPIC.nbytes))     # type: ignore[misc]
        v = sw.run(variables)
        assert v.answer == int(ipaddress.IPv4Address(address)), name
        assert v.calls == (f"answerDNS({address})",)      # the host's part, if the switch cannot answer
    for name in ("www.example.org", "x.ads.tracker.net", "db.corp.internal"):
        variables, _, _ = parser_walk(TOPIC, dns_wire(name, TOPIC.nbytes))     # type: ignore[misc]
        assert sw.run(variables).answer is None, name


def test_tofino_leaves_dns_names_to_the_control_block_with_the_reason() -> None:
    with pytest.raises(BackendError, match="Tofino's parser"):
        program_text(COMPILED.spec, P4Options(arch="tna"))


def test_a_name_that_does_not_follow_a_dns_header_is_refused_with_the_reason() -> None:
    text = SPEC.read_text().replace("bit<16>  arcount;", "bit<16>  arcount;\n    bit<8> pad;")
    from camus.compiler.language.spec_parser import parse_spec
    with pytest.raises(BackendError, match="right after a 12-byte DNS header"):
        program_text(parse_spec(text))
    assert load_spec(SPEC)             # the shipped spec itself is fine


def test_a_sinkhole_answer_of_0_0_0_0_is_still_an_answer() -> None:
    """answerDNS(0.0.0.0), the usual way to block a name, answers: the switch keeps a flag beside the
    address, as XDP keeps one in the leaf."""
    from camus.compiler.backends.p4.dns import answer_walk
    from camus.compiler.compile import compile_rules
    c = compile_rules(load_spec(SPEC), 'qname == "ads.example.com" : answerDNS(0.0.0.0)\n')
    tables = p4_tables(c.pipeline, c.spec)
    assert [e.params[1] for e in tables.entries if e.action == "answer_dns"] == [0]
    wire = dns_wire("ads.example.com", TOPIC.nbytes)
    variables, wire_len, _ = parser_walk(TOPIC, wire + b"\x00\x01\x00\x01")     # type: ignore[misc]
    assert EntryInterpreter(tables).run(variables).answer == 0
    frame = bytes(42) + b"\x12\x34\x01\x00\x00\x01" + bytes(6) + wire + b"\x00\x01\x00\x01"
    frame = frame[:12] + b"\x08\x00\x45" + frame[15:]                 # IPv4, IHL 5
    reply = answer_walk(frame, 54, wire_len, "0.0.0.0")
    assert reply is not None and reply.endswith(b"\x00\x04" + bytes(4))   # an A record of 0.0.0.0


def test_a_changed_answer_is_a_small_update_that_lands_whole() -> None:
    """A rule set where one name answers with another address: the switch's update (p4_delta) is a
    few entries, the call ids stay the controller's, and after it the switch answers with the new one."""
    from camus.compiler.backends.p4.delta import apply, plan
    from camus.compiler.compile import compile_rules
    rules = RULES.read_text()
    old = p4_tables(COMPILED.pipeline, COMPILED.spec)
    c2 = compile_rules(COMPILED.spec, rules.replace("answerDNS(10.0.0.105)", "answerDNS(10.0.0.99)"))
    p = plan(old, p4_tables(c2.pipeline, c2.spec))
    n = p.counts()
    assert 0 < n["insert"] + n["modify"] + n["delete"] < len(old.entries), n
    old.calls = {**old.calls, **p.tables.calls}
    for ch in p.changes:
        apply(old, ch)
    variables, _, _ = parser_walk(TOPIC, dns_wire("www.example.com", TOPIC.nbytes))     # type: ignore[misc]
    assert EntryInterpreter(old).run(variables).answer == int(ipaddress.IPv4Address("10.0.0.99"))
    variables, _, _ = parser_walk(TOPIC, dns_wire("api.example.com", TOPIC.nbytes))     # type: ignore[misc]
    assert EntryInterpreter(old).run(variables).answer == int(ipaddress.IPv4Address("10.0.0.106"))
