"""Every user-facing error names the place of the mistake and what was expected."""
from __future__ import annotations

import pytest

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec

SPEC = """
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
                bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header quote_t { bit<64> stock; bit<32> price; bit<16> venue; bit<32> dst_ip; bit<8> side; bit<16> port; }
header other_t { bit<16> port; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; quote_t quote; }
@pragma query_field_exact(quote.stock)
@pragma query_field(quote.price)
@pragma query_field_exact(quote.venue)
@pragma query_field_lpm(quote.dst_ip)
@pragma query_field(quote.side)
@pragma query_field(quote.port)
@pragma query_field(ipv4.dst)
@pragma query_field(ethernet.dst)
@pragma query_counter(w, 1000, 1)
"""
spec = parse_spec(SPEC, "test.p4")


def errors_of(rules: str, **opts) -> list:
    with pytest.raises(CompileErrors) as info:
        compile_rules(spec, rules, "r.txt", CompileOptions(**opts) if opts else None)
    return info.value.errors


RULE_CASES = [
    # (rules, expected text, line, column)
    ("price > 5 : fwd(1)\nprice ? 3 : fwd(1)\n", "unexpected character '?'", 2, 7),
    ("price > 5 fwd(1)\n", "expected ':' between the filter and its actions", 1, 11),
    ("price > 5 :\n", "expected an action", 1, 12),
    ("price > 5 : fwd(1)\nprice >\n", "unexpected end of input", 2, 8),
    ("(price > 5 : fwd(1)\n", "expected ')' to close the '(' at column 1", 1, 12),
    ("price > : fwd(1)\n", "expected a constant", 1, 9),
    ("price : fwd(1)\n", "expected a relation", 1, 7),
    ("price > 5.5 : fwd(1)\n", "fractional constant 5.5", 1, 9),
    ("dst_ip == 300.1.1.1 : fwd(1)\n", "bad IPv4 address", 1, 11),
    ("dst_ip == 10.0.0.0/x : fwd(1)\n", "expected a prefix length", 1, 20),
    ("price > 5 : fwd(1) fwd(2)\n", "expected ',' and another action", 1, 20),
    ("and : fwd(1)\n", "expected a field, 'not', '(', 'true' or 'false'", 1, 1),
    ("stok == A : fwd(1)\n", "unknown field 'stok'", 1, 1),
    ("dst == 1 : fwd(1)\n", "field name 'dst' is ambiguous", 1, 1),
    ("ipv4.src == 1 : fwd(1)\n", "ipv4.src is not a query field", 1, 1),
    ("stock == price : fwd(1)\n", "bare word 'price' is also a field name", 1, 10),
    ('price == "A" : fwd(1)\n', "quote.price holds numbers, not strings", 1, 10),
    ('stock == "ABCDEFGHI" : fwd(1)\n', "longer than quote.stock (8 bytes)", 1, 10),
    ('stock == "\U0001F600\U0001F600" : fwd(1)\n', "has a character outside Latin-1", 1, 10),
    ('price > 1 and stock != "\u20ac" : fwd(1)\n', "has a character outside Latin-1", 1, 24),
    ("venue == 10.0.0.1 : fwd(1)\n", "IPV4 constant on quote.venue", 1, 10),
    ("venue == 70000 : fwd(1)\n", "constant 70000 does not fit quote.venue (bit<16>", 1, 10),
    ("stock > 5 : fwd(1)\n", "exact-match field: only == and != apply", 1, 7),
    ("dst_ip < 5 : fwd(1)\n", "longest-prefix field: only ==, != and prefix apply", 1, 8),
    ('price prefix "A" : fwd(1)\n', "prefix needs a string or address field", 1, 7),
    ("dst_ip prefix 5 : fwd(1)\n", "prefix needs a string or an address/length", 1, 15),
    ("price < 5/3 : fwd(1)\n", "a prefix only goes with ==, != or prefix", 1, 7),
    ("dst_ip == 10.0.0.0/33 : fwd(1)\n", "prefix length /33 is longer than quote.dst_ip", 1, 11),
    ('count(price, nope) > 3 : fwd(1)\n', "unknown or unspecified counter 'nope'", 1, 1),
    ('count(price) > "x" : fwd(1)\n', "count() compares with a number", 1, 16),
    ('count(price) prefix 3/2 : fwd(1)\n', "prefix does not apply to state functions", 1, 14),
    ('count(price) > 3 : fwd(1)\ncount(venue) > 3 : fwd(1)\n', "counter w holds 1 state variables", 2, 1),
    ("price > 5 : fwd()\n", "fwd needs at least one port", 1, 13),
    ("price > 5 : fwd(70000)\n", "port 70000 is out of range", 1, 17),
    ("price > 5 : fwd(\"x\")\n", "bad port", 1, 17),
    ("price > 5 : drop(1)\n", "drop takes no arguments", 1, 13),
    ("price > 5 : forward(1)\n", "unknown action 'forward'", 1, 13),
    ("price > 5 : fwd(1), fwrd(2)\n", "did you mean fwd?", 1, 21),
    ("price > 5 : Fwd(1)\n", "did you mean fwd?", 1, 13),
    ("price > 5 : mark(1)\n", "@pragma query_action(mark)", 1, 13),
]


@pytest.mark.parametrize("rules,text,line,col", RULE_CASES)
def test_rule_errors_name_position(rules: str, text: str, line: int, col: int) -> None:
    errs = errors_of(rules)
    assert any(text in e.render() for e in errs), [e.render() for e in errs]
    e = next(e for e in errs if text in e.render())
    assert (e.position.line, e.position.column) == (line, col), e.render()
    assert e.line_text is not None and "^" in e.render()


def test_custom_actions_are_the_ones_the_spec_declares() -> None:
    declared = parse_spec(SPEC + "@pragma query_action(mark, audit)\n", "q.p4")
    c = compile_rules(declared, "price > 5 : mark(1), audit\nprice > 9 : fwd(2)\n")
    assert {a for leaf in c.pipeline.leaves.values() for a in leaf.names()} >= {"mark(1)", "audit()"}
    program = parse_spec(SPEC + "action mark(bit<8> level) { }\n", "p.p4")      # a P4 program's own action
    assert compile_rules(program, "price > 5 : mark(1)\n").pipeline.leaves
    camus_style = parse_spec("@pragma query_field(q.price, 32)\n", "camus.p4")   # the user's program's actions
    assert compile_rules(camus_style, "price > 5 : report(1)\n").pipeline.leaves
    with pytest.raises(CompileErrors, match="query_action needs custom action names"):
        parse_spec(SPEC + "@pragma query_action(fwd)\n", "bad.p4")


def test_every_bad_rule_is_reported_and_nothing_compiles() -> None:
    errs = errors_of("price > 5 : fwd(1)\nstok == 1 : fwd(1)\nprice > 5 : fwd(1)\nside prefix 3 : fwd(2)\n")
    assert [e.position.line for e in errs] == [2, 4]
    msg = str(CompileErrors(errs))
    assert "nothing was compiled or changed" in msg


def test_syntax_errors_in_several_rules_are_all_reported() -> None:
    errs = errors_of("price > : fwd(1)\nprice > 5 : fwd(1)\nprice < 5 :: fwd(1)\n")
    assert [e.position.line for e in errs] == [1, 3]


def test_dnf_limit_is_reported_at_the_rule() -> None:
    clause = " and ".join(f"(price > {i} or side > {i})" for i in range(14))
    errs = errors_of(f"price > 1 : fwd(1)\n{clause} : fwd(2)\n", dnf_limit=1000)
    assert errs[0].position.line == 2 and "conjunctions" in errs[0].message


def test_diagram_limit_is_a_clear_error() -> None:
    rules = "\n".join(f"price > {i} : fwd({i % 7 + 1})" for i in range(50))
    errs = errors_of(rules, max_nodes=5)
    assert "decision diagram grew past 5 nodes" in errs[0].message
    assert "--order heuristic" in (errs[0].expected or "")


SPEC_CASES = [
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.b)\n", "unknown field 'h.b'", 3),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a, 16)\n", "declared bit<8> but the pragma says 16", 3),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma query_field_exact(h.a)\n", "declared as a query field twice", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma query_counter(c, 10)\n", "query_counter takes 3 arguments", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma query_counter(c, -1, 1)\n", "window 0 (never resets) or positive", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma udp_port(70000)\n", "udp_port needs ports in 1..65535", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma message_framing(tcp)\n", "unknown framing 'tcp'", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma query_type(h.a, float)\n", "query_type needs a query field and a type", 4),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n@pragma message_type(h.z, 1)\n", "message_type needs a declared field", 4),
    ("header h_t { bit<8> a; }\nheader h_t { bit<8> b; }\n", "header type 'h_t' declared twice", 2),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; h_t h; }\n@pragma query_field(h.a)\n", "header instance 'h' declared twice", 2),
    ("header h_t { float a; }\n", "unknown field type 'float'", 1),
    ("header h_t { bit<8> a; \n", "unterminated header", 1),
    ("header h_t { bit<8> a; }\n$\n", "unexpected character '$'", 2),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n", "the spec declares no query fields", 1),
    ("header h_t { bit<200> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)\n", "query fields are at most 128", 3),
    ("header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_counter\n@pragma query_field(h.a)\n", "query_counter takes 3 arguments", 3),
]


@pytest.mark.parametrize("text,message,line", SPEC_CASES)
def test_spec_errors_name_position(text: str, message: str, line: int) -> None:
    with pytest.raises(CompileErrors) as info:
        parse_spec(text, "bad.p4")
    errs = info.value.errors
    assert any(message in e.render() for e in errs), [e.render() for e in errs]
    e = next(e for e in errs if message in e.render())
    assert e.position.line == line and e.position.source == "bad.p4"


def test_check_rules_refuses_exactly_what_compile_rules_refuses() -> None:
    """The controller checks each filter with check_rules (no tables built: a quarter of its
    event loop under churn went to building them): the same errors, at the same positions."""
    import pytest
    from camus.compiler.compile import check_rules, compile_rules
    from camus.compiler.language.errors import CompileError, CompileErrors
    from camus.compiler.language.spec_parser import load_spec
    from tests.conftest import APPS
    spec = load_spec(APPS / "itch" / "itch.p4")
    for text in ("stock == GOOGL and price > 50 : fwd(1)", "stock == GOOGL : fwd(1)\nprice < 3 : drop",
                 "stock == : fwd(1)", "stok == GOOGL : fwd(1)", "price > 99999999999 : fwd(1)",
                 "stock == GOOGL and price > 50", "(" * 200 + "price > 1" + ")" * 200 + " : fwd(1)",
                 " or ".join(f"(price > {i} and price < {i + 2})" for i in range(0, 9000, 3)) + " : fwd(1)"):
        try:
            compile_rules(spec, text, "<f>")
            whole = None
        except (CompileErrors, CompileError) as exc:
            whole = str(exc)
        if whole is None:
            check_rules(spec, text, "<f>")
        else:
            with pytest.raises((CompileErrors, CompileError)) as checked:
                check_rules(spec, text, "<f>")
            assert str(checked.value) == whole, text[:60]


def test_a_message_string_outside_latin1_is_refused_not_turned_into_question_marks() -> None:
    from camus.compiler.codec.packets import message_from_text
    with pytest.raises(ValueError, match="outside Latin-1"):
        message_from_text(spec, 'stock="\u20ac\u20ac"')
    assert message_from_text(spec, 'stock="caf\u00e9"')["quote.stock"] != message_from_text(spec, 'stock="caf?"')["quote.stock"]


@pytest.mark.parametrize("rules", [case[0] for case in RULE_CASES] + [
    "stok == 1 : fwd(1)\nprice > : fwd(1)\n",              # a type error before a syntax error
    "price > 5 : fwd(1)\nstok == 1 : fwd(1)\nprice > 5 : fwd(1)\nside prefix 3 : fwd(2)\n"])
def test_a_compile_that_lets_its_rules_go_refuses_what_the_full_compile_refuses(rules: str) -> None:
    # keep_rules=False lowers each rule as the parser yields it: the syntax errors still reject
    # the file first (no type error of a rule before them is reported), every error is listed
    with pytest.raises(CompileErrors) as kept:
        compile_rules(spec, rules, "r.txt")
    with pytest.raises(CompileErrors) as lean:
        compile_rules(spec, rules, "r.txt", keep_rules=False)
    assert [(e.position, e.message) for e in lean.value.errors] == \
        [(e.position, e.message) for e in kept.value.errors]
