"""The rules as formulas over field values, read from the language's syntax tree alone.

A formula is a nested tuple: ("atom", level, intervals) | ("and", parts) | ("or", parts) |
("not", part) | ("true",) | ("false",). `intervals` is a sorted tuple of disjoint (lo, hi)
value ranges of the field at `level` (its position in the spec's query fields) where the
relation holds. Constants are encoded here from the spec (numbers, strings padded with the
spec's pad byte, IPv4/IPv6/MAC literals); a field wider than 64 bits is read as the message
spec splits it, two words, each interval a formula over both; a topic (MQTT, NATS, DNS name) is
read over its message variables (topic_rules.py), with the domain real messages lie in; a state
function's aggregate is one more variable and its update a pseudo-rule (state_rules.py); what
this checker does not model (custom-action arguments as data) is refused as undecidable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from camus.compiler.language.actions import action_atoms
from camus.compiler.language.rules_ast import And, Const, Filter, Not, Or, Rel, Rule, StateFn, TrueFilter
from camus.compiler.language.rules_parser import parse_rules
from camus.compiler.language.spec import QueryField, Spec
from camus.compiler.language.topics import TopicError

from .state_rules import Aggregates, StateError, rule_with_states, state_field
from .topic_rules import TopicVariables, domain, filter_formula

from .formulas import FALSE, TRUE, Formula, comparison, conjunction


class Undecidable(Exception):
    """This checker cannot decide the question (the reason says what it does not model)."""


class TableDefect(Exception):
    """The tables are ill-formed: a message's outcome is undefined (two entries of one state
    match it with the same priority)."""


@dataclass(frozen=True)
class Outcome:
    """What a message gets: ports, an explicit drop, custom actions; and which rule counters it
    adds to (`counted`: counter ids; only where both sides count: RuleSet.with_counters)."""
    ports: frozenset[Any] = frozenset()
    drop: bool = False
    calls: frozenset[Any] = frozenset()
    counted: frozenset[int] = frozenset()
    updates: frozenset[str] = frozenset()     # the aggregates (state functions) the message adds to

    def text(self) -> str:
        parts = [f"fwd({', '.join(str(p) for p in sorted(self.ports, key=str))})"] if self.ports else []
        parts += ["drop"] if self.drop else []
        parts += [f"{n}({', '.join(a)})" for n, a in sorted(self.calls)]
        out = ", ".join(parts) or "not delivered"
        out += f"; counted by rule counter(s) {sorted(self.counted)}" if self.counted else ""
        return out + (f"; adds to aggregate(s) {sorted(self.updates)}" if self.updates else "")

    def uncounted(self) -> "Outcome":
        return Outcome(self.ports, self.drop, self.calls, frozenset(), self.updates) if self.counted else self

    def delivers(self) -> bool:
        return bool(self.ports or self.drop or self.calls)

    def or_default(self, default: "Outcome") -> "Outcome":
        """A message nothing delivers gets the default's delivery (its counters and aggregate
        updates stay its own)."""
        if self.delivers() or not default.delivers():
            return self
        return Outcome(default.ports, default.drop, default.calls, self.counted, self.updates)


def outcome_of(atoms: frozenset[Any]) -> Outcome:
    """An explicit drop overrides forwarding; custom actions stay (the language's meaning); a
    counted rule that holds adds to its counter whatever its actions."""
    drop = ("drop",) in atoms
    ports = frozenset() if drop else frozenset(a[1] for a in atoms if a[0] == "fwd")
    return Outcome(ports, drop, frozenset((a[1], tuple(a[2])) for a in atoms if a[0] == "call"),
                   frozenset(a[1] for a in atoms if a[0] == "count"), frozenset(a[1] for a in atoms if a[0] == "update"))


@dataclass
class RuleSet:
    spec: Spec
    fields: list[QueryField]                  # in the spec's order: level i is fields[i]
    formulas: list[Formula]                   # per rule
    atoms: list[frozenset[Any]]               # per rule: its action atoms
    texts: list[str]
    default: frozenset[Any]                   # query_default_action's atoms
    domain: Formula = TRUE                    # what every real message satisfies (topic variables)

    def with_counters(self, counters: dict[int, list[int]]) -> "RuleSet":
        """The same rules where rule i, when it holds, adds to counters `counters[i]` (the tables'
        counter ids: rule indices for the IR, positions in the state file's counted list live)."""
        atoms = [a | frozenset(("count", k) for k in counters.get(i, ())) for i, a in enumerate(self.atoms)]
        return RuleSet(self.spec, self.fields, self.formulas, atoms, self.texts, self.default, self.domain)

    def decide(self, satisfied: frozenset[int]) -> Outcome:
        atoms: frozenset[Any] = frozenset().union(*(self.atoms[i] for i in satisfied)) if satisfied else frozenset()
        return outcome_of(atoms).or_default(outcome_of(self.default))


def _norm(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(s for s in spans if s[0] <= s[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _latin1(c: Const) -> bytes:
    try:
        return str(c.value).encode("latin-1")
    except UnicodeEncodeError:
        raise Undecidable(f"string {c.text} has a character outside Latin-1") from None


def _encode(spec: Spec, q: QueryField, c: Const) -> int:
    if c.kind in ("str", "word"):
        if q.vtype != "string":
            raise Undecidable(f"{q.path} holds numbers; a string constant {c.text} on it")
        data = _latin1(c)
        n = q.width // 8
        if len(data) > n:
            raise Undecidable(f"string {c.text} is longer than {q.path}")
        return int.from_bytes(data + bytes([spec.string_pad]) * (n - len(data)), "big")
    if c.kind in ("int", "ipv4", "ipv6", "mac") and isinstance(c.value, int):
        return c.value
    raise Undecidable(f"constant {c.text} ({c.kind}) is not modelled by the checker")


def _prefix(value: int, plen: int, width: int) -> tuple[int, int]:
    free = width - plen
    lo = (value >> free) << free
    return lo, lo | ((1 << free) - 1)


class _Reader:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.fields = list(spec.query_fields)
        self.level = {q.path: i for i, q in enumerate(self.fields)}
        self.topics = {path: TopicVariables(t, self.level) for path, t in spec.topics.items()}
        self.states: list[tuple[Rel, bool]] = []         # the rule being read's state relations
        self.aggregates = Aggregates(spec)
        self.domain = conjunction([domain(v) for v in self.topics.values()])
        # a field wider than 64 bits is two query fields in the message spec, its words: the
        # levels of its top bits and of its low 64
        self.words: dict[str, list[tuple[str, int, int]]] = {q.whole: [] for q in self.fields if q.whole}
        for i, q in enumerate(self.fields):
            if q.whole:
                self.words[q.whole].append((q.part, i, q.width))

    def field(self, name: str) -> QueryField:
        found = self.spec.fields_named(name)
        if len(found) != 1:
            raise Undecidable(f"field {name!r} names {len(found)} query fields")
        return found[0]

    def atom(self, rel: Rel) -> Formula:
        named = self.spec.topics_named(rel.left.name) if self.topics else []
        if len(named) == 1:
            return self.topic(rel, self.topics[named[0].path])
        q = self.field(rel.left.name)
        top = (1 << q.width) - 1
        c = rel.right
        if rel.op == "prefix" or c.prefix_len is not None:
            if c.kind in ("str", "word") and rel.op == "prefix":
                data = _latin1(c)
                plen = 8 * len(data)
                span = _prefix(int.from_bytes(data, "big") << (q.width - plen) if plen else 0, plen, q.width)
            elif c.prefix_len is not None:
                span = _prefix(_encode(self.spec, q, Const(c.kind, c.value, None, c.text, c.offset)), c.prefix_len,
                               q.width)
            else:
                raise Undecidable(f"prefix {c.text} is not modelled by the checker")
            spans = [span] if rel.op in ("==", "prefix") else [(0, span[0] - 1), (span[1] + 1, top)]
        else:
            found = comparison(rel.op, _encode(self.spec, q, c), q.width)
            if found is None:
                raise Undecidable(f"{q.path} {rel.op} {c.text}: not a comparison the checker models")
            spans = list(found)
        if q.path in self.words:
            return self.wide(q, _norm(spans))
        return ("atom", self.level[q.path], _norm(spans))

    def topic(self, rel: Rel, v: TopicVariables) -> Formula:
        if rel.op not in ("==", "!=") or rel.right.kind not in ("str", "word"):
            raise Undecidable(f"{v.t.path} {rel.op} {rel.right.text}: a topic is compared with == or != and a "
                              "quoted filter")
        try:
            f = filter_formula(v, str(rel.right.value))
        except TopicError as exc:
            raise Undecidable(f"topic filter {rel.right.text}: {exc}") from None
        return f if rel.op == "==" else ("not", f)

    def wide(self, q: QueryField, spans: tuple[tuple[int, int], ...]) -> Formula:
        """Intervals of a wide field as a formula over its words: [a, b] is (hi = a's top and
        lo >= a's low) or (hi strictly between) or (hi = b's top and lo <= b's low); one top
        word: hi = it and lo in between."""
        parts = dict((part, (i, width)) for part, i, width in self.words[q.path])
        (hi, _), (lo, low_bits) = parts["hi"], parts["lo"]
        m = (1 << low_bits) - 1
        terms: list[Formula] = []
        for a, b in spans:
            ah, al, bh, bl = a >> low_bits, a & m, b >> low_bits, b & m
            if ah == bh:
                terms.append(("and", (("atom", hi, ((ah, ah),)), ("atom", lo, ((al, bl),)))))
                continue
            terms.append(("and", (("atom", hi, ((ah, ah),)), ("atom", lo, ((al, m),)))))
            if ah + 1 <= bh - 1:
                terms.append(("atom", hi, ((ah + 1, bh - 1),)))
            terms.append(("and", (("atom", hi, ((bh, bh),)), ("atom", lo, ((0, bl),)))))
        if not terms:
            return FALSE
        return terms[0] if len(terms) == 1 else ("or", tuple(terms))

    def formula(self, f: Filter, negated: bool = False) -> Formula:
        """`f` as a formula; a state relation becomes ("state", j), `self.states[j]` being it and
        whether it sits under an odd number of `not`s (state_rules.rule_with_states reads them)."""
        if isinstance(f, Rel):
            if isinstance(f.left, StateFn):
                self.states.append((f, negated))
                return ("state", len(self.states) - 1)
            return self.atom(f)
        if isinstance(f, Not):
            return ("not", self.formula(f.arg, not negated))
        if isinstance(f, And):
            return ("and", tuple(self.formula(a, negated) for a in f.args))
        if isinstance(f, Or):
            return ("or", tuple(self.formula(a, negated) for a in f.args))
        if isinstance(f, TrueFilter):
            return TRUE
        raise Undecidable(f"filter {type(f).__name__} is not modelled by the checker")


def read_rules(spec: Spec, text: str, source: str = "<rules>") -> RuleSet:
    """Parse the rules (the language's parser) and read them into formulas and outcomes."""
    rules, src = parse_rules(text, source)
    reader = _Reader(spec)
    formulas, atoms, texts = [], [], []
    for r in rules:
        reader.states = []
        f = reader.formula(r.filter)
        if reader.states:
            try:
                f = rule_with_states(f, reader.states, reader.aggregates, len(reader.fields))
            except StateError as exc:
                raise Undecidable(str(exc)) from None
        formulas.append(f)
        atoms.append(action_atoms(r.actions, src, spec.custom_actions))
        texts.append(_rule_text(text, r))
    aggregates = reader.aggregates            # each aggregate's update: a pseudo-rule after the rules
    for k, (path, guard) in enumerate(zip(aggregates.paths, aggregates.guards)):
        formulas.append(guard)
        atoms.append(frozenset({("update", path)}))
        texts.append(f"(the message adds to {path})")
    fields = reader.fields + [state_field(path) for path in aggregates.paths]
    return RuleSet(spec, fields, formulas, atoms, texts, frozenset(spec.default_atoms), reader.domain)



def _rule_text(text: str, r: Rule) -> str:
    end = text.find("\n", r.offset)
    return text[r.offset:end if end >= 0 else len(text)].strip()
