"""The checker's formula shape, shared by the rule readers (rules.py, topic_rules.py).

A formula is a nested tuple: ("atom", level, intervals) | ("and", parts) | ("or", parts) |
("not", part) | TRUE | FALSE. The walk (check.py) tests TRUE and FALSE by identity: every
reader returns these two objects.
"""
from __future__ import annotations

from typing import Any

Formula = tuple[Any, ...]
TRUE: Formula = ("true",)
FALSE: Formula = ("false",)


def conjunction(parts: list[Formula]) -> Formula:
    """`and` of the parts (TRUE ones left out; one part is itself)."""
    parts = [p for p in parts if p is not TRUE]
    if not parts:
        return TRUE
    return parts[0] if len(parts) == 1 else ("and", tuple(parts))
