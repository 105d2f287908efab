"""Reads a message-format spec: a P4_16 header file with Camus query pragmas.

Understood: `header T { bit<N> f; ... }`, `typedef bit<N> name;`, `struct S { T inst; ... }`
(the members of the struct whose members are headers give the parse order); the original Camus
(P4_14) form `header_type T { fields { f : N; ... } }` with `header T inst;` instance
declarations (their order gives the parse order); and pragmas, either
as `@pragma name(args)` lines (Camus style) or as `@name(args)` annotations at top level or on a
header field. Other P4 (parsers, controls, constants, includes) is skipped.

Pragmas:
  query_field(h.f[, width])      match kind chosen from the rules (exact if only equality)
  query_field_exact(h.f)         exact match      query_field_range(h.f)   range match
  query_field_lpm(h.f)           longest-prefix match
  query_field_domain(h.f, bits)  switches match this range field through a shared value -> code
                                 table (TCAM), then (state, code) exactly (SRAM): Camus's
                                 lower-resolution domain, for fields with few distinct boundaries
  query_counter(name, window_us, size)   tumbling window for count/sum/avg/every (0: never resets)
  udp_port(p[, p...])            UDP destination port(s) of the feed (default: any)
  message_framing(moldudp64|none)        batching (default: moldudp64 if a mold header exists)
  message_type(h.f, value)       only messages whose field has this value are subscribed to
  string_pad(byte)               padding of string constants (default 0x20, a space)
  query_type(h.f, topic|subject) h.f holds an MQTT topic / NATS subject (compiler/language/topics.py)
  query_type(h.f, dnsname)       h.f is where a DNS name starts (wire format; the field's width is
                                 the longest name; the last field of the message header)
  topic_levels(h.f, K)           levels of a topic filters may name (default 8)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from . import topics, wide_fields
from ..codec.attrs import ATTRS_FRAMINGS, check_dictionary
from .query_fields import VTYPES, add_query_field
from .actions import default_action_atoms
from .errors import CompileError, CompileErrors, Position, read_source
from .spec_tokens import Tok, tokenize
from .spec import (KNOWN_ROLES, MOLDUDP64, NO_FRAMING, Counter, Framing, HeaderField,
                   HeaderInstance, HeaderType, MatchKind, Role, Spec)

_KIND_PRAGMAS = {"query_field": MatchKind.AUTO, "query_field_exact": MatchKind.EXACT,
                 "query_field_range": MatchKind.RANGE, "query_field_lpm": MatchKind.LPM}


def _int(text: str) -> int:
    return int(text.split("w")[-1].replace("_", ""), 0) if "w" in text else int(text.replace("_", ""), 0)


@dataclass
class _Pragma:
    name: str
    args: list[str]
    pos: Position
    on_field: tuple[str, str] | None = None   # (header type, field) for field annotations


def _parse_pragma_text(text: str, pos: Position) -> _Pragma:
    # a trailing `// comment` (outside quotes) is not part of the pragma, even with parentheses
    text = re.sub(r'^((?:[^"/]|"[^"]*"|/(?!/))*)//.*$', r"\1", text)
    m = re.match(r"@pragma\s+(\w+)\s*(?:\((.*)\)|(.*))\s*;?\s*$", text.strip())
    if not m:
        raise CompileError("malformed pragma", pos, "@pragma name(args)")
    raw = m.group(2) if m.group(2) is not None else (m.group(3) or "")
    args = [a.strip() for a in re.split(r"[,\s]+", raw.strip()) if a.strip()]
    return _Pragma(m.group(1), args, pos)


class _SpecReader:
    def __init__(self, toks: list[Tok], source: str) -> None:
        self.toks, self.i, self.source = toks, 0, source
        self.typedefs: dict[str, int] = {}
        self.headers: dict[str, HeaderType] = {}
        self.structs: list[tuple[str, list[tuple[str, str, Position]]]] = []
        self.pragmas: list[_Pragma] = []
        self.p14_instances: list[tuple[str, str, Position]] = []   # `header T inst;` (P4_14)

    def peek(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self, expected: str = "more input") -> Tok:
        tok = self.peek()
        if tok is None:
            last = self.toks[-1].pos if self.toks else Position(self.source, 1, 1)
            raise CompileError("unexpected end of spec", last, expected)
        self.i += 1
        return tok

    def expect(self, text: str) -> Tok:
        tok = self.next(f"'{text}'")
        if tok.text != text:
            raise CompileError(f"unexpected {tok.text!r}", tok.pos, f"'{text}'")
        return tok

    def annotation(self, tok: Tok) -> _Pragma:
        args: list[str] = []
        nxt = self.peek()
        if nxt is not None and nxt.text == "(":
            self.next()
            depth, cur = 1, list[str]()
            while True:
                t = self.next("')'")
                if t.text == "(":
                    depth += 1
                elif t.text == ")":
                    depth -= 1
                    if depth == 0:
                        break
                if t.text == "," and depth == 1:
                    args.append(" ".join(cur))
                    cur = []
                else:
                    cur.append(t.text)
            if cur:
                args.append(" ".join(cur))
        return _Pragma(tok.text[1:], [a.strip() for a in args], tok.pos)

    def width(self) -> int:
        return self.field_type()[0]

    def field_type(self) -> tuple[int, str]:
        tok = self.next("a type such as bit<8>")
        if tok.text == "bit":
            self.expect("<")
            w = self.next("a width")
            self.expect(">")
            return _int(w.text), ""
        if tok.text in self.typedefs:
            return self.typedefs[tok.text], tok.text
        raise CompileError(f"unknown field type {tok.text!r}", tok.pos, "bit<N> or a typedef")

    def skip_item(self) -> None:
        depth = 0
        while True:
            t = self.next("';' or '}'")
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1
                if depth <= 0:
                    nxt = self.peek()
                    if nxt is not None and nxt.text == ";":
                        self.next()
                    return
            elif t.text == ";" and depth == 0:
                return

    def parse(self) -> None:
        while (tok := self.peek()) is not None:
            if tok.kind == "pragma":
                self.next()
                self.pragmas.append(_parse_pragma_text(tok.text, tok.pos))
            elif tok.kind == "at":
                self.next()
                self.pragmas.append(self.annotation(tok))
            elif tok.text == "header":
                self.next()
                nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
                if nxt is not None and nxt.kind == "id":      # P4_14 instance: header T inst;
                    type_tok = self.next()
                    inst = self.next("an instance name")
                    self.expect(";")
                    self.p14_instances.append((type_tok.text, inst.text, type_tok.pos))
                else:
                    self.header()
            elif tok.text == "header_type":
                self.next()
                self.header_type()
            elif tok.text == "typedef":
                self.next()
                w = self.width()
                name = self.next("a type name")
                self.expect(";")
                self.typedefs[name.text] = w
            elif tok.text == "struct":
                self.next()
                self.struct()
            else:
                self.next()
                self.skip_item()

    def header(self) -> None:
        name = self.next("a header type name")
        self.expect("{")
        fields: list[HeaderField] = []
        offset = 0
        pending: list[_Pragma] = []
        while True:
            tok = self.peek()
            if tok is None:
                raise CompileError("unterminated header", name.pos, "'}'")
            if tok.text == "}":
                self.next()
                break
            if tok.kind == "at":
                self.next()
                pending.append(self.annotation(tok))
                continue
            w, tname = self.field_type()
            fname = self.next("a field name")
            self.expect(";")
            fields.append(HeaderField(fname.text, w, offset, tname))
            offset += w
            for p in pending:
                p.on_field = (name.text, fname.text)
                self.pragmas.append(p)
            pending = []
        nxt = self.peek()
        if nxt is not None and nxt.text == ";":
            self.next()
        if name.text in self.headers:
            raise CompileError(f"header type {name.text!r} declared twice", name.pos)
        self.headers[name.text] = HeaderType(name.text, tuple(fields))

    def header_type(self) -> None:
        """P4_14: header_type T { fields { f : N; ... } [length : ...; max_length : ...;] }"""
        name = self.next("a header type name")
        self.expect("{")
        fields: list[HeaderField] = []
        offset = 0
        while True:
            tok = self.next("'fields' or '}'")
            if tok.text == "}":
                break
            if tok.text != "fields":           # length / max_length attributes: not needed
                self.expect(":")
                while self.next("';'").text != ";":
                    pass
                continue
            self.expect("{")
            while (t := self.next("a field or '}'")).text != "}":
                if t.kind == "at":
                    self.annotation(t)
                    continue
                self.expect(":")
                w = self.next("a width")
                if w.kind != "num":
                    raise CompileError(f"field {t.text!r} needs a fixed width", w.pos, "a number of bits")
                while self.next("';'").text != ";":      # (signed, saturating) attributes
                    pass
                fields.append(HeaderField(t.text, _int(w.text), offset))
                offset += _int(w.text)
        if name.text in self.headers:
            raise CompileError(f"header type {name.text!r} declared twice", name.pos)
        self.headers[name.text] = HeaderType(name.text, tuple(fields))

    def struct(self) -> None:
        name = self.next("a struct name")
        self.expect("{")
        members: list[tuple[str, str, Position]] = []
        while True:
            tok = self.next("'}'")
            if tok.text == "}":
                break
            if tok.kind == "at":
                self.annotation(tok)
                continue
            if tok.text == "bit":      # plain metadata member: bit<N> name;
                self.expect("<")
                self.next()
                self.expect(">")
                self.next("a member name")
                self.expect(";")
                continue
            inst = self.next("a member name")
            self.expect(";")
            members.append((tok.text, inst.text, tok.pos))
        nxt = self.peek()
        if nxt is not None and nxt.text == ";":
            self.next()
        self.structs.append((name.text, members))


_P4_ACTION = re.compile(r"\baction\s+([A-Za-z_]\w*)\s*\(")


def parse_spec(text: str, source: str = "<spec>", name: str | None = None) -> Spec:
    """Parse a spec; raises CompileErrors listing every problem found."""
    if text.startswith("\ufeff"):      # a byte-order mark: blank, columns kept
        text = " " + text[1:]
    try:
        path = Path(source)
        here = path.resolve() if path.is_file() else None      # includes resolve next to the spec's file
        generated: list[str] = []
        reader = _SpecReader(tokenize(text, source, here.parent if here else None, (here,) if here else (),
                                       generated), source)
        reader.parse()
    except CompileError as exc:        # a syntax error stops reading: report it alone
        raise CompileErrors([exc]) from None
    errors: list[CompileError] = []
    instances, stack = _instances(reader, errors, source)
    spec = Spec(name or Path(source).stem, instances, stack, [])
    spec.camus_control_file = Path(generated[0]).name if generated else ""
    # custom actions a rule may name: a whole P4 program's own `action NAME(...)`s; a Camus-style
    # spec (pragmas only, no headers) names the actions of the user's own program, unseen here
    spec.actions = frozenset(_P4_ACTION.findall(text))
    spec.actions_open = not reader.headers
    _apply_pragmas(spec, reader, errors)
    if not spec.query_fields and not errors:
        errors.append(CompileError("the spec declares no query fields",
                                   Position(source, 1, 1), "@pragma query_field(header.field)"))
    if errors:
        raise CompileErrors(errors)
    return spec


def load_spec(path: str | Path) -> Spec:
    p = Path(path)
    return parse_spec(read_source(p, "spec"), str(p), p.stem)


def _instances(reader: _SpecReader, errors: list[CompileError],
               source: str) -> tuple[dict[str, HeaderInstance], list[str]]:
    # The packet layout is the struct whose members are (mostly) headers; with none, every
    # header type is one instance named after the type without its `_t` suffix.
    best: list[tuple[str, str, Position]] = []
    for _, members in reader.structs + [("", reader.p14_instances)]:
        hdrs = [m for m in members if m[0] in reader.headers]
        if len(hdrs) > len(best):
            best = hdrs
    if not best:
        best = [(t, t[:-2] if t.endswith("_t") else t, Position(source, 1, 1)) for t in reader.headers]
    instances: dict[str, HeaderInstance] = {}
    stack: list[str] = []
    seen_framing = False
    for type_name, inst, pos in best:
        role = KNOWN_ROLES.get(inst.lower(), Role.MESSAGE)
        if role is Role.FRAMING:
            seen_framing = True
        if inst in instances:
            errors.append(CompileError(f"header instance {inst!r} declared twice", pos))
            continue
        instances[inst] = HeaderInstance(inst, reader.headers[type_name], role)
        stack.append(inst)
    messages = [n for n in stack if instances[n].role is Role.MESSAGE]
    if seen_framing and len(messages) > 1:
        errors.append(CompileError(f"batched specs carry one message header, found {messages}",
                                   Position(source, 1, 1)))
    return instances, stack


MAX_DOMAIN_BITS = 16


def _set_domain(spec: Spec, args: list[str], pos: Position) -> None:
    usage = "@pragma query_field_domain(header.field, bits)"
    if len(args) != 2:
        raise CompileError("query_field_domain takes a query field and a code width", pos, usage)
    q = spec.query_field(args[0])
    if q is None:
        raise CompileError(f"{args[0]} is not a query field (declare it first)", pos, usage)
    bits = _int(args[1])
    if q.kind not in (MatchKind.AUTO, MatchKind.RANGE) or q.vtype != "int":
        raise CompileError(f"{q.path}: a lower-resolution domain is for integer range fields "
                           f"(query_field or query_field_range)", pos)
    if not 1 <= bits <= min(MAX_DOMAIN_BITS, q.width - 1):
        raise CompileError(f"{q.path}: a domain of 1..{min(MAX_DOMAIN_BITS, q.width - 1)} bits "
                           f"(the field is {q.width} bits), not {bits}", pos)
    spec.query_fields[spec.query_fields.index(q)] = replace(q, domain_bits=bits)


def _apply_pragmas(spec: Spec, reader: _SpecReader, errors: list[CompileError]) -> None:
    framing: Framing | None = None
    topic_levels: dict[str, int] = {}
    declared_at: dict[str, Position] = {}
    framing_at = Position(reader.source, 1, 1)
    if any(spec.instances[n].role is Role.FRAMING for n in spec.stack):
        framing = MOLDUDP64
    for p in reader.pragmas:              # custom actions first: query_default_action may name one
        if p.name == "query_action":
            bad = [a for a in p.args if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a) or a in ("fwd", "drop")]
            if not p.args or bad:
                errors.append(CompileError(f"query_action needs custom action names{f', not {bad}' if bad else ''}",
                                           p.pos, "@pragma query_action(mark, log)"))
            spec.actions |= frozenset(a for a in p.args if a not in bad)
    for p in reader.pragmas:
        try:
            if p.name in _KIND_PRAGMAS:
                add_query_field(spec, p.name, p.args, p.pos, p.on_field, _KIND_PRAGMAS[p.name])
                declared_at[spec.query_fields[-1].path] = p.pos
            elif p.name == "query_counter":
                if len(p.args) != 3:
                    raise CompileError("query_counter takes 3 arguments", p.pos, "(name, window_us, size)")
                cname, window, size = p.args[0], _int(p.args[1]), _int(p.args[2])
                if window < 0 or size <= 0:
                    raise CompileError("query_counter size must be positive and the window 0 (never resets) "
                                       "or positive", p.pos)
                if spec.counter(cname):
                    raise CompileError(f"counter {cname!r} declared twice", p.pos)
                spec.counters.append(Counter(cname, window, size))
            elif p.name == "udp_port":
                spec.udp_ports = tuple(sorted({_int(a) for a in p.args}))
                if not spec.udp_ports or any(not 0 < x < 65536 for x in spec.udp_ports):
                    raise CompileError("udp_port needs ports in 1..65535", p.pos)
            elif p.name == "message_framing":
                kind = p.args[0].lower() if p.args else ""
                if kind not in ("moldudp64", "none", *ATTRS_FRAMINGS):
                    raise CompileError(f"unknown framing {kind!r}", p.pos, "moldudp64, none, attrs_pairs or attrs_bitmask")
                framing = {"moldudp64": MOLDUDP64, "none": NO_FRAMING}.get(kind, Framing(kind))
                framing_at = p.pos
            elif p.name == "message_type":
                if len(p.args) != 2 or spec.header_field(p.args[0]) is None:
                    raise CompileError("message_type needs a declared field and a value", p.pos,
                                       "(header.field, value)")
                spec.message_type = (p.args[0], _int(p.args[1]))
            elif p.name == "query_type":
                if len(p.args) != 2 or p.args[1] not in VTYPES:
                    raise CompileError("query_type needs a query field and a type", p.pos,
                                       "(header.field, int|string|ipv4|ipv6|mac|topic|subject|dnsname)")
                q = spec.query_field(p.args[0])
                if q is None:
                    raise CompileError(f"{p.args[0]} is not a query field (declare it first)", p.pos)
                spec.query_fields[spec.query_fields.index(q)] = replace(q, vtype=p.args[1])
            elif p.name == "query_field_domain":
                _set_domain(spec, p.args, p.pos)
            elif p.name == "query_default_action":
                if spec.default_action:
                    raise CompileError("query_default_action given twice", p.pos)
                spec.default_atoms = default_action_atoms(", ".join(p.args), p.pos, spec.custom_actions)
                spec.default_action = ", ".join(p.args)
            elif p.name == "topic_levels":
                if len(p.args) != 2 or not 1 <= _int(p.args[1]) <= 24:
                    raise CompileError("topic_levels needs a topic field and 1..24 levels", p.pos)
                topic_levels[p.args[0]] = _int(p.args[1])
            elif p.name == "string_pad":
                spec.string_pad = _int(p.args[0]) if p.args else -1
                if not 0 <= spec.string_pad <= 255:
                    raise CompileError("string_pad needs one byte value", p.pos)
        except CompileError as exc:
            errors.append(exc)
        except ValueError:
            errors.append(CompileError(f"bad number in pragma {p.name}", p.pos))
    spec.framing = framing or NO_FRAMING
    if spec.framing.kind in ATTRS_FRAMINGS:       # the message header is the attribute dictionary
        msg = spec.message_instance
        problems = ["no message header to be the attribute dictionary"] if msg is None else \
            check_dictionary(msg.type.fields)
        errors += [CompileError(f"{spec.framing.kind}: {m}", framing_at) for m in problems]
    for q in spec.query_fields:
        if q.width > 128 and q.vtype not in topics.FLAVORS:
            errors.append(CompileError(f"{q.path} is {q.width} bits wide; query fields are at most 128 "
                                       f"(topics up to {topics.MAX_TOPIC_BITS}: query_type({q.path}, topic))",
                                       declared_at[q.path]))
    if errors:
        return
    errors += [CompileError(msg, Position(reader.source, 1, 1)) for msg in topics.expand(spec, topic_levels)]
    wide_fields.expand(spec)
