"""Fitting a rule set to a switch: which fields a covering approximation stops testing.

A switch runs the decision diagram, and multi-attribute rule sets multiply it out past any
table budget. The cover drops whole fields from the forwarding rules (logic/approx.py,
`cover_without`), greedily: each step leaves out the field whose removal shrinks the diagram
estimate (structure/strategy.py) the most, the least selective first on a tie (its constraints
accept the largest share of its domain), until the estimate fits the entry budget. The
estimate is an upper bound, so what it accepts is sure to compile quickly; what it drops costs
over-delivery only, which the exact filter at the next XDP host (or the subscriber) removes.

The bound can be loose by far: 300 random five-field filters over 200 ports, estimated past
100K entries until two fields were gone (1,231 entries left, every message nearly everywhere),
fit in 70,515 entries with one field gone; and it bounds paths, not table entries (at alpha 2
the same filters estimated at 90,780 paths made 883,146 entries). So `cover_order` gives the
estimate's order and `fewest_drops` finds by real, bounded builds how much of it the switch
needs.
"""
from __future__ import annotations

from typing import Callable

from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered
from .strategy import bdd_estimate


def _acceptance(terms: list[tuple[Term, frozenset[Atom]]], var: int, width: int) -> float:
    """Mean share of the domain the constraints on `var` accept (1.0: nobody constrains it)."""
    shares = [sum(hi - lo + 1 for lo, hi in cons[var]) / (1 << width) for cons, _ in terms if var in cons]
    return sum(shares) / len(shares) if shares else 1.0


def cover_order(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                entry_budget: int, complete: bool = False) -> tuple[list[str], int]:
    """The header fields in the order the estimate leaves them out, and how many of them it
    leaves out before it is at most `entry_budget`. Without `complete` the order stops there
    (nothing when the whole diagram passes: the common case pays one estimate); with it, every
    field is ranked (to go on when a real build does not fit)."""
    headers = [v for v in order if lowered.variables[v].state is None]
    exact_only = [(c, a) for c, a in terms if ("drop",) not in a]      # drop rules leave the cover
    dropped: list[int] = []

    def estimate(without: set[int]) -> int:
        stripped = [({v: s for v, s in c.items() if v not in without}, a) for c, a in exact_only]
        return bdd_estimate(stripped, [v for v in headers if v not in without], entry_budget)

    needed = None
    current = estimate(set())
    while len(dropped) < len(headers):
        if current <= entry_budget and needed is None:
            needed = len(dropped)
            if not complete:
                break
        width = {v: lowered.variables[v].width for v in headers}
        best = min((v for v in headers if v not in dropped),
                   key=lambda v: (estimate({*dropped, v}), -_acceptance(exact_only, v, width[v])))
        dropped.append(best)
        current = estimate(set(dropped))
    names = [lowered.variables[v].name for v in dropped]
    return [n for n in names if n], len([n for n in names[:len(dropped) if needed is None else needed] if n])


def fewest_drops(names: list[str], needed: int, fits: Callable[[frozenset[str], bool], bool],
                 floor: int = 0) -> frozenset[str] | None:
    """The first k fields of `names` (the estimate's order) for the smallest k whose diagram
    `fits` (a real, bounded build). From the estimate's count `needed` upwards until one fits
    (`fits(drop, True)`: as large a build as the budget allows); when that was the estimate's
    own count, downwards while the smaller cover still fits (`fits(drop, False)`: a build given
    up sooner, since each step down is larger and only the first failure is paid for). None
    when nothing fits, not even with every field left out. Fewer than `floor` fields are known
    not to fit. The estimate bounds paths, not
    entries, and is loose both ways (13.2M paths for a spine's 300 filters whose diagram has
    7,793 entries), so it only ranks the fields."""
    k = needed
    while k <= len(names) and not fits(frozenset(names[:k]), True):
        k += 1
    if k > len(names):
        return None
    if k == needed:
        while k > floor and fits(frozenset(names[:k - 1]), False):
            k -= 1
    return frozenset(names[:k])
