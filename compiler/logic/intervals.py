"""Sets of unsigned integers as sorted, disjoint, inclusive intervals.

Every predicate on a field (equality, comparison, string or address prefix, their negations)
becomes an interval set over the field's domain [0, 2**width - 1]; strings and addresses are
big-endian integers, so prefixes are intervals too. The decision-diagram builder only ever sees
interval sets.
"""
from __future__ import annotations

Interval = tuple[int, int]  # inclusive bounds
IntervalSet = tuple[Interval, ...]


def normalise(intervals: list[Interval]) -> IntervalSet:
    """Sort and merge overlapping or touching intervals; drop empty ones."""
    spans = sorted((lo, hi) for lo, hi in intervals if lo <= hi)
    merged: list[Interval] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def full(width: int) -> IntervalSet:
    return ((0, (1 << width) - 1),)


def complement(s: IntervalSet, width: int) -> IntervalSet:
    top = (1 << width) - 1
    out: list[Interval] = []
    nxt = 0
    for lo, hi in s:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= top:
        out.append((nxt, top))
    return tuple(out)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def contains(s: IntervalSet, value: int) -> bool:
    for lo, hi in s:
        if lo <= value <= hi:
            return True
        if value < lo:
            return False
    return False


def prefix_interval(value: int, prefix_len: int, width: int) -> Interval:
    """The interval of all `width`-bit values whose top `prefix_len` bits equal value's."""
    free = width - prefix_len
    lo = (value >> free) << free
    return (lo, lo | ((1 << free) - 1))


def to_prefixes(lo: int, hi: int, width: int) -> list[tuple[int, int]]:
    """Cover [lo, hi] exactly with the fewest aligned prefixes, as (value, prefix_len)."""
    out: list[tuple[int, int]] = []
    while lo <= hi:
        size = lo & -lo if lo else 1 << width
        while size > hi - lo + 1:
            size >>= 1
        out.append((lo, width - size.bit_length() + 1))
        lo += size
    return out
