"""Which table strategy a rule set gets: the decision diagram or the bit-vector stage.

The diagram is the better structure when an equality field splits the rule set into small
groups (ITCH: `stock == S and price > P` -> one small price table per symbol): few entries,
one lookup per field, and the only form a switch can run. It multiplies out when terms
constrain several fields with wildcards between them: below a split, every combination of
the remaining fields' intervals can become its own path.

The estimate is an upper bound on the diagram's paths, the smaller of two: group the terms by
their value on the first field and multiply, within a group, the intervals the remaining fields
are cut into (`_first_field_groups`, one pass); or group by value field after field, recursively
(ranges multiply), which is far tighter when several fields hold single values (topic levels:
`_paths`, with a bounded effort). When it
stays within a budget linear in the terms, the diagram is built; otherwise the bit-vector stage
(linear by construction).
"""
from __future__ import annotations

from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered

CAP = 1 << 62
WORK_PER_TERM = 1000   # the recursive estimate's effort, in term visits per term,
MAX_WORK = 2_000_000   # and at most this many (about 0.3 s)
MAX_INTERVALS = 16     # a range field cut into more intervals multiplies instead


def _cuts(members: list[Term], v: int) -> set[int]:
    return {b for cons in members if v in cons for lo, hi in cons[v] for b in (lo, hi + 1)}


def bdd_estimate(terms: list[tuple[Term, frozenset[Atom]]], order: list[int], stop_above: int = CAP) -> int:
    """An upper bound on the diagram's size (paths), capped at CAP; counting stops as soon as
    it passes `stop_above` (the answer is then some number above it)."""
    if not order or not terms:
        return len(terms)
    members = [cons for cons, _ in terms]
    first = _first_field_groups(members, order, stop_above)
    if first <= stop_above:
        return first
    work = [min(MAX_WORK, WORK_PER_TERM * len(members))]   # the recursion gives up (CAP) past this many visits
    return min(first, _paths(members, order, stop_above, work))


def _first_field_groups(members: list[Term], order: list[int], stop_above: int) -> int:
    """Group by the point value on the first field (others in every group); within a group,
    multiply the intervals each remaining field is cut into."""
    first, rest = order[0], order[1:]
    groups: dict[int, list[Term]] = {}
    anywhere: list[Term] = []
    for cons in members:
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


def _paths(members: list[Term], order: list[int], stop_above: int, work: list[int]) -> int:
    """Paths below a node whose live terms are `members`, testing `order` next. A field every
    constraint of which is one value splits the terms into one group per value (plus the terms
    that leave it free, in every group and in the "other values" branch), and each group is
    counted the same way on the next field; a field with ranges multiplies by the number of
    intervals its boundaries cut (each interval's terms are among `members`)."""
    if not members:
        return 0
    if not order:
        return 1
    work[0] -= len(members)
    if work[0] < 0:
        return CAP
    v, rest = order[0], order[1:]
    groups: dict[int, list[Term]] = {}
    free: list[Term] = []
    for cons in members:
        iset = cons.get(v)
        if iset is None:
            free.append(cons)
        elif len(iset) == 1 and iset[0][0] == iset[0][1]:
            groups.setdefault(iset[0][0], []).append(cons)
        else:                                   # a range: count per interval instead
            return _by_interval(members, v, rest, stop_above, work)
    if not groups:
        return _paths(members, rest, stop_above, work)
    total = _paths(free, rest, stop_above, work) if free else 1
    for group in groups.values():
        if total > stop_above:
            break
        total = min(CAP, total + _paths(group + free, rest, stop_above, work))
    return total


def _by_interval(members: list[Term], v: int, rest: list[int], stop_above: int, work: list[int]) -> int:
    """A field with ranges: each interval its boundaries cut holds the terms whose constraint
    covers it; with many intervals, the count below times their number (a looser bound)."""
    cuts = sorted(_cuts(members, v))
    if len(cuts) > MAX_INTERVALS:
        return min(CAP, _paths(members, rest, stop_above, work) * (len(cuts) + 1))
    starts = [0] + [c for c in cuts if c > 0]
    total = 0
    for i, lo in enumerate(starts):
        hi = starts[i + 1] - 1 if i + 1 < len(starts) else CAP
        alive = [cons for cons in members if v not in cons or
                 any(a <= lo and hi <= b for a, b in cons[v])]
        total = min(CAP, total + _paths(alive, rest, stop_above, work))
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
