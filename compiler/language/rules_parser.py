"""Parser for subscription rules.

    rules   := rule ((';' | newline) rule)* [';']        '#' starts a comment
    rule    := filter ':' action (',' action)*
    filter  := conj (('or' | '||') conj)*
    conj    := unary (('and' | '&&') unary)*
    unary   := ('not' | '!') unary | '(' filter ')' | 'true' | 'false' | relation
    relation:= operand op constant        op := == = != < <= > >= prefix
    operand := field | (count|sum|avg) '(' field [',' counter] ')'
    every   := 'every' '(' n [',' counter] ')'                  a relation of its own (1 out of n)
    constant:= number | number/len | "string" | 'c' | bare-word | ipv4[/len] | ipv6[/len] | mac
    action  := name ['(' constant (',' constant)* ')']

The original Camus syntax (`h.f = "X"`, `! h.f = 1`, `h.f = a/n`, trailing `;`) is a subset.
Positions are kept as character offsets and turned into line:column only for messages, so a
million-rule file parses in seconds.
"""
from __future__ import annotations

from typing import Iterator

import bisect
import re

from .errors import CompileError, CompileErrors, Position
from .rules_ast import Action, And, Attr, Const, Filter, Not, Or, Rel, Rule, StateFn, TrueFilter
from .rules_fast import BLANK, SIMPLE_RULE, LazyMatches, fast_rule
from .rules_lexicon import (ADDRESS_KINDS, ADDRESS_NAMES, KEYWORDS, PLAIN_TOKEN, RELOPS, STATE_FNS, TOKEN,
                            address_value, parse_int)

class SourceText:
    """Maps character offsets to line:column for messages."""

    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name
        self._line_starts: list[int] | None = None

    @property
    def line_starts(self) -> list[int]:
        """Where each line starts; found when a position is first asked for (a clean million-line
        file never needs them)."""
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        return self._line_starts

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self.line_starts, offset)
        return Position(self.name, line, offset - self.line_starts[line - 1] + 1)

    def line_text(self, offset: int) -> str:
        line = bisect.bisect_right(self.line_starts, offset)
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def error(self, message: str, offset: int, expected: str | None = None) -> CompileError:
        return CompileError(message, self.position(offset), expected, self.line_text(offset))


MAX_NESTING = 100      # deeper filters are refused with their position (every stage after recurses)


class _Parser:
    def __init__(self, src: SourceText, start: int = 0, end: int | None = None) -> None:
        self.src = src
        end = len(src.text) if end is None else end
        text = src.text
        plain = text.find(".", start, end) < 0 and text.count(":", start, end) <= 1
        toks: list[tuple[str, str, int]] = [(m.lastgroup, m.group(), m.start())  # type: ignore[misc]
                                            for m in (PLAIN_TOKEN if plain else TOKEN).finditer(text, start, end)
                                            if m.lastgroup != "ws"]
        for kind, text, at in toks:
            if kind == "bad":
                raise src.error(f"unexpected character {text!r}", at)
        toks.append(("eof", "", end))
        self.toks = toks
        self.depth = 0                   # `not`s and parentheses open around the current token
        self.i = 0

    # -- token helpers -------------------------------------------------------------------
    def skip_nl(self) -> None:
        while self.toks[self.i][0] == "nl":
            self.i += 1

    def peek(self) -> tuple[str, str, int]:
        self.skip_nl()
        return self.toks[self.i]

    def take(self) -> tuple[str, str, int]:
        self.skip_nl()
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, tok: tuple[str, str, int], expected: str) -> CompileError:
        if tok[0] == "eof":
            # Point just after the last real token: that is where something is missing.
            before = [t for t in self.toks[:-1] if t[0] != "nl"]
            where = before[-1][2] + len(before[-1][1]) if before else tok[2]
            return self.src.error("unexpected end of input", where, expected)
        return self.src.error(f"unexpected {tok[1]!r}", tok[2], expected)

    def expect(self, text: str, expected: str | None = None) -> tuple[str, str, int]:
        tok = self.take()
        if tok[1] != text or tok[0] in ("str",):
            raise self.fail(tok, expected or f"'{text}'")
        return tok

    # -- rules ---------------------------------------------------------------------------
    def rules(self, first_index: int = 0) -> tuple[list[Rule], list[CompileError]]:
        rules: list[Rule] = []
        errors: list[CompileError] = []
        while True:
            tok = self.peek()
            if tok[0] == "eof":
                break
            if tok[1] == ";":
                self.i += 1
                continue
            start = self.i
            try:
                rules.append(self.rule(first_index + len(rules)))
            except CompileError as exc:
                errors.append(exc)
                self.recover(start)
        return rules, errors

    def recover(self, start: int) -> None:
        # Skip to the end of the broken rule (next ';' or a newline after it) and go on, so
        # one run reports every bad rule in the file.
        i = min(max(self.i, start + 1), len(self.toks) - 1)
        while self.toks[i][0] != "eof" and self.toks[i][0] != "nl" and self.toks[i][1] != ";":
            i += 1
        self.i = i

    def rule(self, index: int) -> Rule:
        start = self.peek()[2]
        filt = self.filter()
        self.expect(":", "':' between the filter and its actions")
        actions = [self.action()]
        while self.toks[self.i][1] == ",":
            self.i += 1
            actions.append(self.action())
        end = self.toks[self.i]  # no newline skipping: a newline ends the rule
        if end[0] not in ("nl", "eof") and end[1] != ";":
            raise self.fail(end, "',' and another action, ';' or the end of the line")
        return Rule(filt, tuple(actions), start, index)

    def filter(self) -> Filter:
        args = [self.conj()]
        while True:
            tok = self.peek()
            if (tok[0] == "id" and tok[1].lower() == "or") or tok[1] == "||":
                self.i += 1
                args.append(self.conj())
            else:
                break
        return args[0] if len(args) == 1 else Or(tuple(args))

    def conj(self) -> Filter:
        args = [self.unary()]
        while True:
            tok = self.peek()
            if (tok[0] == "id" and tok[1].lower() == "and") or tok[1] == "&&":
                self.i += 1
                args.append(self.unary())
            else:
                break
        return args[0] if len(args) == 1 else And(tuple(args))

    def unary(self) -> Filter:
        tok = self.take()
        kind, text, off = tok
        opens = (kind == "id" and text.lower() == "not") or (kind == "op" and text in ("!", "("))
        if opens:
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.src.error(f"filter nested deeper than {MAX_NESTING} levels of 'not' and parentheses",
                                     off, "a flatter filter (or several rules)")
        try:
            if (kind == "id" and text.lower() == "not") or (kind == "op" and text == "!"):
                return Not(self.unary(), off)
            if kind == "op" and text == "(":
                inner = self.filter()
                self.expect(")", "')' to close the '(' at column "
                            f"{self.src.position(off).column}")
                return inner
        finally:
            if opens:
                self.depth -= 1
        if kind == "id" and text.lower() == "true":
            return TrueFilter(off)
        if kind == "id" and text.lower() == "false" and self.peek()[1] not in RELOPS:
            # not a keyword: a field or a bare-word value may still be called `false`
            return Not(TrueFilter(off), off)
        if kind == "id" and text.lower() not in KEYWORDS:
            return self.relation(tok)
        raise self.fail(tok, "a field, 'not', '(', 'true' or 'false'")

    def every(self, tok: tuple[str, str, int]) -> Rel:
        """`every(10)`: SANDS's 1-out-of-N frequency filter, true for the n-th, 2n-th ... message
        matching the rest of the filter. A state function compared with 0 (lowering keeps the
        count modulo n), so it shares the windows, the covers and the last-hop placement."""
        self.i += 1
        ntok = self.take()
        n = parse_int(ntok[1]) if ntok[0] == "num" and "." not in ntok[1] else 0
        if not 1 <= n <= 0xFFFFFFFF:
            raise self.fail(ntok, "a whole number n >= 1 in every(n): one message out of n")
        fn = StateFn("every", Attr("", tok[2]), self.counter_arg("every"), tok[2], n)
        return Rel(fn, "==", Const("int", 0, None, "0", tok[2]), tok[2])

    def counter_arg(self, fn: str) -> str | None:
        """A state function's optional `, COUNTER` and its closing parenthesis."""
        counter = None
        if self.peek()[1] == ",":
            self.i += 1
            ctok = self.take()
            if ctok[0] != "id":
                raise self.fail(ctok, "a counter name declared by query_counter")
            counter = ctok[1]
        self.expect(")", f"')' to close {fn}(")
        return counter

    def relation(self, tok: tuple[str, str, int]) -> Rel:
        left: Attr | StateFn
        if tok[1] == "every" and self.peek()[1] == "(":
            return self.every(tok)
        if tok[1] in STATE_FNS and self.peek()[1] == "(":
            self.i += 1
            field = self.take()
            if field[0] != "id":
                raise self.fail(field, f"a field name inside {tok[1]}(...)")
            left = StateFn(tok[1], Attr(field[1], field[2]), self.counter_arg(tok[1]), tok[2])
        else:
            left = Attr(tok[1], tok[2])
        optok = self.take()
        op = RELOPS.get(optok[1]) if optok[0] in ("op", "id") else None
        if op is None:
            raise self.fail(optok, "a relation: == != < <= > >= or prefix")
        return Rel(left, op, self.constant(), optok[2])

    def constant(self) -> Const:
        kind, text, off = self.take()
        if kind == "num":
            if "." in text:
                raise self.src.error(f"fractional constant {text} is not supported; "
                                     "write the field's integer units", off)
            value: int | str = parse_int(text)
        elif kind == "str":
            body = text[1:-1]
            if text[0] == "'" and len(body) == 1:
                kind, value = "int", ord(body)          # C-style character constant
            else:
                kind, value = "str", body
        elif kind == "id" and text.lower() not in KEYWORDS:
            kind, value = "word", text
        elif kind in ADDRESS_KINDS:
            try:
                value = address_value(kind, text)
            except ValueError:
                raise self.src.error(f"bad {ADDRESS_NAMES[kind]} address {text}", off) from None
        else:
            raise self.fail((kind, text, off), "a constant: number, \"string\", address or word")
        prefix_len = None
        if kind in ("int", "num", "ipv4", "ipv6") and self.toks[self.i][1] == "/":
            self.i += 1
            ltok = self.take()
            if ltok[0] != "num" or "." in ltok[1]:
                raise self.fail(ltok, "a prefix length after '/'")
            prefix_len = int(ltok[1])
        return Const("int" if kind == "num" else kind, value, prefix_len, text, off)

    def action(self) -> Action:
        kind, text, off = self.take()
        if kind == "num" and text.isdigit():      # the 2017 Camus syntax: a bare port number is fwd(N)
            return Action("fwd", (Const("int", int(text), None, text, off),), off)
        if kind != "id" or text.lower() in KEYWORDS:
            raise self.fail((kind, text, off), "an action such as fwd(1) or drop")
        args: list[Const] = []
        if self.toks[self.i][1] == "(":
            self.i += 1
            if self.peek()[1] != ")":
                args.append(self.constant())
                while self.peek()[1] == ",":
                    self.i += 1
                    args.append(self.constant())
            self.expect(")", f"',' or ')' in the arguments of {text}")
        return Action(text, tuple(args), off)


def parse_rules(text: str, source: str = "<rules>") -> tuple[list[Rule], SourceText]:
    """Parse a whole rule file. Any syntax error rejects the file: CompileErrors lists them all."""
    src = rule_source(text, source)
    return list(each_rule(src)), src


def rule_source(text: str, source: str = "<rules>") -> SourceText:
    """A rule file's text as the parser reads it (positions for messages)."""
    if text.startswith("\ufeff"):      # a byte-order mark (editors on Windows): blank, columns kept
        text = " " + text[1:]
    return SourceText(text, source)


def each_rule(src: SourceText) -> Iterator[Rule]:
    """The rules of `src`, each as soon as it is parsed (a caller that lowers them one by one
    never holds every syntax tree at once). Syntax errors do not stop the reading: after the last
    rule, CompileErrors lists them all (the file is rejected whole)."""
    text = src.text
    count = 0                    # rules parsed so far (a rule's index)
    errors: list[CompileError] = []
    matches = LazyMatches(SIMPLE_RULE.finditer(text))
    def blank(text: str, start: int, end: int | None = None) -> int:
        """Where the blank lines and comments from `start` end (the pattern always matches)."""
        m = BLANK.match(text, start, len(text) if end is None else end)
        assert m is not None
        return m.end()

    pos = 0                      # everything before pos is parsed
    i = 0                        # the next fast-pattern match not yet used
    while True:
        m = matches.get(i)
        if m is None and pos >= len(text):
            break
        gap_end = m.start() if m is not None else len(text)
        rule = None
        if blank(text, pos, gap_end) == gap_end and m is not None:
            rule = fast_rule(m, count)
            if rule is not None:
                yield rule
                count += 1
                pos = m.end()
                i += 1
                matches.release(i)
                continue
        if m is None and blank(text, pos) == len(text):
            break
        # General parser from pos; a rule left unfinished swallows the following lines.
        end = m.end() if (m is not None and rule is None and blank(text, pos, gap_end) == gap_end) else gap_end
        j = i + 1 if end != gap_end else i
        while True:
            try:
                got, errs = _Parser(src, pos, end).rules(count)
            except CompileError as exc:          # a character no token starts with
                got, errs = [], [exc]
            following = matches.get(j)
            if not any(e.message == "unexpected end of input" for e in errs) or following is None:
                if any(e.message == "unexpected end of input" for e in errs) and end < len(text):
                    end = len(text)
                    continue
                break
            end = following.end()
            j += 1
        yield from got
        count += len(got)
        errors.extend(errs)
        pos, i = end, j
        while (mi := matches.get(i)) is not None and mi.start() < pos:
            i += 1
        matches.release(i)
    if errors:
        raise CompileErrors(errors)


def strip_comment(line: str) -> str:
    """A rule line without its comment: '#' outside a quoted string (topic filters hold '#')."""
    if "#" not in line:
        return line.strip()
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return line[:i].strip()
    return line.strip()
