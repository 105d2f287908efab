"""The checker's formula shape, shared by the rule readers (rules.py, topic_rules.py).

A formula is a nested tuple: ("atom", level, intervals) | ("and", parts) | ("or", parts) |
("not", part) | TRUE | FALSE. The walk (check.py) tests TRUE and FALSE by identity: every
reader returns these two objects.
"""
from __future__ import annotations

from typing import Any, Callable

Formula = tuple[Any, ...]
TRUE: Formula = ("true",)
FALSE: Formula = ("false",)


def conjunction(parts: list[Formula]) -> Formula:
    """`and` of the parts (TRUE ones left out; one part is itself)."""
    parts = [p for p in parts if p is not TRUE]
    if not parts:
        return TRUE
    return parts[0] if len(parts) == 1 else ("and", tuple(parts))


def fold(f: Formula, leaf: Callable[[Formula], Formula]) -> Formula:
    """`f` with each leaf (an atom, a state placeholder) replaced by `leaf(it)` -- TRUE, FALSE or
    a formula -- and the constants folded away (`and` with a FALSE part is FALSE, ...)."""
    tag = f[0]
    if tag == "not":
        r = fold(f[1], leaf)
        return FALSE if r is TRUE else TRUE if r is FALSE else ("not", r)
    if tag in ("and", "or"):
        parts = []
        for p in f[1]:
            r = fold(p, leaf)
            if (r is FALSE and tag == "and") or (r is TRUE and tag == "or"):
                return r
            if r is not TRUE and r is not FALSE:
                parts.append(r)
        if not parts:
            return TRUE if tag == "and" else FALSE
        return parts[0] if len(parts) == 1 else (tag, tuple(parts))
    return f if f is TRUE or f is FALSE else leaf(f)


def comparison(op: str, v: int, width: int) -> tuple[tuple[int, int], ...] | None:
    """The values of a `width`-bit field for which `field OP v` holds, as sorted disjoint closed
    intervals (empty: none); None for an operator that is no comparison of numbers."""
    top = (1 << width) - 1
    spans = {"==": [(v, v)], "!=": [(0, v - 1), (v + 1, top)], "<": [(0, v - 1)], "<=": [(0, v)],
             ">": [(v + 1, top)], ">=": [(v, top)]}.get(op)
    if spans is None:
        return None
    return tuple((max(a, 0), min(b, top)) for a, b in spans if a <= b and a <= top and b >= 0)
