"""Keeping the cyclic garbage collector off the change path of long-lived processes.

A process holding 100K subscriptions (the agent's live diagram, the controller's routing) has
millions of long-lived objects. CPython's full collection walks every tracked object that is
not frozen, and it runs whenever the survivors since the last one reach a quarter of the rest:
under a thousand changes a second that was a 0.5 s pause every ~10 s in the agent, the whole
p99 of "change to installed". Reference counting frees almost everything we drop (diagram
nodes, rule lines and table rows hold no cycles), so the collector only has to look at what is
new: move what is alive into the permanent generation after a large build (`settle_heap`), and
again every second under churn (`HeapKeeper.tick`: a collection of the young generations, then
the freeze, which moves the generations without walking them; a full collection of a few
seconds of 10,000 changes/s held the agent 100 ms). Objects frozen while alive that later die inside
a cycle are kept until the next full sweep (`HeapKeeper.sweep`: unfreeze and collect), at most
once an hour.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Callable


def settle_heap() -> None:
    """After a large build: collect the new objects and freeze what is alive, so later
    collections need not rescan millions of long-lived nodes (a first full collection took
    0.7 s at 100K subscriptions)."""
    gc.collect()
    gc.freeze()


@dataclass
class HeapKeeper:
    """Call `tick()` after each change and `settle()` after a whole rebuild."""
    freeze_every_s: float = 1.0
    sweep_every_s: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    _frozen_at: float = field(default=0.0, init=False)
    _swept_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._frozen_at = self._swept_at = self.clock()

    def tick(self) -> None:
        if self.clock() - self._swept_at >= self.sweep_every_s:
            self.sweep()
        elif self.clock() - self._frozen_at >= self.freeze_every_s:
            gc.collect(1)          # the young generations only: their cyclic garbage is freed ...
            gc.freeze()            # ... and what survives leaves the collector's walks (a move, no walk)
            self._frozen_at = self.clock()

    def settle(self) -> None:
        """Collect what is new and freeze what is alive (walks only what is not frozen)."""
        settle_heap()
        self._frozen_at = self.clock()

    def sweep(self) -> None:
        """Everything back under the collector, collected, frozen again: frees cycles that died
        while frozen (costs a full walk: ~0.5 s at 100K subscriptions)."""
        gc.unfreeze()
        self.settle()
        self._swept_at = self._frozen_at
