"""The rule parser's fast path: one regular expression over the whole file for the lines that
are a simple conjunction (`a == X and b > 5 : fwd(1)`), each made into exactly the tree the
general parser (rules_parser.py) would build; the matches read lazily (LazyMatches)."""
from __future__ import annotations

import re
from collections import deque
from typing import Any, Iterator

from .rules_ast import Action, And, Attr, Const, Filter, Rel, Rule
from .rules_lexicon import ADDRESS_KINDS, KEYWORDS, RELOPS, TOKEN, address_value, parse_int

# Most rule files are one such rule per line: one MULTILINE pass finds them all; everything
# between them (and a line that turns out to continue an unfinished rule) is the general parser's.
_NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
# an address (IPv4, IPv6, MAC) is taken loosely here and kept only when the general tokenizer
# reads exactly that text as one address token at that offset (_fast_address)
_ADDRESS = r"[0-9A-Fa-f]*[:.][0-9A-Fa-f:.]*"
_CONST = rf"{_ADDRESS}|0[xX][0-9a-fA-F]+|\d+|\"[^\"\n]*\"|[A-Za-z_]\w*"
_REL = rf"({_NAME})[ \t]*(==|!=|<=|>=|=|<|>)[ \t]*({_CONST})"
_ARGS = r"(?:\d+|[A-Za-z_]\w*)(?:[ \t]*,[ \t]*(?:\d+|[A-Za-z_]\w*))*"
_ACT = rf"([A-Za-z_]\w*)(?:\([ \t]*({_ARGS})?[ \t]*\))?"
_AND = r"[ \t]+and[ \t]+"
FAST_RELS = 8      # conjunctions of up to this many relations take the one-regex path
SIMPLE_RULE = re.compile(
    rf"^[ \t]*{_REL}" + rf"(?:{_AND}{_REL})?" * (FAST_RELS - 1) + rf"[ \t]*:[ \t]*{_ACT}"
    rf"(?:[ \t]*,[ \t]*{_ACT})?[ \t]*;?[ \t]*(?:\#[^\n]*)?$", re.MULTILINE)
_ARG_RE = re.compile(r"\d+|[A-Za-z_]\w*")
BLANK = re.compile(r"(?:[ \t\r\n]|\#[^\n]*)*")


def _fast_address(line: str, text: str, off: int) -> Const | None:
    """The Const the general parser makes of the address at `off`, or None when its tokenizer
    would read something else there (another split, a bad address: its error is the general
    parser's to give)."""
    t = TOKEN.match(line, off)
    if t is None or t.lastgroup not in ADDRESS_KINDS or t.end() != off + len(text):
        return None
    try:
        return Const(t.lastgroup, address_value(t.lastgroup, text), None, text, off)
    except ValueError:
        return None


def _fast_const(text: str, off: int, line: str = "") -> Const | None:
    c = text[0]
    if ":" in text or "." in text:
        return _fast_address(line, text, off)
    if c == '"':
        return Const("str", text[1:-1], None, text, off)
    if c.isdigit():
        return Const("int", parse_int(text), None, text, off)
    if text.lower() in KEYWORDS:
        return None
    return Const("word", text, None, text, off)


def fast_rule(m: re.Match[str], index: int) -> Rule | None:
    """The tree of one line matched by SIMPLE_RULE, or None to leave it to the general parser."""
    g = m.groups()
    rels = []
    for k in range(0, 3 * FAST_RELS, 3):
        name = g[k]
        if name is None:
            break
        if name.lower() in KEYWORDS:
            return None
        const = _fast_const(g[k + 2], m.start(k + 3), m.string)
        if const is None:
            return None
        rels.append(Rel(Attr(name, m.start(k + 1)), RELOPS[g[k + 1]], const, m.start(k + 2)))
    actions = []
    for k in (3 * FAST_RELS, 3 * FAST_RELS + 2):
        name = g[k]
        if name is None:
            break
        if name.lower() in KEYWORDS:
            return None
        args: tuple[Any, ...] = ()
        if g[k + 1]:
            a0 = m.start(k + 2)
            args = tuple(_fast_const(a.group(), a0 + a.start()) for a in _ARG_RE.finditer(g[k + 1]))
            if None in args:
                return None
        actions.append(Action(name, args, m.start(k + 1)))
    filt: Filter = rels[0] if len(rels) == 1 else And(tuple(rels))
    return Rule(filt, tuple(actions), m.start(1), index)


class LazyMatches:
    """The fast pattern's matches, read as the parser reaches them and let go once it is past
    them: a million rules' match objects held at once took half a gigabyte (and fragmented the
    heap the syntax trees live in)."""

    def __init__(self, found: Iterator[re.Match[str]]) -> None:
        self.found = found
        self.kept: deque[re.Match[str]] = deque()
        self.first = 0               # index of kept[0]

    def get(self, i: int) -> re.Match[str] | None:
        """The i-th match (i >= every index released), None past the last."""
        while i - self.first >= len(self.kept):
            m = next(self.found, None)
            if m is None:
                return None
            self.kept.append(m)
        return self.kept[i - self.first]

    def release(self, i: int) -> None:
        """Matches before the i-th are not needed again."""
        while self.first < i and self.kept:
            self.kept.popleft()
            self.first += 1
