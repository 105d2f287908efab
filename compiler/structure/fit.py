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
fit in 70,515 entries with one field gone. So `cover_order` gives the estimate's order and
`fewest_drops` tries, by building the diagram for real, whether all but its last field fit.
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


def cover_estimate(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                   drop: frozenset[str], stop_above: int) -> int:
    """The diagram estimate of the forwarding rules without the fields `drop`."""
    headers = [v for v in order if lowered.variables[v].state is None and lowered.variables[v].name not in drop]
    stripped = [({v: s for v, s in c.items() if lowered.variables[v].name not in drop}, a)
                for c, a in terms if ("drop",) not in a]
    return bdd_estimate(stripped, headers, stop_above)


def cover_order(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                entry_budget: int) -> list[str]:
    """The fields to leave out, in the order the estimate leaves them out, until it is at most
    `entry_budget` (all of them then fit for sure; a shorter prefix may fit too)."""
    headers = [v for v in order if lowered.variables[v].state is None]
    exact_only = [(c, a) for c, a in terms if ("drop",) not in a]      # drop rules leave the cover
    dropped: list[int] = []

    def estimate(without: set[int]) -> int:
        stripped = [({v: s for v, s in c.items() if v not in without}, a) for c, a in exact_only]
        return bdd_estimate(stripped, [v for v in headers if v not in without], entry_budget)

    current = estimate(set())
    while current > entry_budget and len(dropped) < len(headers):
        width = {v: lowered.variables[v].width for v in headers}
        best = min((v for v in headers if v not in dropped),
                   key=lambda v: (estimate({*dropped, v}), -_acceptance(exact_only, v, width[v])))
        dropped.append(best)
        current = estimate(set(dropped))
    return [p for v in dropped if (p := lowered.variables[v].name)]


def fewest_drops(candidates: list[str], promising: Callable[[frozenset[str]], bool],
                 fits: Callable[[frozenset[str]], bool]) -> frozenset[str]:
    """`candidates` (the estimate's order, all of them sure to fit), or all but the last when
    that truly fits: the estimate, an upper bound, is loosest at the last step, where it is
    just above the budget. The real build (`fits`, bounded) is tried only when the estimate
    calls it `promising` (within a few times the budget): a build that fails costs as much
    as one that succeeds."""
    if candidates:
        shorter = frozenset(candidates[:-1])
        if promising(shorter) and fits(shorter):
            return shorter
    return frozenset(candidates)
