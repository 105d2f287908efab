"""The expiry wheel: what lapses, exactly when, and nothing kept for removed or refreshed
subscriptions (memory follows the live set, not the changes ever made)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from camus.controller.expiry import ExpiryWheel

OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "refresh", "tick"]), st.integers(0, 30),
                         st.floats(0, 20, allow_nan=False)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_the_wheel_expires_exactly_what_a_scan_of_the_live_set_would(ops) -> None:
    wheel, live, now = ExpiryWheel(), {}, 0.0
    for op, k, x in ops:
        i = f"s{k}"
        if op == "add" and i not in live:
            live[i] = now + x
            wheel.add(i, live[i])
        elif op in ("remove", "refresh") and i in live:
            wheel.discard(i, live[i])
            if op == "refresh":
                live[i] = now + x
                wheel.add(i, live[i])
            else:
                del live[i]
        elif op == "tick":
            now += x / 4
            got = wheel.pop_due(now, live.__getitem__)
            want = sorted(j for j, e in live.items() if e <= now)
            assert sorted(got) == want
            for j in got:
                del live[j]
        assert len(wheel) == len(live)


def test_churn_leaves_no_notes_behind() -> None:
    wheel = ExpiryWheel()
    for n in range(100_000):                       # subscribe, unsubscribe, over and over
        wheel.add(f"s{n}", 600.0 + n % 7)
        if n >= 10:
            wheel.discard(f"s{n - 10}", 600.0 + (n - 10) % 7)
    assert len(wheel) == 10 and len(wheel._buckets) <= 7
