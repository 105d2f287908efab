from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from camus.compiler.logic.intervals import complement, contains, intersect, normalise, prefix_interval, to_prefixes

W = 6
spans = st.lists(st.tuples(st.integers(0, 63), st.integers(0, 63)).map(lambda t: (min(t), max(t))), max_size=5)


def members(s) -> set[int]:
    return {v for v in range(1 << W) if contains(s, v)}


@given(spans, spans)
def test_set_operations_match_brute_force(a, b) -> None:
    sa, sb = normalise(a), normalise(b)
    assert members(sa) == {v for lo, hi in a for v in range(lo, hi + 1)}
    assert members(intersect(sa, sb)) == members(sa) & members(sb)
    assert members(complement(sa, W)) == set(range(1 << W)) - members(sa)
    assert all(x[1] + 1 < y[0] for x, y in zip(sa, sa[1:]))     # disjoint, not touching


@given(st.integers(0, 63), st.integers(0, 63))
def test_to_prefixes_covers_exactly(x, y) -> None:
    lo, hi = min(x, y), max(x, y)
    covered = set()
    for value, plen in to_prefixes(lo, hi, W):
        a, b = prefix_interval(value, plen, W)
        assert a == value and not covered & set(range(a, b + 1))
        covered |= set(range(a, b + 1))
    assert covered == set(range(lo, hi + 1))
