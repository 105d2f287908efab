from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.language.rules_ast import And, Attr, Not, Or, TrueFilter
from camus.compiler.language.rules_parser import SourceText, _Parser, parse_rules


def general(text: str):
    rules, errors = _Parser(SourceText(text, "t")).rules()
    assert not errors
    return rules


def test_camus_original_syntax() -> None:
    text = ('add_order.stock = "GOOGL" and add_order.price > 50: fwd(1);\n'
            '! add_order.shares = 1 : fwd(2);\n'
            'ipv4.dst = 10.0.0.0/8 : fwd(3);\n'
            'h.f = 5/3: fwd(4);\n')
    rules, _ = parse_rules(text)
    assert len(rules) == 4
    first = rules[0].filter
    assert isinstance(first, And) and first.args[0].op == "==" and first.args[0].right.value == "GOOGL"
    assert isinstance(rules[1].filter, Not)
    assert rules[2].filter.right.prefix_len == 8 and rules[2].filter.right.kind == "ipv4"
    assert rules[3].filter.right.value == 5 and rules[3].filter.right.prefix_len == 3


def test_2017_syntax_bare_port_numbers_are_fwd() -> None:
    """Issue 45: the 2017 Camus rule files name ports by bare numbers (`stock = GOOGL : 1;`)."""
    rules, _ = parse_rules('add_order.stock = GOOGL : 1;\nadd_order.price > 5: 2, 3;\nx == 1 : drop\n')
    assert [(a.name, [c.value for c in a.args]) for a in rules[0].actions] == [("fwd", [1])]
    assert [(a.name, [c.value for c in a.args]) for a in rules[1].actions] == [("fwd", [2]), ("fwd", [3])]
    assert [a.name for a in rules[2].actions] == ["drop"]
    _, errors = _Parser(SourceText("x == 1 : 1.5\n", "t")).rules()
    assert errors and "an action such as fwd(1)" in str(errors[0])


def test_operators_precedence_and_constants() -> None:
    (r,), _ = parse_rules("a == 1 or b == 2 and not c == 3 || (d == 0x1f && e != 0b101) : fwd(1)")
    assert isinstance(r.filter, Or) and len(r.filter.args) == 3
    assert isinstance(r.filter.args[1], And) and isinstance(r.filter.args[1].args[1], Not)
    d = r.filter.args[2].args[0]
    assert d.right.value == 31 and r.filter.args[2].args[1].right.value == 5
    (r,), _ = parse_rules("m == 02:00:5e:10:00:01 and v6 == 2001:db8::1 and c == 'S' and t == yes : x")
    consts = [a.right for a in r.filter.args]
    assert consts[0].kind == "mac" and consts[0].value == 0x02005E100001
    assert consts[1].kind == "ipv6" and consts[2].value == ord("S") and consts[3].kind == "word"
    (r,), _ = parse_rules("true : fwd(1)")
    assert isinstance(r.filter, TrueFilter)
    (r,), _ = parse_rules("false or a == 1 : fwd(1)")         # `false`: never, as `not true`
    assert isinstance(r.filter.args[0], Not) and isinstance(r.filter.args[0].arg, TrueFilter)
    (r,), _ = parse_rules("false == 1 and s == false : fwd(1)")   # still a field and a value
    assert r.filter.args[0].left.name == "false" and r.filter.args[1].right.value == "false"


def test_separators_comments_and_multiline_rules() -> None:
    text = "# header comment\na == 1 : fwd(1); b == 2 : fwd(2)\n\nc == 3 and\n   d == 4 : fwd(3)  # trailing\n"
    rules, src = parse_rules(text)
    assert [r.index for r in rules] == [0, 1, 2]
    assert src.position(rules[2].offset).line == 4
    assert rules[2].filter.args[1].left == Attr("d", text.index("d == 4"))


def test_state_functions_and_custom_actions() -> None:
    (r,), _ = parse_rules("avg(price, win) > 60 and count(price) > 2 : answerDNS(10.0.0.105), fwd(1, h2)")
    assert r.filter.args[0].left.fn == "avg" and r.filter.args[0].left.counter == "win"
    assert [a.name for a in r.actions] == ["answerDNS", "fwd"]
    assert r.actions[0].args[0].kind == "ipv4" and r.actions[1].args[1].value == "h2"


_names = st.sampled_from(["stock", "price", "add_order.price", "x_1"])
_consts = st.one_of(st.integers(0, 10**6).map(str), st.integers(0, 255).map(hex),
                    st.sampled_from(['"GOOGL"', "GOOGL", '"A B"', "007"]),
                   # addresses take the fast path only as the general tokenizer reads them; the
                   # odd ones (a bad byte, a trailing colon, a MAC-like IPv6) must agree too
                   st.sampled_from(["10.0.0.1", "b001:5:9d4e:3c0c:dd16::", "::1", "fe80::1:2",
                                    "aa:bb:cc:dd:ee:ff", "aa:bb:cc:dd:ee:ff:1", "::ffff:1.2.3.4", "1:2::"]))
_rel = st.tuples(_names, st.sampled_from(["==", "=", "!=", "<", "<=", ">", ">="]), _consts)
_act = st.one_of(st.just("drop"), st.lists(st.integers(0, 300), min_size=1, max_size=3).map(
    lambda ps: "fwd(" + ", ".join(map(str, ps)) + ")"), st.just("mark(h1, 3)"))


@settings(max_examples=300)
@given(st.lists(st.tuples(st.lists(_rel, min_size=1, max_size=5), st.lists(_act, min_size=1, max_size=2),
                          st.sampled_from(["", ";", "  # c", " ;"]), st.sampled_from(["", "  "])),
                min_size=1, max_size=6))
def test_fast_path_builds_the_same_trees_as_the_general_parser(lines) -> None:
    from camus.compiler.language.errors import CompileError, CompileErrors
    text = "\n".join(pad + " and ".join(f"{n} {o} {c}" for n, o, c in rels) + " : " + ", ".join(acts) + end
                     for rels, acts, end, pad in lines) + "\n"
    try:
        fast, _ = parse_rules(text)
    except CompileErrors as exc:           # e.g. an address the parser reads as another token
        src, errors, at = SourceText(text, "<rules>"), [], 0
        for line in text.splitlines(keepends=True):      # each line alone through the general parser
            try:
                errors += _Parser(src, at, at + len(line)).rules()[1]
            except CompileError as bad:     # a character no token starts with
                errors.append(bad)
            at += len(line)
        assert [str(e) for e in errors] == [str(e) for e in exc.errors]
        return
    assert fast == general(text)
