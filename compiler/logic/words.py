"""A wide query field's interval set as a formula over its two 64-bit words
(compiler/language/wide_fields.py says why fields are split)."""
from __future__ import annotations

from typing import Any

from ..language.wide_fields import WORD_BITS
from .intervals import IntervalSet, normalise

Formula = tuple[Any, ...]           # the lowering's formula shape (compiler/logic/lowering.py)
FALSE: Formula = ("or", ())


def word_formula(iset: IntervalSet, width: int, hi_var: int, lo_var: int) -> Formula:
    """An interval set over the whole field as a formula over its words. Each interval [a, b]
    splits at the low word's boundaries: the top values strictly inside take any low word (one
    literal on hi for all of them), the top values of a and b take part of the low range."""
    low_top = (1 << WORD_BITS) - 1
    whole_tops: list[tuple[int, int]] = []
    partial: dict[int, list[tuple[int, int]]] = {}
    for a, b in iset:
        ah, al, bh, bl = a >> WORD_BITS, a & low_top, b >> WORD_BITS, b & low_top
        if ah == bh:
            if al == 0 and bl == low_top:
                whole_tops.append((ah, ah))
            else:
                partial.setdefault(ah, []).append((al, bl))
            continue
        first, last = ah, bh
        if al != 0:
            partial.setdefault(ah, []).append((al, low_top))
            first = ah + 1
        if bl != low_top:
            partial.setdefault(bh, []).append((0, bl))
            last = bh - 1
        if first <= last:
            whole_tops.append((first, last))
    terms: list[Formula] = []
    if whole_tops:
        terms.append(("lit", hi_var, normalise(whole_tops)))
    for top, spans in sorted(partial.items()):
        terms.append(("and", (("lit", hi_var, ((top, top),)), ("lit", lo_var, normalise(spans)))))
    if not terms:
        return FALSE
    return terms[0] if len(terms) == 1 else ("or", tuple(terms))
