"""One controller process among several on a shared PostgreSQL store (shared_store.py).

Every process answers the API: it validates a change, writes it with the changes that arrived
meanwhile in one transaction (one in flight at a time: the next batch gathers while it commits),
and answers with the version the database gave it. One process at a time owns the devices (a
lease in the database, renewed every RENEW_S, lapsing LEASE_S after its owner stops renewing):
it follows the store's log into its Controller, compiles, pushes and expires lapsed
subscriptions, and publishes its status for the others (a client may ask any process whether its
version is installed). When the owner dies, the first process to find its lease lapsed takes the
devices over: it reads the live set and its version at one instant, builds its tables (a device
that already holds them is not pushed again), and follows the log from that version, so no
change is lost or applied twice. The lease's epoch is the P4Runtime election id the new owner
uses, so a switch takes writes from the newest owner only, whatever an old one still tries.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from typing import Callable

from camus.compiler.compile import CompileOptions
from camus.compiler.language.spec import Spec

from .checks import SubscriptionError, check_changes, sub_id_number
from .core import Controller
from .shared_store import ADD, REFRESH, REMOVE, Change, Done, Lease, SharedStore
from .store import StoredSubscription, StoreError
from .topology import Topology

log = logging.getLogger("camus.controller")
LEASE_S = 5.0          # an owner that stops renewing loses the devices this long after its last renewal
RENEW_S = 1.0          # how often the owner renews (and the others look for a lapsed lease)
EXPIRE_S = 1.0         # how often the owner removes lapsed subscriptions
PUBLISH_S = 0.05       # the owner's status is published at most this often (and when its held version grows)
STATUS_S = 0.02        # a status read from the database serves this long

Build = Callable[[tuple[int, list[StoredSubscription]], int], Controller]


class SharedFront:
    def __init__(self, store: SharedStore, topology: Topology, spec: Spec, options: CompileOptions, build: Build,
                 address: str, max_ttl: float = 3600.0, lease_s: float = LEASE_S) -> None:
        """`build(snapshot, epoch)`: a Controller for the live set at its version, its P4Runtime
        targets electing with `epoch` (called on each takeover, in a thread)."""
        self.store, self.topology, self.spec, self.options, self.build = store, topology, spec, options, build
        self.address, self.max_ttl, self.lease_s = address, max_ttl, lease_s
        self.me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.controller: Controller | None = None
        self.epoch = 0
        self.owner = Lease(False, 0, "", "")
        self.valid_until = 0.0               # monotonic: past it, an owner that could not renew stops pushing
        self.wake: asyncio.Event | None = None
        self._pending: list[tuple[list[Change], asyncio.Future]] = []
        self._writing = False
        self._expired = self._published = float("-inf")
        self._keeper: asyncio.Future | None = None      # the task keeping the lease
        self._building: asyncio.Future | None = None    # a takeover's build, while it runs
        self._published_held = -1
        self._publishing: asyncio.Future | None = None
        self._status: tuple[float, dict | None] = (float("-inf"), None)

    # -- changes, from any process ---------------------------------------------------------
    async def add(self, host: str, filter_text: str, ttl: float) -> Done:
        return (await self.change_many(host, await self.checked(host, [Change(ADD, host, filter=filter_text, ttl=ttl)])))[0]

    async def refresh(self, host: str, sub_id: str, ttl: float | None) -> Done:
        change = Change(REFRESH, host, sub_id_number(host, sub_id), ttl=ttl)
        return (await self.change_many(host, await self.checked(host, [change])))[0]

    async def remove(self, host: str, sub_id: str) -> Done:
        return (await self.change_many(host, [Change(REMOVE, host, sub_id_number(host, sub_id))]))[0]

    async def checked(self, host: str, changes: list[Change]) -> list[Change]:
        return await check_changes(self.topology, self.spec, self.max_ttl, host, changes)

    async def change_many(self, host: str, checked: list[Change]) -> list[Done]:
        """A host's changes as `checked` returns them, all or none: the database finds the ids
        (404 naming the first it does not find, when there is one)."""
        done = await self._submit(checked)
        if done is None:                         # someone else's id looks like nothing at all
            gone = [c.id for c in checked if c.op != ADD]
            raise SubscriptionError(f"no subscription {'s' + str(gone[0]) if len(gone) == 1 else 'of those named'} "
                                    f"for {host}{'' if len(gone) == 1 else ' (or named twice): none was changed'}", 404)
        return done

    async def listing(self, host: str) -> list[dict]:
        rows = await self.store.listing(host)
        wall = time.time()
        return [{"id": f"s{r.id}", "host": r.host, "filter": r.filter, "ttl": r.ttl,
                 "expires_in": round(max(0.0, r.expires_wall - wall), 3)} for r in rows]

    async def _submit(self, group: list[Change]) -> list[Done] | None:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((group, fut))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if not self._writing:                    # the next turn: the changes of this one go together
            self._writing = True
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))

    async def _flush(self) -> None:
        """Write what is pending, one transaction at a time, until nothing is."""
        try:
            while self._pending or self._expire_due():
                batch, self._pending = self._pending, []
                expire = self._expire_due()
                if expire:
                    self._expired = time.monotonic()
                try:
                    done = await self.store.write([c for c, _ in batch], time.time(), expire)
                except StoreError as exc:
                    log.error("%s", exc)
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), d in zip(batch, done):
                    if not fut.done():             # (its client went away)
                        fut.set_result(d)
                if self.wake is not None and self.controller is not None:
                    self.wake.set()                # the owner follows its own changes at once
        finally:
            self._writing = False

    def _expire_due(self) -> bool:
        return self.controller is not None and time.monotonic() - self._expired >= EXPIRE_S

    # -- the devices' owner ------------------------------------------------------------------
    def start(self, lock: asyncio.Lock) -> None:
        """Keep the lease from now on: a task of its own, so neither a push of seconds (a whole
        100K-rule set to an agent) nor a takeover's build holds a renewal up."""
        self._keeper = asyncio.ensure_future(self._keep_lease(lock))

    async def _keep_lease(self, lock: asyncio.Lock) -> None:
        while True:
            try:
                await self._renew(lock)
            except Exception:                       # never let the keeper die: the lease would lapse
                log.exception("renewing the devices' lease failed")
            await asyncio.sleep(RENEW_S)

    async def tick(self, lock: asyncio.Lock) -> Controller | None:
        """As the owner, follow the log into the Controller. Returns the Controller to compile
        and push with, or None (another process owns the devices, or ours is being built)."""
        c = self.controller
        if c is None:
            return None
        if time.monotonic() > self.valid_until:       # the database is out of reach: the lease may
            return None                               # have passed to another process, push nothing
        entries = await self.store.tail(c.version)
        if entries:
            async with lock:
                c.apply_logged(entries)
        if self._expire_due():
            self._kick()
        return c

    async def _renew(self, lock: asyncio.Lock) -> None:
        asked = time.monotonic()
        try:
            lease = await self.store.acquire(self.me, self.address, self.lease_s)
        except StoreError as exc:
            log.warning("could not renew the devices' lease: %s", exc)
            return
        self.owner = lease
        if not lease.owned:
            if self.controller is not None or self._building is not None:
                log.warning("the devices passed to %s (%s, epoch %d): no longer pushing", lease.owner,
                            lease.address, lease.epoch)
                async with lock:
                    self._let_go()
            return
        self.valid_until = asked + self.lease_s - RENEW_S
        if lease.epoch == self.epoch and (self.controller is not None or self._building is not None):
            return
        if self.controller is not None or self._building is not None:   # lapsed and taken back: afresh
            async with lock:
                self._let_go()
        self.epoch = lease.epoch
        self._building = asyncio.ensure_future(self._take_over(lease.epoch))

    async def _take_over(self, epoch: int) -> None:
        """The live set at one instant, its tables built (in a thread: seconds at 100K), then
        ours to push, unless the lease passed meanwhile."""
        t0 = time.monotonic()
        try:
            snapshot = await self.store.snapshot()
            c = await asyncio.to_thread(self.build, snapshot, epoch)
        except StoreError as exc:
            log.warning("could not read the subscriptions to take the devices over: %s", exc)
            self.epoch, self._building = 0, None              # the next renewal tries again
            return
        if self.epoch != epoch:                               # let go meanwhile
            return
        self.controller, self._building = c, None
        log.info("own the devices (epoch %d) from version %d: %d subscriptions, tables built in %.1f s",
                 epoch, snapshot[0], len(snapshot[1]), time.monotonic() - t0)
        if self.wake is not None:
            self.wake.set()

    def _let_go(self) -> None:
        c, self.controller = self.controller, None
        if self._building is not None:
            self._building.cancel()
            self._building = None
        self.epoch = 0
        for t in (c.targets.values() if c is not None else ()):
            close = getattr(t, "close", None)
            if close is not None:
                close()

    def may_push(self) -> bool:
        return self.controller is not None and time.monotonic() <= self.valid_until

    def publish(self) -> None:
        """The owner's status for the other processes, every PUBLISH_S while it changes (and
        every second anyway), written in the background: one write in flight at a time."""
        c = self.controller
        if c is None or (self._publishing is not None and not self._publishing.done()):
            return
        held, since = c.held_version(), time.monotonic() - self._published
        if since < PUBLISH_S or (held == self._published_held and since < 1.0):
            return
        doc = {**c.status(), "held_version": held, "owner": self.me, "owner_address": self.address}
        self._published, self._published_held = time.monotonic(), held
        self._publishing = asyncio.ensure_future(self._write_status(doc, c.version - 100_000))

    async def _write_status(self, doc: dict, keep_after: int) -> None:
        try:
            await self.store.publish(doc, keep_after)
        except StoreError as exc:
            log.warning("could not publish the status: %s", exc)

    async def owner_status(self) -> dict:
        """The owner's last published status (read from the database at most every STATUS_S)."""
        at, doc = self._status
        if doc is None or time.monotonic() - at >= STATUS_S:
            doc = (await self.store.owner_status()) or {}
            self._status = (time.monotonic(), doc)
        return {**doc, "answered_by": self.me, "owner_address": self.owner.address or doc.get("owner_address", "")}

    async def release(self, lock: asyncio.Lock) -> None:
        """A clean stop: the lease goes at once, so another process takes the devices now."""
        if self._keeper is not None:
            self._keeper.cancel()
        if self.controller is not None or self._building is not None:
            async with lock:
                self._let_go()
            try:
                await self.store.release(self.me)
            except StoreError as exc:
                log.warning("could not give the lease up (it lapses by itself): %s", exc)
        await self.store.close()
