"""Windowed aggregates for state functions (count, sum, avg over tumbling windows; every(n): the
count modulo n). A window of 0 never resets.

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
    def __init__(self, windows_us: list[int], moduli: list[int] | None = None) -> None:
        self.windows_us = windows_us
        self.moduli = moduli or [0] * len(windows_us)
        self._w = [_Window() for _ in windows_us]

    def _current(self, var: int, now_us: int) -> _Window:
        w = self._w[var]
        idx = now_us // self.windows_us[var] if self.windows_us[var] else 0
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
        if fn == "every":
            return w.count % self.moduli[var]
        return w.total // w.count if w.count else 0
