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
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .compile import Compiled, CompileOptions, assemble, compile_rules, no_cyclic_gc
from .language.errors import CompileError, CompileErrors
from .language.rules_ast import Rel, Rule
from .language.rules_parser import SourceText, parse_rules
from .language.spec import Spec
from .logic.dnf import DnfTooLarge, Term, to_dnf
from .logic.lowering import Atom, Lowered, LoweredRule, Variable, lower_rules
from .structure.diagram import DiagramBuilder

MEMO_LIMIT = 1_000_000      # memo entries (or diagram nodes) before the builder starts afresh: memory
                            # stays bounded under churn (about 100 bytes each)


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

    def __post_init__(self) -> None:
        self._rng = random.Random(0xC4A05)
        self._lowerer = lower_rules(self.spec, [], SourceText("", "<none>")).lowerer
        self._variables = [Variable(i, q.path, q.width, q.kind, field=q) for i, q in enumerate(self.spec.query_fields)]
        self._widths = [v.width for v in self._variables]

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
        try:
            rules, src = parse_rules(text, "<line>")
            if len(rules) == 1:
                got = self._lower(rules[0], src)
        except (CompileError, CompileErrors, DnfTooLarge):
            got = None                                       # the whole-file compile reports it
        self.lines[text] = got
        return got

    def _seed(self, text: str, source: str, rule_lines: list[str], starts: list[int]) -> None:
        """Fill the line cache from one parse of the whole file (a line at a time costs twice
        as much); only where the file is one rule per line, else the lines are left to `_line`."""
        try:
            rules, src = parse_rules(text, source)
        except (CompileError, CompileErrors):
            return
        if len(rules) != len(rule_lines):
            return
        for ln, start, rule in zip(rule_lines, starts, rules):
            if ln in self.lines:
                continue
            try:          # offsets within the line, as `_line` keeps them
                got = self._lower(Rule(rule.filter, rule.actions, rule.offset - start, 0), src)
            except (CompileError, CompileErrors, DnfTooLarge):
                continue                                     # `_line` decides, alone
            if got is not None:
                self.lines[ln] = got

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
        unknown = sum(1 for ln in rule_lines if ln not in self.lines)
        if unknown > 64 and unknown * 2 > len(rule_lines):
            self._seed(text, source, rule_lines, starts)  # a cold start: the whole file at once
        parts = [self._line(ln) for ln in rule_lines]
        if any(p is None for p in parts):
            return compile_rules(self.spec, text, source, self.options)   # errors, state, multi-line rules
        with no_cyclic_gc():
            return self._assemble(text, source, rule_lines, starts, parts)   # type: ignore[arg-type]

    def _assemble(self, text: str, source: str, rule_lines: list[str], starts: list[int],
                  parts: list[_Line]) -> Compiled:
        src = SourceText(text, source)
        if (self.builder is None or self.builder.memo_size() > MEMO_LIMIT
                or len(self.builder.nodes) > min(MEMO_LIMIT, self.options.max_nodes // 2)):   # past sets' nodes
            self.builder = DiagramBuilder(self._widths, self.options.max_nodes)
            self.keys.clear()                       # the new builder's memo knows none of them
        rules, lowered_rules, terms, keys = [], [], [], []
        seen: dict[str, int] = {}
        for i, (ln, p) in enumerate(zip(rule_lines, parts)):
            occurrence = seen[ln] = seen.get(ln, -1) + 1      # a repeated line is a term set of its own
            rules.append(Rule(p.rule.filter, p.rule.actions, starts[i] + p.rule.offset, i))   # in this file
            lowered_rules.append(LoweredRule(i, p.lowered.formula, p.lowered.atoms, p.lowered.offset))
            for k, term in enumerate(p.terms):
                key = self.keys.get((ln, occurrence, k))
                if key is None:
                    key = self.keys[(ln, occurrence, k)] = self._rng.getrandbits(128)
                terms.append(term)
                keys.append(key)
        lowered = Lowered(self.spec, list(self._variables), lowered_rules, len(lowered_rules), self._lowerer)
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
