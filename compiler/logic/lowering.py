"""From rule syntax to typed, negation-free formulas over decision variables.

Each query field of the spec is a variable; each distinct state function (count/sum/avg of a
field over a window, updated when "the rest of the filter" matches) is one more variable, ordered
after every header field. A literal is (variable, IntervalSet): the set of values that satisfy
it, so negation is complement and every later stage works on intervals only. Type errors are
reported at the position of the offending token; any error rejects the whole file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Union

from ..language.errors import CompileError, CompileErrors
from .intervals import IntervalSet, complement, normalise, prefix_interval
from ..language.rules_ast import Action, And, Attr, Const, Filter, Not, Or, Rel, Rule, StateFn, TrueFilter
from ..language.actions import action_atoms
from ..language.rules_parser import SourceText
from ..language import topics, wide_fields
from .words import word_formula
from ..language.spec import Counter, MatchKind, QueryField, Spec
from ..language.topics import Topic

STATE_WIDTH = 64   # aggregates are unsigned 64-bit values

# Negation-free formulas: ("lit", var, iset) | ("and", (f, ...)) | ("or", (f, ...)) | ("true",)
Formula = tuple[Any, ...]
TRUE: Formula = ("true",)
FALSE: Formula = ("or", ())

# Action atoms: ("fwd", port) | ("drop",) | ("call", name, (arg, ...)) | ("update", state_var)
Atom = tuple[Any, ...]
Port = Union[int, str]


@dataclass(frozen=True)
class StateVar:
    fn: str                 # count | sum | avg | every
    field: QueryField | None        # None for every(n), which counts messages only
    counter: Counter
    guard: Formula          # the rest of the filter: the aggregate updates when it holds
    modulus: int = 0        # every(n): the value is the count modulo n

    @property
    def label(self) -> str:
        inner = str(self.modulus) if self.field is None else (self.field.whole or self.field.path)   # a wide field as written
        return f"{self.fn}({inner})@{self.counter.name}"


@dataclass(frozen=True)
class Variable:
    index: int
    name: str
    width: int
    kind: MatchKind
    field: QueryField | None = None
    state: StateVar | None = None


@dataclass(frozen=True, slots=True)
class LoweredRule:
    index: int
    formula: Formula
    atoms: frozenset[Atom]
    offset: int
    state_ids: tuple[int, ...] = ()   # state variable of each state function, in source order


@dataclass
class Lowered:
    spec: Spec
    variables: list[Variable]
    rules: list[LoweredRule]           # user rules, then internal state-update rules
    user_rule_count: int
    lowerer: "_Lowerer"                # constant encoding, shared with the direct evaluator

    @property
    def state_vars(self) -> list[StateVar]:
        return [v.state for v in self.variables if v.state is not None]


LITERAL_CACHE = 1 << 16     # distinct literals remembered (rule sets repeat a few thousand at most)


class _Lowerer:
    def __init__(self, spec: Spec, src: SourceText) -> None:
        self.spec, self.src = spec, src
        self.field_var = {q.path: i for i, q in enumerate(spec.query_fields)}
        self.state_vars: dict[tuple[Any, ...], int] = {}
        self.state_list: list[StateVar] = []
        self._resolved: dict[str, QueryField] = {}
        self._lit_cache: dict[tuple[Any, ...], IntervalSet] = {}
        self._atom_cache: dict[tuple[Any, ...], frozenset[Atom]] = {}

    # -- names -----------------------------------------------------------------------------
    def resolve(self, attr: Attr) -> QueryField:
        hit = self._resolved.get(attr.name)
        if hit is not None:
            return hit
        found = self.spec.fields_named(attr.name)
        if len(found) == 1:
            self._resolved[attr.name] = found[0]
            return found[0]
        if len(found) > 1:
            names = ", ".join(q.path for q in found)
            raise self.src.error(f"field name {attr.name!r} is ambiguous", attr.offset,
                                 f"one of {names}")
        if self.spec.header_field(attr.name) is not None:
            raise self.src.error(f"{attr.name} is not a query field", attr.offset,
                                 f"@pragma query_field({attr.name}) in the spec")
        known = ", ".join(dict.fromkeys(q.whole or q.path for q in self.spec.query_fields))   # names rules use
        raise self.src.error(f"unknown field {attr.name!r}", attr.offset, f"one of {known}")

    # -- constants -------------------------------------------------------------------------
    def encode(self, const: Const, q: QueryField | None, width: int, label: str) -> int:
        kind, value = const.kind, const.value
        if kind == "word":
            if self.spec.fields_named(str(value)):
                raise self.src.error(f"bare word {value!r} is also a field name; comparing two "
                                     "fields is not supported", const.offset, f'"{value}" for a string')
            kind = "str"
        if kind == "str":
            if q is None or q.vtype != "string":
                raise self.src.error(f"{label} holds numbers, not strings", const.offset,
                                     "a number" if q is None else
                                     f"a number, or @pragma query_type({q.path}, string)")
            data = self.string_bytes(const)
            nbytes = width // 8
            if len(data) > nbytes:
                raise self.src.error(f"string {const.text} is longer than {label} "
                                     f"({nbytes} bytes)", const.offset)
            data = data + bytes([self.spec.string_pad]) * (nbytes - len(data))
            return int.from_bytes(data, "big")
        need = {"ipv4": 32, "ipv6": 128, "mac": 48}.get(kind)
        if need is not None and need != width:
            raise self.src.error(f"{kind.upper()} constant on {label}, which is {width} bits wide",
                                 const.offset)
        assert isinstance(value, int)
        if value >= 1 << width:
            raise self.src.error(f"constant {const.text} does not fit {label} (bit<{width}>, "
                                 f"at most {(1 << width) - 1})", const.offset)
        return value

    def string_bytes(self, const: Const) -> bytes:
        """A string constant's bytes: one per character (Latin-1), as the message carries them.
        A character outside Latin-1 has no one-byte form: refused, never turned into '?' (which
        would make different strings equal)."""
        try:
            return str(const.value).encode("latin-1")
        except UnicodeEncodeError as exc:
            bad = str(const.value)[exc.start]
            raise self.src.error(f"string {const.text} has a character outside Latin-1 ({bad!r}, U+{ord(bad):04X}): "
                                 "string fields hold one byte per character", const.offset,
                                 "characters U+0000..U+00FF only") from None

    def literal_set(self, rel: Rel, q: QueryField | None, width: int, kind: MatchKind,
                    label: str, negate: bool) -> IntervalSet:
        op, const = rel.op, rel.right
        if kind is MatchKind.EXACT and op not in ("==", "!="):
            raise self.src.error(f"{label} is an exact-match field: only == and != apply",
                                 rel.offset, "query_field or query_field_range in the spec")
        if kind is MatchKind.LPM and op not in ("==", "!=", "prefix"):
            raise self.src.error(f"{label} is a longest-prefix field: only ==, != and prefix apply",
                                 rel.offset)
        top = (1 << width) - 1
        if op == "prefix":
            if const.kind in ("str", "word"):
                if q is None or q.vtype != "string":
                    raise self.src.error(f"prefix needs a string or address field; {label} "
                                         "holds numbers", rel.offset)
                data = self.string_bytes(const)
                if len(data) * 8 > width:
                    raise self.src.error(f"prefix {const.text} is longer than {label}", const.offset)
                plen = len(data) * 8
                val = int.from_bytes(data, "big") << (width - plen) if plen else 0
                spans = [prefix_interval(val, plen, width)]
            elif const.prefix_len is not None:
                spans = [self.prefix_span(const, q, width, label)]
            else:
                raise self.src.error("prefix needs a string or an address/length", const.offset,
                                     '"ABC" or 10.0.0.0/8')
        else:
            if const.prefix_len is not None:
                if op not in ("==", "!="):
                    raise self.src.error("a prefix only goes with ==, != or prefix", rel.offset)
                spans = [self.prefix_span(const, q, width, label)]
                if op == "!=":                          # outside the prefix
                    negate = not negate
            else:
                v = self.encode(const, q, width, label)
                spans = {"==": [(v, v)], "!=": [(0, v - 1), (v + 1, top)], "<": [(0, v - 1)],
                         "<=": [(0, v)], ">": [(v + 1, top)], ">=": [(v, top)]}[op]
                if op == "!=":
                    spans, negate = [(v, v)], not negate
        iset = normalise(spans)
        return complement(iset, width) if negate else iset

    def prefix_span(self, const: Const, q: QueryField | None, width: int, label: str) -> tuple[int, int]:
        assert const.prefix_len is not None
        if const.prefix_len > width:
            raise self.src.error(f"prefix length /{const.prefix_len} is longer than {label} "
                                 f"({width} bits)", const.offset)
        v = self.encode(Const(const.kind, const.value, None, const.text, const.offset), q, width, label)
        return prefix_interval(v, const.prefix_len, width)

    # -- formulas --------------------------------------------------------------------------
    def lower(self, f: Filter, negate: bool, states: list[tuple[Rel, bool]]) -> Formula:
        if isinstance(f, Rel):
            if isinstance(f.left, StateFn):
                states.append((f, negate))
                return ("state", len(states) - 1)
            found = self.spec.topics_named(f.left.name) if self.spec.topics else []
            if len(found) == 1:
                return self.topic_formula(f, found[0], negate)
            q = self.resolve(f.left)
            c = f.right
            # keyed by the name as written (it resolves to one field) so the key holds only what the
            # syntax tree holds already; bounded: a million distinct names (hICN) repeat nothing
            key = (f.left.name, f.op, c.kind, c.value, c.prefix_len, negate)
            iset = self._lit_cache.get(key)
            if iset is None:
                if len(self._lit_cache) >= LITERAL_CACHE:
                    self._lit_cache.clear()
                iset = self._lit_cache[key] = self.literal_set(f, q, q.width, q.kind, q.path, negate)
            if q.path in self.spec.wide:        # the whole field's set, over its two words
                hi, lo = wide_fields.words(q)
                return word_formula(iset, q.width, self.field_var[hi.path], self.field_var[lo.path])
            return ("lit", self.field_var[q.path], iset)
        if isinstance(f, Not):
            return self.lower(f.arg, not negate, states)
        if isinstance(f, TrueFilter):
            return FALSE if negate else TRUE
        if isinstance(f, (And, Or)):
            op = "and" if isinstance(f, And) != negate else "or"
            return (op, tuple(self.lower(a, negate, states) for a in f.args))
        raise TypeError(f)

    def topic_formula(self, rel: Rel, t: Topic, negate: bool) -> Formula:
        """`topic == "a/+/b"`: a conjunction over the topic's variables (compiler/language/topics.py)."""
        if rel.op not in ("==", "!="):
            raise self.src.error(f"{t.path} is a topic: only == and != (with a topic filter) apply",
                                 rel.offset, '== "plant/+/temp"')
        if rel.right.kind not in ("str", "word"):
            raise self.src.error(f"{t.path} is a topic: compare it with a quoted topic filter", rel.right.offset,
                                 '"plant/#"')
        try:
            parts = topics.filter_literals(t, str(rel.right.value))
        except topics.TopicError as exc:
            raise self.src.error(f"bad topic filter {rel.right.text}: {exc}", rel.right.offset) from None
        if rel.op == "!=":
            negate = not negate
        lits: list[Formula] = []
        for path, (lo, hi) in parts:
            width = self.spec.query_field(path).width  # type: ignore[union-attr]
            iset = normalise([(lo, hi)])
            lits.append(("lit", self.field_var[path], complement(iset, width) if negate else iset))
        return ("or" if negate else "and", tuple(lits))

    def _counter(self, fn: StateFn) -> Counter | None:
        if fn.fn == "every" and fn.counter is None:     # one out of n of all matches, unless a
            endless = [c for c in self.spec.counters if c.window_us == 0]    # window is named
            return endless[0] if len(endless) == 1 else None
        return self.spec.counter(fn.counter)

    def state_literal(self, rel: Rel, negate: bool, guard: Formula) -> Formula:
        fn = rel.left
        assert isinstance(fn, StateFn)
        q = self.resolve(fn.attr) if fn.fn != "every" else None
        shown = q.path if q else str(fn.modulus)           # what the label says: the field as written
        if q is not None and q.path in self.spec.wide:
            if fn.fn in ("sum", "avg"):
                raise self.src.error(f"{fn.fn}() of {q.path}: the data planes add 64-bit values; it is {q.width} "
                                     "bits wide", fn.offset, f"count({q.path})")
            q = wide_fields.words(q)[0]         # count() only counts: the field names the variable
        counter = self._counter(fn)
        if counter is None and fn.fn == "every" and fn.counter is None:
            endless = [c.name for c in self.spec.counters if c.window_us == 0]
            raise self.src.error("every(n) needs a counter that never resets" if not endless else
                                 f"every(n): several endless counters ({', '.join(endless)})", fn.offset,
                                 "@pragma query_counter(seq, 0, 64) in the spec (window 0: never resets), "
                                 "or every(n, COUNTER) to start again each window")
        if counter is None:
            if not self.spec.counters:
                raise self.src.error(f"{fn.fn}() needs a window", fn.offset,
                                     "@pragma query_counter(name, window_us, size) in the spec")
            names = ", ".join(c.name for c in self.spec.counters)
            raise self.src.error(f"unknown or unspecified counter {fn.counter!r}", fn.offset,
                                 f"{fn.fn}({fn.attr.name}, NAME) with NAME one of {names}")
        if rel.op == "prefix":
            raise self.src.error("prefix does not apply to state functions", rel.offset)
        if rel.right.kind not in ("int",) or rel.right.prefix_len is not None:
            raise self.src.error(f"{fn.fn}() compares with a number", rel.right.offset)
        key = (fn.fn, q.path if q else fn.modulus, counter.name, guard)
        if key not in self.state_vars:
            used = sum(1 for s in self.state_list if s.counter == counter)
            if used >= counter.size:
                raise self.src.error(f"counter {counter.name} holds {counter.size} state "
                                     "variables and all are used", fn.offset)
            self.state_vars[key] = len(self.state_list)
            self.state_list.append(StateVar(fn.fn, q, counter, guard, fn.modulus))
        var = len(self.spec.query_fields) + self.state_vars[key]
        label = f"{fn.fn}({shown})"
        iset = self.literal_set(rel, None, STATE_WIDTH, MatchKind.RANGE, label, negate)
        return ("lit", var, iset)

    def atoms(self, actions: tuple[Action, ...]) -> frozenset[Atom]:
        key = tuple((a.name, tuple((c.kind, c.value, c.prefix_len) for c in a.args)) for a in actions)
        hit = self._atom_cache.get(key)
        if hit is None:
            hit = self._atom_cache[key] = self._atoms(actions)
        return hit

    def _atoms(self, actions: tuple[Action, ...]) -> frozenset[Atom]:
        return action_atoms(actions, self.src, self.spec.custom_actions)


def _substitute_states(f: Formula, lits: list[Formula]) -> Formula:
    tag = f[0]
    if tag == "state":
        return lits[f[1]]
    if tag in ("and", "or"):
        return (tag, tuple(_substitute_states(a, lits) for a in f[1]))
    return f


def lower_rules(spec: Spec, rules: Iterable[Rule], src: SourceText) -> Lowered:
    """Type-check and lower every rule; any error rejects all (CompileErrors lists them). `rules`
    may be the parser's stream (rules_parser.each_rule): its syntax errors then reject the file."""
    lw = _Lowerer(spec, src)
    errors: list[CompileError] = []
    lowered: list[LoweredRule] = []
    for rule in rules:
        try:
            states: list[tuple[Rel, bool]] = []
            formula = lw.lower(rule.filter, False, states)
            ids: tuple[int, ...] = ()
            if states:
                guard = _substitute_states(formula, [TRUE] * len(states))
                lits = [lw.state_literal(rel, neg, guard) for rel, neg in states]
                formula = _substitute_states(formula, lits)
                ids = tuple(lit[1] - len(spec.query_fields) for lit in lits)
            lowered.append(LoweredRule(rule.index, formula, lw.atoms(rule.actions), rule.offset, ids))
        except CompileError as exc:
            errors.append(exc)
    if errors:
        raise CompileErrors(errors)
    variables = [Variable(i, q.path, q.width, q.kind, field=q) for i, q in enumerate(spec.query_fields)]
    base = len(variables)
    for k, sv in enumerate(lw.state_list):
        variables.append(Variable(base + k, sv.label, STATE_WIDTH, MatchKind.RANGE, state=sv))
    user = len(lowered)
    # Internal rules: "when the rest of the filter holds, update state variable k".
    for k, sv in enumerate(lw.state_list):
        lowered.append(LoweredRule(-1 - k, sv.guard, frozenset({("update", k)}), 0))
    return Lowered(spec, variables, lowered, user, lw)
