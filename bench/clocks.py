"""Reading the offset between the wall clock the senders stamp messages with and the monotonic
clock BPF programs read (bpf_ktime_get_ns)."""
from __future__ import annotations

import time


def realtime_minus_monotonic_ns(tries: int = 50) -> int:
    """CLOCK_REALTIME (the senders' stamps) minus CLOCK_MONOTONIC (bpf_ktime_get_ns), read from
    the tightest of `tries` monotonic-realtime-monotonic brackets: one pair of reads can be split
    by a preemption of milliseconds on a loaded machine, which would skew every latency by as much
    (a copy measured as having arrived before it was sent lands in the overflow bucket)."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        m2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m2 - m1 < best[0]:
            best = (m2 - m1, r - (m1 + m2) // 2)
    assert best is not None
    return best[1]
