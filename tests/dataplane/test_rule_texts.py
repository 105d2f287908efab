"""What an attachment's rules are, by their text (dataplane/counting.py): each rule whole, on one
line, whatever its layout in the file. The key that decides "unchanged, nothing written" is made
of these texts, so a change anywhere in a rule, or in which rules are counted, changes it."""
from __future__ import annotations

import pytest

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane.counting import compiled_key, rule_texts
from tests.conftest import APPS

SPEC = load_spec(APPS / "itch" / "itch.p4")


def _texts(text: str, count_rules: int = 0) -> list[str]:
    return rule_texts(compile_rules(SPEC, text, options=CompileOptions(count_rules=count_rules)))


def _key(text: str, count_rules: int = 0) -> str:
    c = compile_rules(SPEC, text, options=CompileOptions(count_rules=count_rules))
    return compiled_key(c)


def test_a_rule_over_several_lines_is_all_of_its_lines() -> None:
    text = "stock == GOOGL and   # the symbol\n    price > 50 : fwd(1)\n# a note\nstock == MSFT : fwd(2)\n"
    assert _texts(text) == ["stock == GOOGL and price > 50 : fwd(1)", "stock == MSFT : fwd(2)"]


def test_rules_sharing_a_line_and_comments_and_separators() -> None:
    text = ('stock == IBM : fwd(1); stock == AAPL : fwd(2)   # two on a line\n'
            'stock == "A#B" : fwd(3);\n\n   stock == TSLA : fwd(4) ;  \n')
    assert _texts(text) == ["stock == IBM : fwd(1)", "stock == AAPL : fwd(2)", 'stock == "A#B" : fwd(3)',
                            "stock == TSLA : fwd(4)"]


def test_the_key_follows_a_change_in_a_later_line_of_a_rule() -> None:
    """It named a rule by its first line: this update reported "unchanged" and wrote nothing."""
    before = "stock == GOOGL and\n  price > 50 : fwd(1)\n"
    after = "stock == GOOGL and\n  price > 60 : fwd(1)\n"
    assert _key(before) != _key(after)
    assert _key(before) == _key("stock == GOOGL and price > 50 : fwd(1)   # the same rule, one line\n")


def test_the_key_follows_which_rules_are_counted() -> None:
    """The first `count_rules` rules in file order have counters: reordered, the set is the same
    but the counted rules are others, so the tables differ."""
    ab = "stock == A : fwd(1)\nstock == B : fwd(2)\nstock == C : fwd(3)\n"
    cb = "stock == C : fwd(3)\nstock == B : fwd(2)\nstock == A : fwd(1)\n"
    assert _key(ab, 2) != _key(cb, 2)
    assert _key(ab, 0) == _key(cb, 0)                # no counters: the order is nothing to the tables
    counted = rule_texts(compile_rules(SPEC, cb, options=CompileOptions(count_rules=2)), 2)
    assert counted == ["stock == C : fwd(3)", "stock == B : fwd(2)"]


@pytest.mark.parametrize("count_rules", [0, 1, 64])
@pytest.mark.parametrize("text", [
    "stock == GOOGL : fwd(1)\nstock == MSFT and price > 50 : fwd(2)\n",
    "# comments\n\nstock == GOOGL and\n   price > 5 : fwd(1)   # two lines\nstock == IBM : fwd(2); stock == A : drop\n",
    "stock == GOOGL : fwd(1)\nstock == GOOGL : fwd(1)\nprice > 10 or shares < 3 : fwd(3)",
])
def test_a_parse_alone_gives_the_key_compiling_gives(text: str, count_rules: int) -> None:
    """`camus-xdp update` with rules the tables hold finds so from the parse (no compile): the
    parse's key must be the compiled rules' key, or it would compile every time (or worse, not)."""
    from camus.compiler.language.rules_parser import parse_rules
    from camus.dataplane.counting import parsed_key
    opts = CompileOptions(count_rules=count_rules)
    c = compile_rules(SPEC, text, options=opts)
    assert parsed_key(text, parse_rules(text)[0], opts) == compiled_key(c)
