"""Direct evaluation of the rules as written: the second opinion on every compiled pipeline.

It walks each rule's syntax tree (not, and, or evaluated structurally, no normal forms, no
diagram, no tables) and compares each field with the constant the way the rule says; only the
encoding of constants into field values is shared with the compiler. State functions follow
the same semantics as the pipeline: the variables whose guard holds are updated first, then
predicates read the current window.
"""
from __future__ import annotations

from typing import Any

from ..structure.diagram import normalise_atoms
from ..logic.intervals import contains
from ..logic.lowering import STATE_WIDTH, Atom, Formula, Lowered
from ..ir.pipeline import ActionSet
from ..language import topics
from ..language.rules_ast import And, Filter, Not, Rel, Rule, StateFn, TrueFilter
from ..structure.slicing import actions_of_atoms
from ..language.spec import MatchKind, QueryField
from .state_store import StateStore


def outcome(a: ActionSet) -> tuple[Any, ...]:
    """What a delivery decision means to the outside: ports, explicit drop, custom calls."""
    return (tuple(a.ports), a.drop, tuple(a.calls))


def atoms_to_actions(atoms: frozenset[Atom]) -> ActionSet:
    return actions_of_atoms(normalise_atoms(atoms))


def eval_formula(f: Formula, values: list[int]) -> bool:
    tag = f[0]
    if tag == "lit":
        return contains(f[2], values[f[1]])
    if tag == "and":
        return all(eval_formula(a, values) for a in f[1])
    if tag == "or":
        return any(eval_formula(a, values) for a in f[1])
    return bool(tag == "true")


class FilterEvaluator:
    def __init__(self, rules: list[Rule], lowered: Lowered) -> None:
        if not rules and lowered.user_rule_count:
            raise ValueError("these rules were compiled without keeping them (compile_rules' keep_rules=False): "
                             "compile them again to evaluate them")
        self.rules = rules
        self.lowered = lowered
        self.lw = lowered.lowerer
        self.by_index = {r.index: r for r in lowered.rules if r.index >= 0}
        self.state_vars = lowered.state_vars
        self.store = StateStore([s.counter.window_us for s in self.state_vars], [s.modulus for s in self.state_vars])
        self.paths = [q.path for q in lowered.spec.query_fields]
        self._sets: dict[int, tuple[Any, ...]] = {}

    def _rel(self, rel: Rel, value: int, width: int, kind: MatchKind, label: str, q: QueryField | None = None) -> bool:
        iset = self._sets.get(id(rel))
        if iset is None:
            iset = self._sets[id(rel)] = self.lw.literal_set(rel, q, width, kind, label, False)
        return contains(iset, value)

    def _eval(self, f: Filter, values: dict[str, int], states: list[int], now_us: int) -> bool:
        if isinstance(f, Rel):
            if isinstance(f.left, StateFn):
                var = states.pop(0)
                sv = self.state_vars[var]
                agg = self.store.read(var, sv.fn, now_us)
                return self._rel(f, agg, STATE_WIDTH, MatchKind.RANGE, sv.label)
            found = self.lw.spec.topics_named(f.left.name) if self.lw.spec.topics else []
            if len(found) == 1:        # MQTT/NATS matching on the string itself, not the variables
                t = found[0]
                topic = topics.text(t, values[t.path].to_bytes(t.nbytes, "big"))
                hit = topic is not None and topics.matches(t.flavor, str(f.right.value),
                                                           topic.decode("utf-8", "surrogateescape"))
                return hit if f.op == "==" else not hit
            q = self.lw.resolve(f.left)
            return self._rel(f, values[q.path], q.width, q.kind, q.path, q)
        if isinstance(f, Not):
            return not self._eval(f.arg, values, states, now_us)
        if isinstance(f, TrueFilter):
            return True
        results = [self._eval(a, values, states, now_us) for a in f.args]
        return all(results) if isinstance(f, And) else any(results)

    def update_state(self, values: dict[str, int], now_us: int) -> tuple[int, ...]:
        if not self.state_vars:
            return ()
        vector = [values.get(p, 0) for p in self.paths]
        hit = []
        for k, sv in enumerate(self.state_vars):
            if eval_formula(sv.guard, vector):
                self.store.update(k, values[sv.field.path] if sv.field else 0, now_us)
                hit.append(k)
        return tuple(hit)

    def run(self, values: dict[str, int], now_us: int = 0) -> ActionSet:
        self.update_state(values, now_us)
        atoms: set[Atom] = set()
        for rule in self.rules:
            states = list(self.by_index[rule.index].state_ids)
            if self._eval(rule.filter, values, states, now_us):
                atoms |= self.by_index[rule.index].atoms
        actions = atoms_to_actions(frozenset(atoms))
        if not actions.delivers and self.lowered.spec.default_atoms:     # query_default_action
            return atoms_to_actions(self.lowered.spec.default_atoms)
        return actions
