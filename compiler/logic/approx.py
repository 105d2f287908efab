"""Alpha discretisation (Camus section on approximation): round constants to multiples of
alpha so fewer distinct boundaries reach the tables. Each literal's interval set only widens
(lower bounds round down, upper bounds round up), so a message that matched still matches;
the price is over-delivery, never under-delivery. Applies to numeric range fields only."""
from __future__ import annotations

from typing import Any

from .intervals import normalise
from .lowering import Formula, Lowered, LoweredRule, Variable
from ..language.spec import MatchKind


def _widen(iset: tuple[Any, ...], alpha: int, width: int) -> tuple[Any, ...]:
    top = (1 << width) - 1
    out = []
    for lo, hi in iset:
        lo2 = (lo // alpha) * alpha
        hi2 = top if hi == top else min(top, -(-(hi + 1) // alpha) * alpha - 1)
        out.append((lo2, hi2))
    return normalise(out)


def _eligible(v: Variable) -> bool:
    return (v.field is not None and v.field.vtype == "int"
            and v.kind in (MatchKind.AUTO, MatchKind.RANGE))


def _apply(f: Formula, alpha: int, variables: list[Variable]) -> Formula:
    tag = f[0]
    if tag == "lit":
        v = variables[f[1]]
        return ("lit", f[1], _widen(f[2], alpha, v.width)) if _eligible(v) else f
    if tag in ("and", "or"):
        return (tag, tuple(_apply(a, alpha, variables) for a in f[1]))
    return f


def discretise(lowered: Lowered, alpha: int, exact: frozenset[int] = frozenset()) -> Lowered:
    """A copy of `lowered` whose numeric literals are widened to multiples of alpha, except in
    the rules numbered in `exact` (a subscriber's last hop must deliver exactly)."""
    if alpha <= 1:
        return lowered
    vs = lowered.variables
    # Widening is only safe where matching more means delivering more: not for drop rules
    # (exclusion filters would then hide messages) and not around state functions (a wider
    # guard changes the aggregates, and `count(x) < N` may then stop holding).
    rules = [r if (("drop",) in r.atoms or r.state_ids or r.index < 0 or r.index in exact) else
             LoweredRule(r.index, _apply(r.formula, alpha, vs), r.atoms, r.offset, r.state_ids)
             for r in lowered.rules]
    variables = vs
    return type(lowered)(lowered.spec, variables, rules, lowered.user_rule_count, lowered.lowerer)
