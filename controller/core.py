"""The controller's state machine, without HTTP: subscriptions as soft state, routing and
per-device tables kept up to date change by change, and pushes that are retried until each device holds
exactly the tables it should.

A subscription belongs to one host (the token's), lives for its TTL unless refreshed, and is
validated alone before it is accepted (a bad filter changes nothing). Every change updates the
routing of its host's ports (live_routing.py) and so the rule lines of the devices on them;
switches recompile incrementally, XDP hosts get the changed lines (their agents compile). Each
such device gets its new tables through its push target (an XDP host's agent, a P4 switch's
P4Runtime server, or its entries directory). A switch whose P4Runtime session broke is pushed
again: read back, diff, write. A device whose push fails keeps its previous tables (the agent
swaps atomically or not at all) and is retried; `status()` reports it.
"""
from __future__ import annotations

import itertools
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol

from camus.compiler.compile import Compiled, CompileOptions
from camus.compiler.heap import settle_heap
from camus.compiler.language.spec import Spec

from .checks import SubscriptionError, check_subscription, numbered
from .devices import DeviceCompiler, DeviceTables, LineDelta
from .expiry import ExpiryWheel
from .live_routing import LineChanges, LiveRouting
from .routing import Routing
from .shared_store import ADD, REMOVE, Change, Logged
from .store import StoredSubscription, StoreError, SubscriptionStore
from .topology import Topology


class PushTarget(Protocol):
    def push(self, device: str, tables: DeviceTables) -> str: ...     # raises on failure


def _held(target: object, device: str) -> tuple[str, int] | None:
    """(digest, rules) a device holds now, when its target can tell."""
    current = getattr(target, "current", None)
    got = current(device) if current is not None else None
    return (got.digest, got.rules) if got is not None else None


@dataclass
class Batch:
    """The subscription changes up to `version`, routed: per device that changed, its rule
    lines added and removed and its new (digest, rule count); the switches' rules to compile."""
    version: int
    changes: dict[str, LineChanges]
    heads: dict[str, tuple[str, int]]
    switches: dict[str, tuple[str, frozenset[int]]]


@dataclass
class Subscription:
    id: str
    host: str
    filter: str
    ttl: float
    expires: float

    def view(self, now: float) -> dict:
        return {"id": self.id, "host": self.host, "filter": self.filter, "ttl": self.ttl,
                "expires_in": round(max(0.0, self.expires - now), 3)}


@dataclass
class DeviceState:
    desired: str = ""              # digest of the tables the device should hold
    applied: str = ""              # digest it acknowledged
    desired_version: int = 0       # the subscription state (Controller.version) `desired` is for
    applied_version: int = 0       # the newest subscription state the device is known to hold
    error: str = ""
    attempts: int = 0
    next_try: float = 0.0
    pushes: int = 0                # completed pushes (a re-synchronisation counts): status shows it
    quiet_until: float = 0.0       # no push before this (Controller.push_interval after the last one)
    since: Counter[str] = field(default_factory=Counter)   # net rule-line changes since `applied`

    @property
    def due(self) -> float:
        """When it may be pushed: after a failure's back-off and its push interval."""
        return max(self.next_try, self.quiet_until)


@dataclass
class Controller:
    topology: Topology
    spec: Spec
    policy: str = "mr"
    options: CompileOptions = field(default_factory=CompileOptions)
    targets: dict[str, PushTarget] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    max_ttl: float = 3600.0
    subs: dict[str, Subscription] = field(default_factory=dict)
    devices: dict[str, DeviceState] = field(default_factory=dict)
    tables: dict[str, DeviceTables] = field(default_factory=dict)
    store: SubscriptionStore | None = None          # persisted subscriptions (restarts lose none)
    restart_hold_s: float = 0.0                     # after a restart: no smaller tables for this long
    wall: Callable[[], float] = time.time           # the store's clock (expiry survives restarts)
    deferred: bool = False          # compile off the request path: a change only bumps `version`;
                                    # `take_batch` / `compile_batch` / `install` catch up (the service)
    loaded: tuple[int, list[StoredSubscription]] | None = None    # a shared store's snapshot: (its
                                    # version, the live set); the log's changes follow (`apply_logged`)
    push_interval: float = 0.0      # seconds from one push to a device to its next: changes that
                                    # come meanwhile go together (each push costs the device a fixed
                                    # part: its root table is rewritten); a push after a quiet spell
                                    # goes at once
    version: int = 0                # bumped by every change of the subscriptions
    compiled_version: int = 0       # the version the tables are compiled for
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.compiler = DeviceCompiler(self.spec, self.options)
        self.live = LiveRouting(self.topology, self.policy, track_exact=self.options.alpha > 1)
        self._events: list[tuple[str, str, int]] = []     # (host, filter, +1/-1) since the last batch
        self._expiry = ExpiryWheel()                       # when each subscription lapses
        rows = self.store.live(self.wall()) if self.store is not None else self.loaded[1] if self.loaded else []
        self._load(rows)
        if self.loaded is not None:
            self.version = self.loaded[0]
        self.recompute()
        if len(self.subs) > 10_000:
            settle_heap()              # a large set loaded: later collections need not walk it
        # After a restart the devices keep the tables they had. Those that already hold what
        # we computed need no push; for one TTL nobody gets fewer rules than it holds (a lost
        # database, or clients that have not resubscribed yet, must not turn subscribers dark).
        restarted = self.store.used() if self.store is not None else bool(self.loaded and self.loaded[0])
        self.hold_until = self.clock() + (self.restart_hold_s if restarted else 0.0)
        self.holding: dict[str, int] = {}
        if restarted:
            for d, t in self.targets.items():
                held = _held(t, d)
                if held is not None and d in self.devices:
                    if held[0] == self.devices[d].desired:
                        self.devices[d].applied = held[0]
                        self.devices[d].applied_version = self.version
                    self.holding[d] = held[1]

    # -- subscriptions ---------------------------------------------------------------------
    def add(self, host: str, filter_text: str, ttl: float) -> Subscription:
        return self._add_checked(host, check_subscription(self.topology, self.spec, self.max_ttl, host,
                                                          filter_text, ttl), ttl)

    def _add_checked(self, host: str, text: str, ttl: float) -> Subscription:
        now = self.clock()
        if self.store is not None:                   # ids from the database: never reused
            sub_id = f"s{self.store.add(host, text, ttl, self.wall() + ttl)}"
        else:
            sub_id = f"s{next(self._ids)}"
        sub = Subscription(sub_id, host, text, ttl, now + ttl)
        self.subs[sub.id] = sub
        self._due(sub)
        self._events.append((host, text, 1))
        self._changed()
        return sub

    def _load(self, rows: list[StoredSubscription]) -> None:
        """Stored subscriptions into memory (a restart, a shared store's snapshot)."""
        now, wall = self.clock(), self.wall()
        for r in rows:
            if r.host in self.topology.hosts:
                sub = self.subs[f"s{r.id}"] = Subscription(f"s{r.id}", r.host, r.filter, r.ttl,
                                                            now + (r.expires_wall - wall))
                self._due(sub)
                self._events.append((r.host, r.filter, 1))

    def apply_logged(self, entries: list[Logged]) -> None:
        """A shared store's committed changes, in version order (whichever controller made them):
        memory follows the database; `version` becomes the last one's."""
        now, wall = self.clock(), self.wall()
        for e in entries:
            if e.version <= self.version:
                continue
            sid, row = f"s{e.sub.id}", e.sub
            cur = self.subs.get(sid)
            if e.op == ADD and cur is None and row.host in self.topology.hosts:
                self._load([row])
            elif e.op == REMOVE and cur is not None:
                del self.subs[sid]
                self._expiry.discard(sid, cur.expires)
                self._events.append((cur.host, cur.filter, -1))
            elif cur is not None:                    # a TTL changed
                self._expiry.discard(sid, cur.expires)
                cur.ttl, cur.expires = row.ttl, now + (row.expires_wall - wall)
                self._due(cur)
            self.version = e.version
        if not self.deferred:
            self.recompute()

    def change_many(self, host: str, checked: list[Change]) -> list[tuple[Subscription, int]]:
        """A host's changes as `checks.check_changes` returns them, all or none: every id is
        found first (one the host does not have, or removed earlier in the list: SubscriptionError
        naming the change, nothing changed), then the changes are made in order, in one store
        savepoint (a write the database refuses undoes the others: StoreError). Each change's
        subscription and the version after it."""
        changes = checked
        removed: set[str] = set()
        for i, ch in enumerate(changes):
            if ch.op == ADD:
                continue
            sid = f"s{ch.id}"
            try:
                if sid in removed:
                    raise SubscriptionError(f"no subscription {sid!r} for {host} (removed earlier in the list)", 404)
                self._own(host, sid)
            except SubscriptionError as exc:
                raise numbered(exc, i, len(changes)) from None
            if ch.op == REMOVE:
                removed.add(sid)
        out: list[tuple[Subscription, int]] = []
        made: list[tuple[int, Subscription]] = []
        try:
            with self.store.together() if self.store is not None else nullcontext():
                for i, ch in enumerate(changes):
                    if ch.op == ADD:
                        sub = self._add_checked(host, ch.filter, float(ch.ttl or 0.0))
                    elif ch.op == REMOVE:
                        sub = self.remove(host, f"s{ch.id}")
                    else:
                        sub = self.refresh(host, f"s{ch.id}", ch.ttl)
                    made.append((ch.op, sub))
                    out.append((sub, self.version))
        except StoreError:
            self.undo(made)
            raise
        return out

    def undo(self, made: list[tuple[int, Subscription]]) -> None:
        """Take back in memory changes whose rows the database rolled back (added ones go, removed
        ones come back; a TTL stays as it was set)."""
        for op, sub in reversed(made):
            if op == ADD and sub.id in self.subs:
                self._drop(sub)
            elif op == REMOVE:
                self.restore(sub)

    def _own(self, host: str, sub_id: str) -> Subscription:
        sub = self.subs.get(sub_id)
        if sub is None or sub.host != host:            # someone else's looks like nothing at all
            raise SubscriptionError(f"no subscription {sub_id!r} for {host}", 404)
        return sub

    def remove(self, host: str, sub_id: str) -> Subscription:
        """Remove a subscription; returns it (to `restore` should its delete be rolled back)."""
        sub = self._own(host, sub_id)
        if self.store is not None:                   # first: a write the database refuses changes nothing
            self.store.remove([int(sub_id[1:])])
        self._drop(sub)
        return sub

    def forget(self, host: str, sub_id: str) -> None:
        """Remove a subscription from memory only: one whose row the database rolled back."""
        self._drop(self._own(host, sub_id))

    def restore(self, sub: Subscription) -> None:
        """Put back in memory a removed subscription whose delete the database rolled back (its
        row is still there): memory says what the database says."""
        if sub.id in self.subs:
            return
        self.subs[sub.id] = sub
        self._due(sub)
        self._events.append((sub.host, sub.filter, 1))
        self._changed()

    def _drop(self, sub: Subscription) -> None:
        del self.subs[sub.id]
        self._expiry.discard(sub.id, sub.expires)
        self._events.append((sub.host, sub.filter, -1))
        self._changed()

    def refresh(self, host: str, sub_id: str, ttl: float | None = None) -> Subscription:
        sub = self._own(host, sub_id)
        if ttl is not None:
            if not 0 < ttl <= self.max_ttl:
                raise SubscriptionError(f"ttl must be in (0, {self.max_ttl:g}] seconds")
        ttl = sub.ttl if ttl is None else ttl
        if self.store is not None:                   # first: a write the database refuses changes nothing
            self.store.refresh(int(sub_id[1:]), ttl, self.wall() + ttl)
        self._expiry.discard(sub_id, sub.expires)
        sub.ttl = ttl
        sub.expires = self.clock() + sub.ttl
        self._due(sub)
        return sub

    def subscriptions_of(self, host: str) -> list[dict]:
        now = self.clock()
        return [s.view(now) for s in self.subs.values() if s.host == host]

    def _due(self, sub: Subscription) -> None:
        self._expiry.add(sub.id, sub.expires)

    def expire(self) -> list[str]:
        gone = self._expiry.pop_due(self.clock(), lambda i: self.subs[i].expires)
        for i in gone:
            s = self.subs.pop(i)
            self._events.append((s.host, s.filter, -1))
        if gone and self.store is not None:
            try:
                self.store.remove([int(i[1:]) for i in gone])
            except StoreError:           # lapsed rows: the next start's `live()` drops them anyway
                pass
        if gone:
            self._changed()
        return gone

    # -- routing, compiling, pushing -------------------------------------------------------
    def _changed(self) -> None:
        self.version += 1
        if not self.deferred:
            self.recompute()

    @property
    def dirty(self) -> bool:
        return self.compiled_version < self.version

    @property
    def routing(self) -> Routing:
        """Port filters as of the last batch taken (`route()` on the subscriptions then)."""
        return self.live.view()

    def take_batch(self) -> Batch:
        """The changes since the last batch, applied to the live routing (taken under the
        caller's lock; cheap: each change touches its host's ports only). Switches whose rule
        set changed come with their rules text, to compile."""
        events, self._events = self._events, []
        for host, text, delta in events:
            self.live.change(host, text, delta)
        changes = self.live.take_changes()
        if not self.tables:                                     # the first batch: every device
            changes = {d: changes.get(d, LineChanges()) for d in self.live.devices}
        heads = {d: (self.live.digest(d), self.live.rule_count(d)) for d in changes}
        switches = {d: (self.live.rules(d), self.live.exact_indices(d)) for d in changes
                    if self.topology.kind(d) == "p4" and (d not in self.tables or self.tables[d].digest != heads[d][0])}
        return Batch(self.version, changes, heads, switches)

    def compile_batch(self, batch: Batch) -> dict[str, Compiled]:
        """The switches' tables for a batch: the slow part, safe outside the lock (one caller
        at a time; it owns the compiler's per-device state). XDP hosts compile themselves."""
        return {d: self.compiler.compile_device(d, "p4", text, exact) for d, (text, exact) in batch.switches.items()}

    def install(self, batch: Batch, compiled: dict[str, Compiled]) -> list[str]:
        """Make a batch's tables the desired ones; returns the devices whose tables changed."""
        self.compiled_version = batch.version
        changed = []
        for d, (dig, count) in batch.heads.items():
            st = self.devices.setdefault(d, DeviceState())
            if d in self.targets:                     # what it will need since what it holds
                for lines, k in ((batch.changes[d].added, 1), (batch.changes[d].removed, -1)):
                    for ln in lines:
                        st.since[ln] += k
                        if not st.since[ln]:
                            del st.since[ln]
            if d not in self.tables or self.tables[d].digest != dig:
                kind = self.topology.kind(d)
                self.tables[d] = DeviceTables(d, kind, dig, count, partial(self.live.rules, d), compiled.get(d),
                                              partial(self._compile_now, d, kind))
            if st.desired != dig:
                st.desired, st.attempts, st.next_try, st.error = dig, 0, 0.0, ""
                changed.append(d)
        for st in self.devices.values():
            st.desired_version = batch.version
            if st.applied == st.desired:              # unchanged, or changed back: it already holds
                st.applied_version = batch.version    # the tables of this version
        return changed

    def _compile_now(self, device: str, kind: str, rules: str) -> Compiled:
        """A device's tables compiled here when something asks for them (simulation, a
        switch directory): its current rule set."""
        return self.compiler.compile_device(device, kind, rules, self.live.exact_indices(device))

    def recompute(self) -> list[str]:
        """New routing and tables now; returns the devices whose tables changed."""
        batch = self.take_batch()
        return self.install(batch, self.compile_batch(batch))

    def held_back(self, device: str) -> bool:
        """Within the restart hold: would this push leave the device with fewer rules?"""
        if self.clock() >= self.hold_until or device not in self.holding or device not in self.tables:
            return False
        return self.tables[device].rule_count < self.holding[device]

    def resync_lost(self) -> list[str]:
        """Devices whose target lost its session since the last push (a switch that restarted
        may hold nothing): pushed again, which reads back what they hold and writes the difference."""
        out = []
        for d, t in self.targets.items():
            lost = getattr(t, "lost", None)
            st = self.devices.get(d)
            if lost is not None and st is not None and st.applied and lost(d):
                st.applied, st.error = "", "session lost: re-synchronising"
                out.append(d)
        return out

    def pending(self) -> list[str]:
        self.resync_lost()
        now = self.clock()
        return [d for d, st in sorted(self.devices.items())
                if st.desired != st.applied and d in self.targets and st.due <= now
                and not self.held_back(d)]

    def held_version(self) -> int:
        """The newest subscription state every device we push to holds (`version` when there
        are none): a change answered with version V is in every data plane once this is >= V."""
        held = [st.applied_version for d, st in self.devices.items() if d in self.targets]
        return min(held) if held else self.version

    def next_push_at(self) -> float | None:
        """When the earliest device waiting for its push interval or a retry may be pushed."""
        now = self.clock()
        waits = [st.due for d, st in self.devices.items() if st.desired != st.applied and d in self.targets]
        return min((at for at in waits if at > now), default=None)

    def push_one(self, device: str) -> bool:
        """Push the device's desired tables once; on failure back off (0.2 s doubling to 5 s)."""
        st, tables = self.devices[device], self.tables[device]
        digest, version = st.desired, st.desired_version
        started = self.clock()
        tables.delta = None
        if st.applied:                                 # what changed since the tables it holds
            tables.delta = LineDelta(st.applied, [ln for ln, n in st.since.items() for _ in range(n)],
                                     [ln for ln, n in st.since.items() for _ in range(-n)])
        try:
            self.targets[device].push(device, tables)
        except Exception as exc:                       # any failure: report, keep old tables, retry
            st.attempts += 1
            st.error = f"{type(exc).__name__}: {exc}"[:500]
            st.next_try = self.clock() + min(5.0, 0.2 * 2 ** (st.attempts - 1))
            return False
        st.applied_version = max(st.applied_version, version)
        if st.desired == digest:
            st.applied, st.error, st.attempts = digest, "", 0
            st.since.clear()
            st.pushes += 1
        st.quiet_until = started + self.push_interval
        return True

    def push_pending(self) -> dict[str, bool]:
        return {d: self.push_one(d) for d in self.pending()}

    def status(self) -> dict:
        """`version`: the subscription state now; a device's `applied_version`: the newest state
        it holds the tables of (a client waits until every pushed device reaches its change's)."""
        return {"policy": self.policy, "subscriptions": len(self.subs), "version": self.version,
                "compiled_version": self.compiled_version,
                "devices": {d: {"kind": self.topology.kind(d), "entries": self.tables[d].entries_known if d in self.tables else 0,
                                "rules": self.tables[d].rule_count if d in self.tables else 0,
                                "in_sync": st.desired == st.applied, "desired": st.desired, "applied": st.applied,
                                "applied_version": st.applied_version,
                                "error": st.error, "attempts": st.attempts, "pushes": st.pushes,
                                "push_target": d in self.targets}
                            for d, st in sorted(self.devices.items())}}
