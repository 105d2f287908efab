"""Which table strategy a rule set gets: the decision diagram or the bit-vector stage.

The diagram is the better structure when an equality field splits the rule set into small
groups (ITCH: `stock == S and price > P` -> one small price table per symbol): few entries,
one lookup per field, and the only form a switch can run. It multiplies out when terms
constrain several fields with wildcards between them: below a split, every combination of
the remaining fields' intervals can become its own path.

The estimate is an upper bound on the diagram's paths that costs one pass over the terms:
group the terms by their point value on the first field of the order (terms without one go
to every group), and within a group multiply the numbers of distinct intervals the group's
terms cut each remaining field into. When the sum over groups stays within a budget linear in
the terms, the diagram is built; otherwise the bit-vector stage (linear by construction).
"""
from __future__ import annotations

from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered

CAP = 1 << 62


def _cuts(members: list[Term], v: int) -> set[int]:
    return {b for cons in members if v in cons for lo, hi in cons[v] for b in (lo, hi + 1)}


def bdd_estimate(terms: list[tuple[Term, frozenset[Atom]]], order: list[int], stop_above: int = CAP) -> int:
    """An upper bound on the diagram's size (paths), capped at CAP; counting stops as soon as
    it passes `stop_above` (the answer is then some number above it)."""
    if not order or not terms:
        return len(terms)
    first, rest = order[0], order[1:]
    groups: dict[int, list[Term]] = {}
    anywhere: list[Term] = []
    for cons, _ in terms:
        iset = cons.get(first)
        if iset is not None and len(iset) == 1 and iset[0][0] == iset[0][1]:
            groups.setdefault(iset[0][0], []).append(cons)
        else:
            anywhere.append(cons)
    shared = {v: _cuts(anywhere, v) for v in rest}     # terms in every group cut every group
    total = 0
    for group in list(groups.values()) or [[]]:
        size = 1
        for v in rest:
            size = min(CAP, size * (len(shared[v] | _cuts(group, v)) + 1))
        total = min(CAP, total + size)
        if total > stop_above:
            break
    return total


def bdd_budget(n_terms: int) -> int:
    """Diagram paths we accept before the bit-vector stage is the safer choice."""
    return max(100_000, 32 * n_terms)


def choose(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
           requested: str) -> tuple[str, int]:
    """(strategy, estimate): `requested` unless it is auto (estimate -1 then); state functions
    need the diagram."""
    if requested not in ("auto", "bdd", "bitvector"):
        raise ValueError(f"unknown strategy {requested!r} (auto, bdd, bitvector or switch)")
    if requested != "auto":
        return requested, -1                 # nothing to weigh (the estimate costs a pass over all terms)
    has_state = any(v.state is not None for v in lowered.variables)
    estimate = bdd_estimate(terms, [v for v in order if lowered.variables[v].state is None],
                            bdd_budget(len(terms)))
    if has_state:
        return "bdd", estimate
    return ("bdd" if estimate <= bdd_budget(len(terms)) else "bitvector"), estimate
