"""Compiling a rule set again and again as it changes, doing only the work the change needs.

A device's rule set changes by one subscription at a time (the controller's rule sets are one
rule per line). `IncrementalCompiler` keeps, per distinct rule line, its parsed, lowered and
DNF form, and keeps one decision-diagram builder whose memo survives between compiles: a
sub-diagram is memoised on the set of rule terms alive below it, keyed by content (each term of
each line has a key of its own), so every part of the diagram the change does not reach is found
in the memo instead of rebuilt, and keeps its node id, which is also its state id in the tables
(the switch and XDP deltas then touch only the changed states).

The result is the one `compile_rules` gives for the same text, delivery for delivery (checked
by a stateful property test against from-scratch compiles); each rule's offset is its place in
the text (the offsets inside a rule are within its line). Rule sets it does not take on (state
functions, whose variables are numbered across the whole file; alpha widening; per-rule counters)
and any line with an error go through `compile_rules` on the whole text, so errors carry their
real positions.

With the decision diagram (strategy bdd, or auto where it chooses the diagram) and the spec's
field order, the terms live in a `LiveDiagram`: a change adds and removes only its own terms and
rebuilds only the top-level intervals they cover, so its cost does not grow with the rule set.
`change(added, removed)` is that path without the text (the controller and the agent know which
lines changed); `compile(text)` diffs the text against the live lines and takes it too.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable

from collections import Counter

from .heap import settle_heap
from .compile import Compiled, CompileOptions, assemble, compile_rules, no_cyclic_gc
from .language.errors import CompileError, CompileErrors, Position
from .language.rules_ast import Rel, Rule
from .language.rules_parser import SourceText, parse_rules
from .language.spec import Spec
from .logic.dnf import DnfTooLarge, Term, to_dnf
from .logic.lowering import Atom, Lowered, LoweredRule, Variable, lower_rules
from .structure.diagram import DiagramBuilder, DiagramTooLarge
from .structure.live_diagram import LiveDiagram
from .structure.slicing import slice_pipeline
from .structure.strategy import bdd_budget, bdd_estimate

ID_LIMIT = 1 << 24          # node ids (never reused) before the live diagram starts afresh: P4 state widths
MEMO_LIMIT = 1_000_000      # memo entries (or diagram nodes) before the builder starts afresh: memory
                            # stays bounded under churn (about 100 bytes each)


def rule_lines(text: str) -> list[str]:
    """The rule lines of a rules text: stripped, without blank lines and comment lines."""
    return [ln for ln in (raw.strip() for raw in text.splitlines()) if ln and not ln.startswith("#")]


# A counted rule (CompileOptions.count_rules: the first N rules of a file get their own counters)
# is a line of its own in the live diagram: its text and its place among the counted rules, after
# a newline (no rule text holds one), so its leaves say which counter they feed.
COUNTED_SEP = "\n"


def counted_line(text: str, index: int) -> str:
    """The live line of `text` counted as rule `index`."""
    return f"{text}{COUNTED_SEP}{index}"


def split_line(line: str) -> tuple[str, int | None]:
    """A live line's rule text and counted index (None: not counted)."""
    text, sep, index = line.rpartition(COUNTED_SEP)
    return (text, int(index)) if sep else (line, None)


def live_items(texts: list[str], count_rules: int) -> set[str]:
    """The live lines of a file whose rules (in file order) are `texts`: the first `count_rules`
    counted, the others as they are (a rule repeated later is served by its counted copy)."""
    counted = texts[:count_rules]
    items = set(texts[count_rules:])                  # (set operations: 100K texts in milliseconds)
    items.difference_update(counted)
    items.update(counted_line(t, i) for i, t in enumerate(counted))
    items.discard("")
    return items


def line_changes(old: Counter[str], new: Counter[str]) -> tuple[list[str], list[str]]:
    """Lines added and removed from `old` to `new` (repeats counted)."""
    return list((new - old).elements()), list((old - new).elements())


def live_options(o: CompileOptions) -> bool:
    """Options the live diagram serves: the spec's field order, the diagram strategy (or auto),
    no alpha widening; per-rule counters the caller names (`counted_line`)."""
    return o.alpha <= 1 and o.order == "spec" and o.strategy in ("bdd", "auto")


def takes_live_path(c: Compiled) -> bool:
    """Whether rules compiled as `c` are ones the live path serves (its options, the diagram
    chosen, no state functions, no topic levels matched by labels): a command may then write
    them through it, and leave its live state for the next update's delta."""
    return (live_options(c.options) and c.pipeline.bitvector is None and not c.lowered.state_vars
            and not c.spec.topics)


class NotLive(Exception):
    """The change cannot take the live path (options, state functions): compile the text."""


@dataclass
class _Line:
    rule: Rule
    lowered: LoweredRule
    terms: list[tuple[Term, frozenset[Atom]]]


@dataclass
class IncrementalCompiler:
    spec: Spec
    options: CompileOptions = field(default_factory=CompileOptions)
    lines: dict[str, _Line | None] = field(default_factory=dict)    # None: not for this path
    keys: dict[tuple[str, int, int], int] = field(default_factory=dict)   # (line, occurrence, term)
    builder: DiagramBuilder | None = None
    incremental_last: bool = False                   # did the last compile take the fast path?
    live: LiveDiagram | None = None                  # the live path's diagram (its own builder)
    live_slots: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)   # line -> per occurrence, its term slots
    generation: int = 0                              # bumped when the live diagram starts afresh (node ids change)
    _live_ok: bool | None = None                     # auto strategy: the diagram chosen, at `_decided_at` rules
    _decided_at: int = 0
    # lines no longer live, oldest first: their parses stay cached (a line that comes back, as
    # an unsubscribe undone or a client's filter re-subscribed, is not parsed again) up to
    # `_dead_bound()` of them, so the cache follows the live set, not every line ever seen
    _dead: dict[str, None] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, object]:
        """Pickled (a CLI update's saved live state, dataplane/live_state.py) without the parse
        cache: three quarters of the bytes, and a line is parsed again when it is needed."""
        state = dict(self.__dict__)
        state["lines"], state["_dead"] = {}, {}
        return state

    def __post_init__(self) -> None:
        self._rng = random.Random(0xC4A05)
        self._lowerer = lower_rules(self.spec, [], SourceText("", "<none>")).lowerer
        self._variables = [Variable(i, q.path, q.width, q.kind, field=q) for i, q in enumerate(self.spec.query_fields)]
        self._widths = [v.width for v in self._variables]

    @property
    def variables(self) -> list[Variable]:
        """The compiler's variables (the spec's query fields, in order): the live path's tables."""
        return self._variables

    def _simple(self) -> bool:
        o = self.options
        return o.alpha <= 1 and o.count_rules == 0      # (exact_rules only matter with alpha > 1)

    def _lower(self, rule: Rule, src: SourceText) -> _Line | None:
        """One rule's lowered form and DNF terms (None: state functions, which number their
        variables across the whole file). Raises on a type error or a DNF too large."""
        lw = self._lowerer                                   # one lowerer: its literal caches are shared
        lw.src = src
        states: list[tuple[Rel, bool]] = []
        formula = lw.lower(rule.filter, False, states)
        if states:
            return None
        r = LoweredRule(0, formula, lw.atoms(rule.actions), rule.offset)
        return _Line(rule, r, [(t, r.atoms) for t in to_dnf(formula, self._widths, self.options.dnf_limit)])

    def _line(self, text: str) -> _Line | None:
        if text in self.lines:
            return self.lines[text]
        got: _Line | None = None
        base, index = split_line(text)
        if index is not None:                                # a counted rule: its leaves say so
            part = self._line(base)
            if part is not None:
                tag = ("rule", index)
                got = _Line(part.rule, part.lowered, [(t, atoms | {tag}) for t, atoms in part.terms])
            self.lines[text] = got
            return got
        try:
            rules, src = parse_rules(text, "<line>")
            if len(rules) == 1:
                got = self._lower(rules[0], src)
        except (CompileError, CompileErrors, DnfTooLarge):
            got = None                                       # the whole-file compile reports it
        self.lines[text] = got
        return got

    def _seed(self, text: str, source: str, rule_lines: list[str]) -> None:
        """Fill the line cache from one parse of the whole file (a line at a time costs twice
        as much); only where the file is one rule per line, else the lines are left to `_line`."""
        try:
            rules, src = parse_rules(text, source)
        except (CompileError, CompileErrors):
            return
        if len(rules) == len(rule_lines):
            self.seed_rules(rule_lines, rules, src)

    def seed_rules(self, texts: list[str], rules: list[Rule], src: SourceText) -> None:
        """Fill the line cache from a parse of a whole file the caller has already (`texts`: each
        rule's text, as the live lines name it: counting.texts_of): its rules are not parsed
        again one line at a time. A rule this cannot lower is left to `_line`, which reports it.
        Each text starts where its rule does: offsets within it are 0-based, as `_line` keeps them."""
        with no_cyclic_gc():
            for text, rule in zip(texts, rules):
                if text in self.lines:
                    continue
                try:
                    got = self._lower(Rule(rule.filter, rule.actions, 0, 0), src)
                except (CompileError, CompileErrors, DnfTooLarge):
                    continue
                if got is not None:
                    self.lines[text] = got

    def seed_compiled(self, texts: list[str], c: Compiled) -> None:
        """Fill the line cache from a whole compile of the same spec (`texts`: each of its rules'
        text, in order): its rules are neither parsed nor lowered again, only put in disjunctive
        form (a command that attached them and now builds the live state)."""
        if c.lowered.state_vars or len(c.lowered.rules) != len(texts):
            self.seed_rules(texts, c.rules, c.source)
            return
        if self.options.strategy == "auto" and c.pipeline.bitvector is None:
            self._live_ok, self._decided_at = True, len(texts)     # its cost model chose the diagram
        with no_cyclic_gc():
            for text, rule, low in zip(texts, c.rules, c.lowered.rules):
                if text in self.lines:
                    continue
                try:
                    terms = to_dnf(low.formula, self._widths, self.options.dnf_limit)
                except DnfTooLarge:
                    continue
                self.lines[text] = _Line(Rule(rule.filter, rule.actions, 0, 0),
                                         LoweredRule(0, low.formula, low.atoms, 0), [(t, low.atoms) for t in terms])

    def compile(self, text: str, source: str = "<rules>") -> Compiled:
        """`compile_rules(spec, text, source, options)`, reusing the work of earlier calls."""
        self.incremental_last = False
        if not self._simple():
            return compile_rules(self.spec, text, source, self.options)
        rule_lines, starts = [], []                     # each rule line, and where it starts in `text`
        pos = 0
        for raw in text.splitlines(keepends=True):
            ln = raw.strip()
            if ln and not ln.startswith("#"):
                rule_lines.append(ln)
                starts.append(pos + len(raw) - len(raw.lstrip()))
            pos += len(raw)
        with no_cyclic_gc():      # the parses too: 100K rules' trees, 2.6 s with the collector on, 0.7 off
            unknown = sum(1 for ln in rule_lines if ln not in self.lines)
            if unknown > 64 and unknown * 2 > len(rule_lines):
                self._seed(text, source, rule_lines)  # a cold start: the whole file at once
            parts = [self._line(ln) for ln in rule_lines]
            if any(p is None for p in parts):
                return compile_rules(self.spec, text, source, self.options)   # errors, state, multi-line rules
            if self._live_path(parts):                                    # type: ignore[arg-type]
                return self._live_compile(text, source, rule_lines, starts, parts)   # type: ignore[arg-type]
            return self._assemble(text, source, rule_lines, starts, parts)   # type: ignore[arg-type]

    # -- the live path --------------------------------------------------------------------
    def _live_options(self) -> bool:
        return live_options(self.options)

    def _live_path(self, parts: list[_Line]) -> bool:
        """`_live_options`; with auto, the diagram must be the choice: weighed on the whole set
        when first made and again when the rule count has doubled or halved since."""
        return self._live_options() and self._diagram_chosen(len(parts), lambda: parts)

    def _diagram_chosen(self, n: int, parts: Callable[[], list[_Line]]) -> bool:
        """With strategy auto, whether the diagram (not the bit-vector stage) serves `n` rule
        lines: weighed on all of them (`parts()`) when first asked and again when the count has
        doubled or halved since."""
        if self.options.strategy == "bdd":
            return True
        if self._live_ok is None or not (self._decided_at // 2 <= n <= 2 * self._decided_at + 64):
            terms = [t for p in parts() for t in p.terms]
            budget = bdd_budget(len(terms))
            self._live_ok = bdd_estimate(terms, list(range(len(self._variables))), budget) <= budget
            self._decided_at = n
        return self._live_ok

    def live_lines(self) -> dict[str, int]:
        """The rule lines the live diagram holds, with their counts."""
        return {ln: len(occ) for ln, occ in self.live_slots.items()}

    def _restart(self) -> None:
        """A fresh builder and live diagram holding the same lines (the memo had grown past its
        bound, or there was none): every node id changes, so `generation` moves on."""
        held = self.live_lines()
        self.live = LiveDiagram(DiagramBuilder(self._widths, self.options.max_nodes),
                                list(range(len(self._variables))), self._widths)
        self.live_slots = {}
        self.keys.clear()
        self.generation += 1
        for ln, n in held.items():
            for _ in range(n):
                self._add(ln, self._line(ln))      # type: ignore[arg-type]  # (a restored compiler keeps no parses)

    def _add(self, ln: str, part: _Line) -> None:
        assert self.live is not None
        self._dead.pop(ln, None)
        # each term a content key of its own (the live diagram keeps it with the term's slot, so
        # nothing else need remember it: 100K lines' keys were a fifth of a saved live state)
        rand = self._rng.getrandbits
        self.live_slots.setdefault(ln, []).append(
            tuple(self.live.add(term, atoms, rand(128)) for term, atoms in part.terms))

    def _key(self, ln: str, occurrence: int, k: int) -> int:
        """The content key of a line's k-th term (a repeated line's terms are terms of their own)."""
        key = self.keys.get((ln, occurrence, k))
        if key is None:
            key = self.keys[(ln, occurrence, k)] = self._rng.getrandbits(128)
        return key

    def _rules(self, parts: list[_Line], starts: list[int]) -> tuple[list[Rule], Lowered]:
        """The rules as parsed from the file (offsets in it) and their lowered forms."""
        rules = [Rule(p.rule.filter, p.rule.actions, starts[i] + p.rule.offset, i) for i, p in enumerate(parts)]
        lowered_rules = [LoweredRule(i, p.lowered.formula, p.lowered.atoms, p.lowered.offset)
                         for i, p in enumerate(parts)]
        return rules, Lowered(self.spec, list(self._variables), lowered_rules, len(lowered_rules), self._lowerer)

    def _remove(self, ln: str) -> None:
        assert self.live is not None
        occ = self.live_slots[ln]
        for t in occ.pop():
            self.live.remove(t)
        if not occ:
            del self.live_slots[ln]
            self._dead[ln] = None

    def _dead_bound(self) -> int:
        return 1024 + len(self.live_slots) // 8

    def _forget_dead(self) -> None:
        """Drop the parses of the lines longest dead past `_dead_bound()` (O(1) each)."""
        while len(self._dead) > self._dead_bound():
            ln = next(iter(self._dead))
            del self._dead[ln]
            self.lines.pop(ln, None)

    def change(self, added: list[str], removed: list[str]) -> int:
        """Apply rule lines added and removed (each a whole rule on one line; a line given
        twice counts twice) to the live diagram; returns the new root node. Checks everything
        before changing anything: a removed line that is not live, or an added line that does
        not compile alone, raises (CompileErrors with the line's own positions, KeyError) and
        the diagram stays as it was. Raises NotLive for lines this path does not take (state
        functions) or options it does not serve: compile the whole text instead."""
        if not self._live_options():
            raise NotLive(f"options {self.options!r} take the whole compile")
        taken: Counter[str] = Counter(removed)
        for ln, n in taken.items():
            if len(self.live_slots.get(ln, ())) < n:
                raise KeyError(f"not a live rule: {ln!r}")
        with no_cyclic_gc():          # the parses too (a take-over parses every installed line)
            for ln in added:
                if self._line(ln) is None:
                    compile_rules(self.spec, ln + "\n", "<change>", self.options)   # raises with the position
                    raise NotLive(f"{ln!r} takes the whole compile (state functions or several rules)")
            if not self._diagram_chosen(len(self.live_slots) + len(added), lambda: [
                    self._line(ln) for ln in [*self.live_slots, *added]]):   # type: ignore[misc]
                raise NotLive("the bit-vector stage serves this rule set: compile the whole text")
            return self._change(added, removed)

    def _change(self, added: list[str], removed: list[str]) -> int:
        if (self.live is None or self.live.builder.memo_size() > MEMO_LIMIT
                or len(self.live.builder.nodes) > min(MEMO_LIMIT, self.options.max_nodes // 2)
                or self.live.builder.next_id > ID_LIMIT):
            self._restart()
        assert self.live is not None
        before = self.live.root
        for ln in removed:
            self._remove(ln)
        for ln in added:
            self._add(ln, self.lines[ln])          # type: ignore[arg-type]
        try:
            root = self.live.commit()
        except DiagramTooLarge as exc:
            for ln in reversed(added):            # undo, so the live lines are the old ones
                self._remove(ln)
            for ln in removed:
                self._add(ln, self._line(ln))      # type: ignore[arg-type]
            self.live = None                       # its builder is full: start afresh next time
            raise CompileErrors([CompileError(
                f"the decision diagram grew past {self.options.max_nodes} nodes ({exc.args[0]})",
                Position("<change>", 1, 1), "--order heuristic, --alpha N, or a smaller rule set")]) from None
        self._forget_dead()
        # The nodes of this root and of the one before (what the caller's tables may still be on,
        # and what undoing this change gives back under the same ids) are kept.
        self.live.builder.collect([root, before, *self.live.child.values()])
        return root

    def _live_compile(self, text: str, source: str, rule_lines: list[str], starts: list[int],
                      parts: list[_Line]) -> Compiled:
        t0 = time.perf_counter()
        added, removed = line_changes(Counter(self.live_lines()), Counter(rule_lines))
        cold = self.live is None or len(added) + len(removed) > 1024
        root = self._change(added, removed) if (added or removed or self.live is None) else self.live.root
        assert self.live is not None
        t1 = time.perf_counter()
        src = SourceText(text, source)
        rules, lowered = self._rules(parts, starts)
        order = list(range(len(self._variables)))
        pipeline = slice_pipeline(lowered, self.live.builder, root, order, self.options.compress_max)
        t2 = time.perf_counter()
        pipeline.validate()
        self.incremental_last = True
        out = Compiled(self.spec, rules, src, lowered, self.live.builder, root, order, pipeline,
                       {"diagram": t1 - t0, "slice": t2 - t1, "validate": time.perf_counter() - t2}, self.options)
        if cold:
            settle_heap()
        return out

    def _assemble(self, text: str, source: str, rule_lines: list[str], starts: list[int],
                  parts: list[_Line]) -> Compiled:
        src = SourceText(text, source)
        if (self.builder is None or self.builder.memo_size() > MEMO_LIMIT
                or len(self.builder.nodes) > min(MEMO_LIMIT, self.options.max_nodes // 2)):   # past sets' nodes
            self.builder = DiagramBuilder(self._widths, self.options.max_nodes)
            self.keys.clear()                       # the new builder's memo knows none of them
        terms, keys = [], []
        seen: dict[str, int] = {}
        for ln, p in zip(rule_lines, parts):
            occurrence = seen[ln] = seen.get(ln, -1) + 1      # a repeated line is a term set of its own
            for k, term in enumerate(p.terms):
                terms.append(term)
                keys.append(self._key(ln, occurrence, k))
        rules, lowered = self._rules(parts, starts)
        c = assemble(self.spec, rules, src, lowered, terms, self.options, self.builder, keys)
        self.incremental_last = True
        self._prune(set(rule_lines))
        return c

    def _prune(self, live: set[str]) -> None:
        """Forget lines no longer in the rule set once they outnumber it (memory stays flat under
        churn; a line that comes back is parsed again, and its terms get new keys)."""
        if len(self.lines) > 2 * len(live) + 1024:
            self.lines = {ln: p for ln, p in self.lines.items() if ln in live}
            self.keys = {k: v for k, v in self.keys.items() if k[0] in live}
            self._dead = {}
