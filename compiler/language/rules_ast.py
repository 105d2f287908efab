"""Syntax tree of subscription rules, as written (before types and normalisation)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(slots=True)
class Attr:
    name: str          # `stock`, `add_order.stock`
    offset: int        # character offset in the source, for error positions


@dataclass(slots=True)
class StateFn:
    fn: str            # count | sum | avg | every
    attr: Attr         # every(n) reads no field: its attr has an empty name
    counter: str | None
    offset: int
    modulus: int = 0   # every(n): n (the relation is always `== 0`: the n-th, 2n-th ... match)


@dataclass(slots=True)
class Const:
    kind: str          # int | str | word | ipv4 | ipv6 | mac
    value: int | str
    prefix_len: int | None
    text: str
    offset: int


@dataclass(slots=True)
class Rel:
    left: Union[Attr, StateFn]
    op: str            # == != < <= > >= prefix   (`=` is read as ==)
    right: Const
    offset: int


@dataclass(slots=True)
class Not:
    arg: "Filter"
    offset: int


@dataclass(slots=True)
class And:
    args: tuple["Filter", ...]


@dataclass(slots=True)
class Or:
    args: tuple["Filter", ...]


@dataclass(slots=True)
class TrueFilter:
    offset: int


Filter = Union[Rel, Not, And, Or, TrueFilter]


@dataclass(slots=True)
class Action:
    name: str                  # fwd | drop | a custom action name
    args: tuple[Const, ...]
    offset: int


@dataclass(slots=True)
class Rule:
    filter: Filter
    actions: tuple[Action, ...]
    offset: int                # where the rule starts
    index: int                 # 0-based rule number in its file
