"""Windowed aggregates for state functions (count, sum, avg over tumbling windows).

Shared by the reference interpreter and the direct filter evaluator: on each message, the
variables whose guard holds are updated first, then predicates read the current window.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Window:
    index: int = -1
    count: int = 0
    total: int = 0


class StateStore:
    def __init__(self, windows_us: list[int]) -> None:
        self.windows_us = windows_us
        self._w = [_Window() for _ in windows_us]

    def _current(self, var: int, now_us: int) -> _Window:
        w = self._w[var]
        idx = now_us // self.windows_us[var]
        if idx != w.index:
            w.index, w.count, w.total = idx, 0, 0
        return w

    def update(self, var: int, value: int, now_us: int) -> None:
        w = self._current(var, now_us)
        w.count += 1
        w.total = (w.total + value) & 0xFFFFFFFFFFFFFFFF

    def read(self, var: int, fn: str, now_us: int) -> int:
        w = self._current(var, now_us)
        if fn == "count":
            return w.count
        if fn == "sum":
            return w.total
        return w.total // w.count if w.count else 0
