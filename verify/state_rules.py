"""State functions (count, sum, avg, every) as the checker reads them.

The language's meaning: a state function in a rule is an aggregate over a counter's window of
the messages for which the rest of that rule's filter holds (each state comparison in it taken
as satisfied); a message first adds itself to every aggregate whose condition it meets, then
each rule compares the aggregate's value. Rules that name the same function of the same field
in the same window under the same condition share one aggregate.

So for the checker an aggregate is one more variable of the message (its value when the message
is classified: any 64-bit value, the window's history being arbitrary), compared by the rule's
relation, and "which aggregates this message updates" is part of what the tables must give: a
pseudo-rule per aggregate, its condition as the formula, ("update", k) as its action. The
variables are named by `state_path`, from what defines them (window, rank in it, function,
field as written); the tables' readers name theirs the same way, so a table that keeps another
aggregate than the rules define has no level to match (a defect).
"""
from __future__ import annotations

from typing import Any

from camus.compiler.language.rules_ast import Rel, StateFn
from camus.compiler.language.spec import MatchKind, QueryField, Role, Spec

from .formulas import FALSE, TRUE, Formula, comparison, fold

STATE_BITS = 64          # aggregates are unsigned 64-bit values in every data plane


class StateError(Exception):
    """A state function the checker cannot read (the reason says why)."""


def state_path(counter: str, rank: int, fn: str, field: str, modulus: int) -> str:
    """The level name of an aggregate: its window's counter, its rank among that counter's
    aggregates (first use in the rules; the switch's register index, the IR's and XDP's id order),
    what it computes: `state.latency_window#0:count(int_report.hop_latency)`."""
    inner = str(modulus) if fn == "every" else field
    return f"state.{counter}#{rank}:{fn}({inner})"


def state_field(path: str) -> QueryField:
    instance, _, name = path.partition(".")      # ("state", "<counter>#<rank>:<fn>(<field>)")
    return QueryField(instance, name, STATE_BITS, 0, MatchKind.RANGE, Role.METADATA, part="state")


class Aggregates:
    """The aggregates the rules define, in order of first use (rule order, then left to right)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.index: dict[tuple[Any, ...], int] = {}
        self.paths: list[str] = []
        self.guards: list[Formula] = []
        self.ranks: dict[str, int] = {}              # counter -> aggregates on it so far

    def _counter(self, fn: StateFn) -> str:
        if fn.fn == "every" and fn.counter is None:
            endless = [c for c in self.spec.counters if c.window_us == 0]
            if len(endless) == 1:
                return endless[0].name
        c = self.spec.counter(fn.counter)
        if c is None:
            raise StateError(f"{fn.fn}(): no counter {fn.counter!r} in the spec (or several and none named)")
        return c.name

    def _field(self, fn: StateFn) -> str:
        if fn.fn == "every":
            return ""
        found = self.spec.fields_named(fn.attr.name)
        if len(found) != 1:
            raise StateError(f"{fn.fn}({fn.attr.name}): the name means {len(found)} query fields")
        return found[0].whole or found[0].path

    def literal(self, rel: Rel, guard: Formula, level_base: int) -> Formula:
        """The relation on its aggregate (created on first use), as an atom."""
        fn = rel.left
        assert isinstance(fn, StateFn)
        field, counter = self._field(fn), self._counter(fn)
        key = (fn.fn, field, fn.modulus, counter, guard)
        k = self.index.get(key)
        if k is None:
            k = self.index[key] = len(self.paths)
            rank = self.ranks.get(counter, 0)
            self.ranks[counter] = rank + 1
            self.paths.append(state_path(counter, rank, fn.fn, field, fn.modulus))
            self.guards.append(guard)
        c = rel.right
        if c.kind != "int" or c.prefix_len is not None or not isinstance(c.value, int):
            raise StateError(f"{fn.fn}() compared with {c.text}: a number is expected")
        spans = comparison(rel.op, c.value, STATE_BITS)
        if spans is None:
            raise StateError(f"{fn.fn}() {rel.op}: not a comparison of numbers")
        return ("atom", level_base + k, spans) if spans else FALSE


def substitute(f: Formula, values: dict[int, Formula]) -> Formula:
    """`f` with each ("state", j) placeholder replaced by values[j], constants folded."""
    return fold(f, lambda x: values[x[1]] if x[0] == "state" else x)


def rule_with_states(f: Formula, states: list[tuple[Rel, bool]], aggregates: Aggregates, level_base: int) -> Formula:
    """A rule read with ("state", j) placeholders for its state relations (`states[j]`: the
    relation and whether it sits under an odd number of `not`s): its condition is the formula
    with every state comparison satisfied, and each placeholder becomes its aggregate's atom."""
    satisfied = {j: FALSE if negated else TRUE for j, (_, negated) in enumerate(states)}
    guard = substitute(f, satisfied)
    return substitute(f, {j: aggregates.literal(rel, guard, level_base) for j, (rel, _) in enumerate(states)})
