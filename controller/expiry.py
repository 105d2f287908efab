"""When subscriptions lapse, kept in one-second buckets: memory follows the live subscriptions.

A heap of (expires, id) notes with stale ones skipped held a note for every subscribe and
refresh until it came up or the heap was rebuilt (at twice the live set): under churn that is
up to a second copy of the live set, and each rebuild stalls the event loop. Here a
subscription sits in the bucket of the whole second it expires in; a removal or refresh takes
it out at once; expiry pops only the buckets that are due (the last one member by member).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable


class ExpiryWheel:
    def __init__(self) -> None:
        self._buckets: dict[int, set[str]] = {}    # whole second -> ids expiring within it
        self._seconds: list[int] = []              # heap of the buckets' seconds

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    def add(self, sub_id: str, expires: float) -> None:
        k = math.floor(expires)
        bucket = self._buckets.get(k)
        if bucket is None:
            bucket = self._buckets[k] = set()
            heapq.heappush(self._seconds, k)
        bucket.add(sub_id)

    def discard(self, sub_id: str, expires: float) -> None:
        bucket = self._buckets.get(math.floor(expires))
        if bucket is not None:
            bucket.discard(sub_id)                 # an empty bucket goes when its second comes up

    def pop_due(self, now: float, expires_of: Callable[[str], float]) -> list[str]:
        """The ids whose expiry (`expires_of(id)`) is at or before `now`, taken out."""
        out: list[str] = []
        while self._seconds and self._seconds[0] <= now:
            k = self._seconds[0]
            bucket = self._buckets[k]
            if k + 1 <= now:                       # the whole second has passed
                heapq.heappop(self._seconds)
                del self._buckets[k]
                out.extend(sorted(bucket))
                continue
            due = sorted(i for i in bucket if expires_of(i) <= now)
            bucket.difference_update(due)
            out.extend(due)
            break
        return out
