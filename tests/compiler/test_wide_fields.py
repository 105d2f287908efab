"""Fields wider than 64 bits (IPv6 addresses) are matched as two 64-bit words: the split of an
interval set over the whole field into a formula over the words, the spec's words, and every
layer (filters on the whole value, IR and switch entries on the words) agreeing on any address."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.logic.intervals import contains, normalise
from camus.compiler.logic.words import word_formula
from camus.compiler.semantics.filter_eval import eval_formula

TOP = (1 << 128) - 1
M64 = (1 << 64) - 1

SPEC = """
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv6_t { bit<4> version; bit<8> tc; bit<20> flow; bit<16> plen; bit<8> nh; bit<8> hl;
                bit<128> src; bit<128> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header m_t { bit<32> seq; bit<128> name; }
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; m_t m; }
@pragma udp_port(9000)
@pragma query_field_lpm(ipv6.dst)
@pragma query_field(ipv6.src)
@pragma query_field(m.name)
@pragma query_type(m.name, string)
@pragma query_counter(w, 1048576, 8)
"""

# Points near the words' boundaries, where a split goes wrong first.
edge = st.sampled_from([0, 1, M64 - 1, M64, M64 + 1, 1 << 64, (1 << 64) + 5, TOP - M64, TOP - 1, TOP])
point = st.one_of(edge, st.integers(0, TOP), st.builds(lambda h, lo: h << 64 | lo, st.integers(0, 3),
                                                       st.sampled_from([0, 1, M64 - 1, M64])))


@settings(max_examples=300, deadline=None)
@given(bounds=st.lists(st.tuples(point, point), max_size=4), probes=st.lists(point, min_size=1, max_size=12))
def test_the_words_formula_holds_exactly_where_the_interval_set_does(bounds, probes) -> None:
    iset = normalise([(min(a, b), max(a, b)) for a, b in bounds])
    f = word_formula(iset, 128, 0, 1)
    for v in probes + [x for lo, hi in iset for x in (lo, hi, max(lo - 1, 0), min(hi + 1, TOP))]:
        assert eval_formula(f, [v >> 64, v & M64]) == contains(iset, v), (iset, hex(v))


def test_a_wide_field_is_two_words_with_their_own_offsets() -> None:
    spec = parse_spec(SPEC, "v6.p4")
    words = {q.path: (q.offset, q.width, q.whole, q.part) for q in spec.query_fields if q.whole}
    assert words == {"ipv6.dst/hi": (192, 64, "ipv6.dst", "hi"), "ipv6.dst/lo": (256, 64, "ipv6.dst", "lo"),
                     "ipv6.src/hi": (64, 64, "ipv6.src", "hi"), "ipv6.src/lo": (128, 64, "ipv6.src", "lo"),
                     "m.name/hi": (32, 64, "m.name", "hi"), "m.name/lo": (96, 64, "m.name", "lo")}
    assert [q.path for q in spec.fields_named("dst")] == ["ipv6.dst"]      # rules name the whole field
    values = message_from_text(spec, "dst=2001:db8::1:2 name=ABCDEFGHIJKL")
    assert (values["ipv6.dst/hi"], values["ipv6.dst/lo"]) == (0x20010DB800000000, 0x10002)
    assert values["m.name/hi"] == int.from_bytes(b"ABCDEFGH", "big")


def test_sums_of_wide_fields_are_refused_where_they_are_written() -> None:
    spec = parse_spec(SPEC, "v6.p4")
    with pytest.raises(CompileErrors) as exc:
        compile_rules(spec, "dst == ::1 and sum(ipv6.src) > 5 : fwd(1)")
    err = exc.value.errors[0]
    assert "64-bit" in err.message and err.position.column == 16
    compile_rules(spec, "ipv6.dst == b001::/16 and count(ipv6.dst) > 5 : fwd(1)")   # counting is fine


@pytest.mark.parametrize("rule, column, words", [
    ("dst == 2001:db8::1 : ila(2001:db8:1:2::1)", 26, "identifier"),
    ("dst == 2001:db8::1 : ila(2001:db8:1:2::/48)", 26, "identifier"),
    ("dst == 2001:db8::1 : ila(10.0.0.1)", 26, "IPv6 prefix"),
    ("dst == 2001:db8::1 : ila()", 22, "one locator")])
def test_ila_locators_are_checked_where_they_are_written(rule: str, column: int, words: str) -> None:
    with pytest.raises(CompileErrors) as exc:
        compile_rules(parse_spec(SPEC, "v6.p4"), rule)
    err = exc.value.errors[0]
    assert words in err.message and err.position.column == column


RULES = """
ipv6.dst == 2001:db8::/32 : fwd(1)
ipv6.dst == 2001:db8:0:0:8000::/65 : fwd(2)
ipv6.dst == 2001:db8:0:0:0:0:0:7 : fwd(3)
ipv6.dst == b001::/16 and not ipv6.dst == b001:0:0:1::/64 : fwd(4)
ipv6.src >= 2001:db8:0:0:ffff:ffff:ffff:fff0 and ipv6.src < 2001:db8:0:1:0:0:0:10 : fwd(5)
ipv6.src != ::1 and ipv6.dst == ::/1 : fwd(6)
name == "ABCDEFGHIJ" : fwd(7)
name prefix "ABCDEFGHI" and not name == "ABCDEFGHIJ" : fwd(8)
name > "ZZZZZZZZZZ" : fwd(9)
"""
ADDR = st.one_of(st.sampled_from(["2001:db8::7", "2001:db8::8000:0:0:1", "2001:db8::7fff:ffff:ffff:ffff",
                                  "2001:db8::ffff:ffff:ffff:fff0", "2001:db8:0:1::f", "2001:db8:0:1::10", "::1",
                                  "b001::1", "b001:0:0:1::1", "b001:0:0:2::", "2001:db9::", "::"]),
                 st.integers(0, TOP).map(lambda v: str(ipaddress.IPv6Address(v))))
NAME = st.sampled_from(["ABCDEFGHIJ", "ABCDEFGHIK", "ABCDEFGH", "ZZZZZZZZZZZ", "ZZZZZZZZZZ", "A"])


@settings(max_examples=150, deadline=None)
@given(dst=ADDR, src=ADDR, name=NAME)
def test_every_layer_agrees_on_any_address(dst: str, src: str, name: str) -> None:
    spec = parse_spec(SPEC, "v6.p4")
    c = compile_rules(spec, RULES)
    msg = message_from_text(c.spec, f"dst={dst} src={src} name={name}")
    got = {via: engine(via, c).run(dict(msg), 0)[0].names() for via in ("filters", "ir", "p4")}
    assert got["ir"] == got["filters"] == got["p4"], (dst, src, name, got)
