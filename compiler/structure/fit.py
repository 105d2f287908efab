"""Fitting a rule set to a switch: which fields a covering approximation stops testing.

A switch runs the decision diagram, and multi-attribute rule sets multiply it out past any
table budget. The cover drops whole fields from the forwarding rules (logic/approx.py,
`cover_without`), greedily: each step leaves out the field whose removal shrinks the diagram
estimate (structure/strategy.py) the most, the least selective first on a tie (its constraints
accept the largest share of its domain), until the estimate fits the entry budget. The
estimate is an upper bound, so what it accepts is sure to compile quickly; what it drops costs
over-delivery only, which the exact filter at the next XDP host (or the subscriber) removes.
"""
from __future__ import annotations

from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered
from .strategy import bdd_estimate


def _acceptance(terms: list[tuple[Term, frozenset[Atom]]], var: int, width: int) -> float:
    """Mean share of the domain the constraints on `var` accept (1.0: nobody constrains it)."""
    shares = [sum(hi - lo + 1 for lo, hi in cons[var]) / (1 << width) for cons, _ in terms if var in cons]
    return sum(shares) / len(shares) if shares else 1.0


def cover_fields(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                 entry_budget: int) -> frozenset[str]:
    """The fields to leave out so that the diagram estimate is at most `entry_budget`."""
    headers = [v for v in order if lowered.variables[v].state is None]
    exact_only = [(c, a) for c, a in terms if ("drop",) not in a]      # drop rules leave the cover
    dropped: set[int] = set()

    def estimate(without: set[int]) -> int:
        stripped = [({v: s for v, s in c.items() if v not in without}, a) for c, a in exact_only]
        return bdd_estimate(stripped, [v for v in headers if v not in without], entry_budget)

    current = estimate(dropped)
    while current > entry_budget and len(dropped) < len(headers):
        width = {v: lowered.variables[v].width for v in headers}
        best = min((v for v in headers if v not in dropped),
                   key=lambda v: (estimate(dropped | {v}), -_acceptance(exact_only, v, width[v])))
        dropped.add(best)
        current = estimate(dropped)
    return frozenset(p for v in dropped if (p := lowered.variables[v].name))
