"""HeapKeeper: what is alive is frozen every few seconds of churn and fully swept at most hourly."""
import gc
import weakref

import pytest

from camus.compiler.heap import HeapKeeper


@pytest.fixture
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


class Ring:
    other: "Ring"


def _dropped_cycle() -> weakref.ref:
    """A weak reference to one of two objects that only hold each other (cyclic garbage)."""
    a, b = Ring(), Ring()
    a.other, b.other = b, a
    return weakref.ref(a)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_tick_freezes_only_after_the_interval(thawed):
    clock = Clock()
    keeper = HeapKeeper(freeze_every_s=5, sweep_every_s=60, clock=clock)
    keep = [[i] for i in range(1000)]               # long-lived objects the collector tracks
    keeper.tick()
    assert gc.get_freeze_count() == 0               # not yet: freezing on every change would cost
    clock.t += 5
    keeper.tick()
    frozen = gc.get_freeze_count()
    assert frozen >= len(keep)
    keep.append([0])
    clock.t += 1
    keeper.tick()
    assert gc.get_freeze_count() == frozen          # within the interval: nothing


def test_young_cycles_are_collected_before_freezing(thawed):
    clock = Clock()
    keeper = HeapKeeper(freeze_every_s=5, sweep_every_s=60, clock=clock)

    alive = _dropped_cycle()                         # garbage, dropped before the tick
    clock.t += 5
    keeper.tick()
    assert alive() is None


def test_sweep_frees_cycles_that_died_while_frozen(thawed):
    clock = Clock()
    keeper = HeapKeeper(freeze_every_s=5, sweep_every_s=60, clock=clock)

    ring = [Ring(), Ring()]
    ring[0].other, ring[1].other = ring[1], ring[0]
    alive = weakref.ref(ring[0])
    clock.t += 5
    keeper.tick()                                    # frozen while alive
    del ring
    gc.collect()
    assert alive() is not None                       # a frozen cycle: the collector does not see it
    clock.t += 60                                    # the hourly (here: 60 s) sweep
    keeper.tick()
    assert alive() is None
