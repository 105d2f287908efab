"""DNS names as a query type (`query_type(h.f, dnsname)`, compiler/language/topics.py): wire
format, labels from the right without case, `*.` wildcards, the errors users see, and the answer
a leaf carries to the XDP program."""
from __future__ import annotations

import ipaddress

import pytest

from camus.compiler.backends.ebpf.custom import dns_answer
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language import topics
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.conftest import APPS

SPEC = load_spec(APPS / "dns" / "dns.p4")
NAME = SPEC.topics["dns.qname"]


def test_wire_format_and_the_text_the_data_plane_sees() -> None:
    assert topics.dns_wire("www.Example.com.", 64) == b"\x03www\x07Example\x03com\x00"
    assert topics.dns_wire("", 64) == topics.dns_wire(".", 64) == b"\x00"
    assert topics.dns_text(b"\x03www\x07Example\x03com\x00\x00\x01") == b"www.example.com"
    assert topics.dns_text(b"\xc0\x0c") is None                       # a compression pointer
    assert topics.dns_text(b"\x05ab") is None                         # runs past the field
    assert topics.split(NAME, b"\x03www\x07example\x03com\x00".ljust(64, b"\0")) == [b"com", b"example", b"www"]
    assert topics.split(NAME, b"\x00".ljust(64, b"\0")) == []         # the root: no levels, depth 0
    with pytest.raises(topics.TopicError, match="labels are 1..63"):
        topics.dns_wire("a" * 64 + ".com", 128)
    with pytest.raises(topics.TopicError, match="the field holds 8"):
        topics.dns_wire("example.com", 8)


@pytest.mark.parametrize("flt, name, hit", [
    ("www.example.com", "WWW.EXAMPLE.COM.", True), ("www.example.com", "example.com", False),
    ("*.example.com", "a.b.example.com", True), ("*.example.com", "example.com", False),
    ("*.example.com", "aexample.com", False), ("*", "com", True), ("*", "", False)])
def test_matching_without_case_and_wildcards_on_the_left(flt: str, name: str, hit: bool) -> None:
    assert topics.matches("dns", flt, name) is hit
    c = compile_rules(SPEC, f'qname == "{flt}" : fwd(1)')
    for via in ("filters", "ir"):            # the direct semantics and the label variables agree
        got = engine(via, c).run(message_from_text(SPEC, f"qname={name or '.'}"), 0)[0]
        assert (1 in got.ports) is hit, via


@pytest.mark.parametrize("rule, why", [
    ('qname == "www.*.com" : fwd(1)', "leftmost labels"),
    ('qname == "." : fwd(1)', "root name is no filter"),
    ('qname == "a.b.c.d.e.f.g" : fwd(1)', "has 7 labels"),
    ('qname == "bücher.de" : fwd(1)', "punycode"),
    ('qname > "a.com" : fwd(1)', "only == and !="),
    ('qname == "a.com" : answerDNS(10.0.0)', "unexpected character"),
    ('qname == "a.com" : answerDNS(example)', "needs an IPv4 address")])
def test_bad_filters_are_refused_with_their_position(rule: str, why: str) -> None:
    with pytest.raises(CompileErrors, match=why) as exc:
        compile_rules(SPEC, rule)
    pos = exc.value.errors[0].position
    assert pos is not None and pos.line == 1 and pos.column > 1


def test_a_dns_name_must_end_the_message_header() -> None:
    text = (APPS / "dns" / "dns.p4").read_text().replace("bit<512> qname;", "bit<512> qname; bit<16> qtype;")
    with pytest.raises(CompileErrors, match="must be the last field of the message header"):
        parse_spec(text, "dns.p4")


def test_the_lowest_address_answers_a_name_two_answer_rules_match() -> None:
    c = compile_rules(SPEC, 'qname == "*.example.com" : answerDNS(10.0.0.20)\n'
                            'qname == "www.example.com" : answerDNS(10.0.0.3)\n')
    leaves = [a for a in c.pipeline.leaves.values() if len(a.calls) == 2]
    assert [dns_answer(a) for a in leaves] == ["10.0.0.3"]             # by value, not as text
    contents = map_contents(c.pipeline, c.spec)
    answers = {v[3] for v in contents.leaf.values() if v[3]}
    assert answers == {int.from_bytes(ipaddress.IPv4Address(a).packed, "little") for a in ("10.0.0.3", "10.0.0.20")}
