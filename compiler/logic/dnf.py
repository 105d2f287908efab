"""Disjunctive normal form of lowered formulas.

A term is a conjunction: {variable: IntervalSet}, one interval set per constrained variable
(literals on the same variable are intersected). Unsatisfiable terms vanish; a variable whose
set is its whole domain is left unconstrained.
"""
from __future__ import annotations

from typing import Any

from .intervals import IntervalSet, intersect

Term = dict[int, IntervalSet]


class DnfTooLarge(Exception):
    pass


def to_dnf(formula: tuple[Any, ...], widths: list[int], limit: int = 4096) -> list[Term]:
    tag = formula[0]
    if tag == "true":
        return [{}]
    if tag == "lit":
        _, var, iset = formula
        if not iset:
            return []
        if iset == ((0, (1 << widths[var]) - 1),):
            return [{}]
        return [{var: iset}]
    if tag == "or":
        out: list[Term] = []
        for arg in formula[1]:
            out.extend(to_dnf(arg, widths, limit))
            if len(out) > limit:
                raise DnfTooLarge(len(out))
        return out
    if tag == "and" and all(a[0] == "lit" for a in formula[1]):
        term: Term = {}
        for _, var, iset in formula[1]:      # a plain conjunction: one term, no products
            if var in term:
                iset = intersect(term[var], iset)
            if not iset:
                return []
            term[var] = iset
        return [{v: s for v, s in term.items() if s != ((0, (1 << widths[v]) - 1),)}]
    if tag == "and":
        acc: list[Term] = [{}]
        for arg in formula[1]:
            part = to_dnf(arg, widths, limit)
            nxt: list[Term] = []
            for left in acc:
                for right in part:
                    merged = _conjoin(left, right)
                    if merged is not None:
                        nxt.append(merged)
            if len(nxt) > limit:
                raise DnfTooLarge(len(nxt))
            acc = nxt
            if not acc:
                break
        return acc
    raise ValueError(f"not a lowered formula: {formula!r}")


def _conjoin(a: Term, b: Term) -> Term | None:
    if not b:
        return a
    out = dict(a)
    for var, iset in b.items():
        if var in out:
            both = intersect(out[var], iset)
            if not both:
                return None
            out[var] = both
        else:
            out[var] = iset
    return out
