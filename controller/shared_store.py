"""The subscriptions on PostgreSQL, shared by any number of controller processes
(`controller serve --db postgresql://...`).

One truth in the database:
- `camus_subscriptions`: the live set (id, host, filter, ttl, expires in wall-clock seconds);
- `camus_log`: every change in the order it committed, numbered by the subscription-state
  version (an add, a removal, a TTL change); the controller that owns the devices follows it;
- `camus_counter` (the log's last version) and `camus_lease` (who owns the devices, until when,
  and the lease's epoch: P4Runtime's election id, so a switch refuses a deposed owner's writes).

Ids come from a sequence: never reused, whichever process asks. A write transaction first takes
the counter row's lock (`UPDATE ... RETURNING`), so transactions that change the log commit one
after the other in version order: a reader of the log never sees version N+1 without version N.
Each process writes the changes that arrived together in one transaction (group commit: see
`write`), so the lock is taken once per batch, not per change.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterator

from .store import StoredSubscription, StoreError

ADD, REFRESH, REMOVE = 1, 0, -1          # a change's kind, as the log keeps it
LEASE = "devices"

SCHEMA = """
CREATE TABLE IF NOT EXISTS camus_subscriptions (
    id bigint PRIMARY KEY, host text NOT NULL, filter text NOT NULL,
    ttl double precision NOT NULL, expires double precision NOT NULL);
CREATE INDEX IF NOT EXISTS camus_subscriptions_expires ON camus_subscriptions (expires);
CREATE INDEX IF NOT EXISTS camus_subscriptions_host ON camus_subscriptions (host);
CREATE SEQUENCE IF NOT EXISTS camus_subscription_ids;
CREATE TABLE IF NOT EXISTS camus_log (
    version bigint PRIMARY KEY, op smallint NOT NULL, id bigint NOT NULL, host text NOT NULL,
    filter text NOT NULL, ttl double precision NOT NULL, expires double precision NOT NULL);
CREATE TABLE IF NOT EXISTS camus_counter (name text PRIMARY KEY, version bigint NOT NULL);
INSERT INTO camus_counter VALUES ('log', 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS camus_lease (
    name text PRIMARY KEY, owner text NOT NULL DEFAULT '', address text NOT NULL DEFAULT '',
    epoch bigint NOT NULL DEFAULT 0, until timestamptz NOT NULL DEFAULT '-infinity');
INSERT INTO camus_lease (name) VALUES ('devices') ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS camus_status (name text PRIMARY KEY, doc jsonb NOT NULL);
"""


@dataclass(frozen=True)
class Change:
    """One requested change: add (host, filter, ttl), refresh (id, host, ttl or None: keep it),
    remove (id, host). A refresh or removal names the host: another host's id is not found."""
    op: int
    host: str
    id: int = 0
    filter: str = ""
    ttl: float | None = None


@dataclass(frozen=True)
class Done:
    """A change's outcome: the version it made, and the subscription as it is after it (as it
    was, for a removal)."""
    version: int
    sub: StoredSubscription


@dataclass(frozen=True)
class Logged:
    version: int
    op: int
    sub: StoredSubscription


@dataclass(frozen=True)
class Lease:
    owned: bool
    epoch: int
    owner: str
    address: str


class _Connection:
    """One database connection on the event loop (psycopg's asyncio connection: no thread, so no
    wait for the interpreter lock between round trips), one transaction at a time; reopened
    after a failure."""

    def __init__(self, url: str) -> None:
        self.url, self.lock = url, asyncio.Lock()
        self.conn: Any = None

    @asynccontextmanager
    async def cursor(self) -> AsyncIterator[Any]:
        import psycopg
        async with self.lock:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=10)
                async with self.conn.transaction():
                    yield self.conn.cursor()
            except psycopg.Error as exc:
                if self.conn is not None and self.conn.broken:
                    await self.conn.close()
                    self.conn = None
                raise StoreError(f"the subscription database refused the change: {exc}".strip()) from None

    async def close(self) -> None:
        async with self.lock:
            if self.conn is not None:
                await self.conn.close()
                self.conn = None


class SharedStore:
    def __init__(self, url: str) -> None:
        """Checks the database and makes the tables (at once, before serving); the connections
        the controller uses open on its event loop, at first use."""
        try:
            import psycopg
        except ImportError:
            raise StoreError("--db postgresql:// needs psycopg 3 (pip install 'psycopg[binary]')") from None
        self.url = url
        self._writer, self._owner, self._other = _Connection(url), _Connection(url), _Connection(url)
        try:
            with psycopg.connect(url, connect_timeout=10) as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(4242)")      # several controllers may start at once
                conn.execute(SCHEMA)
        except psycopg.Error as exc:
            raise StoreError(f"cannot use the subscription database: {exc}".strip()) from None

    # -- every controller ------------------------------------------------------------------
    async def write(self, groups: list[list[Change]], now_wall: float, expire: bool = False) -> list[list[Done] | None]:
        """Apply groups of changes (and, `expire`, remove every subscription past its time) in
        one transaction. A group is all or none: one that names an id its host does not have
        (or no longer has, after an earlier change) is left out whole (None). Each change of the
        others gets the next version, in the order given.

        Four round trips to the database whatever the number of changes: the log's lock; the
        rows named and new ids (pipelined); every write (pipelined); the commit. What the changes
        do is worked out here in between, on rows nobody else can change meanwhile."""
        named = sorted({c.id for g in groups for c in g if c.op != ADD})
        adds = sum(c.op == ADD for g in groups for c in g)
        async with self._writer.cursor() as cur:
            base = (await _one(cur, "UPDATE camus_counter SET version = version WHERE name = 'log' RETURNING version"))[0]
            conn = cur.connection
            rows_cur, ids_cur, lapsed_cur = conn.cursor(), conn.cursor(), conn.cursor()
            async with conn.pipeline():
                await rows_cur.execute("SELECT id, host, filter, ttl, expires FROM camus_subscriptions "
                                       "WHERE id = ANY(%s)", (named,))
                await ids_cur.execute("SELECT nextval('camus_subscription_ids') FROM generate_series(1, %s)", (adds,))
                if expire:
                    await lapsed_cur.execute("SELECT id, host, filter, ttl, expires FROM camus_subscriptions "
                                             "WHERE expires <= %s ORDER BY id", (now_wall,))
            rows: dict[int, StoredSubscription | None] = {r[0]: StoredSubscription(*r) for r in await rows_cur.fetchall()}
            before = dict(rows)
            new_ids = iter([r[0] for r in await ids_cur.fetchall()])
            out, logged = self._plan(groups, rows, new_ids, now_wall)
            for r in (await lapsed_cur.fetchall() if expire else []):
                sub = rows[r[0]] if r[0] in rows else StoredSubscription(*r)     # (as this write left it)
                if sub is not None and sub.expires_wall <= now_wall:
                    before.setdefault(sub.id, sub)
                    rows[sub.id] = None
                    logged.append((REMOVE, sub))
            async with conn.pipeline():
                await self._store_rows(cur, before, rows)
                if logged:
                    cols = [list(col) for col in zip(*[(base + k + 1, op, s.id, s.host, s.filter, s.ttl, s.expires_wall)
                                                       for k, (op, s) in enumerate(logged)])]
                    await cur.execute("INSERT INTO camus_log SELECT * FROM unnest(%s::bigint[], %s::smallint[], "
                                      "%s::bigint[], %s::text[], %s::text[], %s::float8[], %s::float8[])", cols)
                    await cur.execute("UPDATE camus_counter SET version = %s WHERE name = 'log'", (base + len(logged),))
                    await cur.execute("NOTIFY camus_log")
        return [None if g is None else [Done(base + v, sub) for v, sub in g] for g in out]

    @staticmethod
    def _plan(groups: list[list[Change]], rows: dict[int, StoredSubscription | None], new_ids: Iterator[int],
              now: float) -> tuple[list[list[tuple[int, StoredSubscription]] | None], list[tuple[int, StoredSubscription]]]:
        """What the groups do to `rows` (id -> row, None once removed; updated in place), in
        order: per group None (an id not found) or its changes' (version offset, row); and the
        log's entries. (Every writer holds the log's lock: the rows read are the rows.)"""
        out: list[list[tuple[int, StoredSubscription]] | None] = []
        logged: list[tuple[int, StoredSubscription]] = []
        for g in groups:
            trial = dict(rows)
            made: list[tuple[int, StoredSubscription]] = []
            for c in g:
                if c.op == ADD:
                    ttl = float(c.ttl or 0.0)
                    sub = StoredSubscription(next(new_ids), c.host, c.filter, ttl, now + ttl)
                    trial[sub.id] = sub
                else:
                    cur = trial.get(c.id)
                    if cur is None or cur.host != c.host:
                        made = []
                        break
                    if c.op == REMOVE:
                        sub, trial[c.id] = cur, None
                    else:
                        ttl = cur.ttl if c.ttl is None else float(c.ttl)
                        sub = trial[c.id] = StoredSubscription(cur.id, cur.host, cur.filter, ttl, now + ttl)
                made.append((c.op, sub))
            if len(made) != len(g):
                out.append(None)
                continue
            rows.clear()
            rows.update(trial)
            out.append([(len(logged) + k + 1, sub) for k, (_, sub) in enumerate(made)])
            logged += made
        return out, logged

    @staticmethod
    async def _store_rows(cur: Any, before: dict[int, StoredSubscription | None],
                          after: dict[int, StoredSubscription | None]) -> None:
        """The rows as `after` has them: inserted, updated (TTL) or deleted, a statement each."""
        fresh = [s for i, s in after.items() if s is not None and i not in before]
        changed = [s for i, s in after.items() if s is not None and i in before and before[i] != s]
        gone = [i for i, s in after.items() if s is None and before.get(i) is not None]
        if fresh:
            await cur.execute("INSERT INTO camus_subscriptions SELECT * FROM unnest(%s::bigint[], %s::text[], "
                              "%s::text[], %s::float8[], %s::float8[])",
                              [list(col) for col in zip(*[(s.id, s.host, s.filter, s.ttl, s.expires_wall) for s in fresh])])
        if changed:
            await cur.execute("UPDATE camus_subscriptions s SET ttl = u.ttl, expires = u.expires FROM "
                              "unnest(%s::bigint[], %s::float8[], %s::float8[]) AS u(id, ttl, expires) WHERE s.id = u.id",
                              [list(col) for col in zip(*[(s.id, s.ttl, s.expires_wall) for s in changed])])
        if gone:
            await cur.execute("DELETE FROM camus_subscriptions WHERE id = ANY(%s)", (gone,))

    async def listing(self, host: str) -> list[StoredSubscription]:
        async with self._other.cursor() as cur:
            rows = await _all(cur, "SELECT id, host, filter, ttl, expires FROM camus_subscriptions WHERE host = %s "
                                   "ORDER BY id", (host,))
        return [StoredSubscription(*r) for r in rows]

    async def acquire(self, me: str, address: str, seconds: float) -> Lease:
        """Take or renew the devices' lease for `seconds` (the database's clock): renewed while we
        hold it, taken when it lapsed (a new epoch); otherwise who holds it."""
        async with self._other.cursor() as cur:
            row = await _one(
                cur, "UPDATE camus_lease SET epoch = CASE WHEN owner = %(me)s THEN epoch ELSE epoch + 1 END, "
                "owner = %(me)s, address = %(addr)s, until = clock_timestamp() + make_interval(secs => %(s)s) "
                "WHERE name = %(name)s AND (owner = %(me)s OR until < clock_timestamp()) RETURNING epoch",
                {"me": me, "addr": address, "s": seconds, "name": LEASE})
            if row is not None:
                return Lease(True, int(row[0]), me, address)
            held = await _one(cur, "SELECT epoch, owner, address FROM camus_lease WHERE name = %s", (LEASE,))
        return Lease(False, int(held[0]), str(held[1]), str(held[2]))

    async def release(self, me: str) -> None:
        """Give the lease up now (a clean stop): another controller takes the devices at once."""
        async with self._other.cursor() as cur:
            await cur.execute("UPDATE camus_lease SET until = '-infinity' WHERE name = %s AND owner = %s", (LEASE, me))

    async def owner_status(self) -> dict | None:
        """The status the devices' owner published last (None before any)."""
        async with self._other.cursor() as cur:
            row = await _one(cur, "SELECT doc FROM camus_status WHERE name = %s", (LEASE,))
        return row[0] if row else None

    # -- the owner of the devices ------------------------------------------------------------
    async def snapshot(self) -> tuple[int, list[StoredSubscription]]:
        """The live set and the version it is at, read at one instant."""
        async with self._owner.cursor() as cur:
            await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            version = (await _one(cur, "SELECT version FROM camus_counter WHERE name = 'log'"))[0]
            rows = await _all(cur, "SELECT id, host, filter, ttl, expires FROM camus_subscriptions ORDER BY id")
        return int(version), [StoredSubscription(*r) for r in rows]

    async def tail(self, after: int, limit: int = 100_000) -> list[Logged]:
        """The log's changes after version `after`, in order."""
        async with self._owner.cursor() as cur:
            rows = await _all(cur, "SELECT version, op, id, host, filter, ttl, expires FROM camus_log "
                                   "WHERE version > %s ORDER BY version LIMIT %s", (after, limit))
        return [Logged(r[0], r[1], StoredSubscription(*r[2:])) for r in rows]

    async def publish(self, doc: dict, keep_after: int) -> None:
        """The owner's status for the other controllers; the log up to `keep_after` is dropped
        (a new owner starts from a snapshot, not from the log's beginning)."""
        from psycopg.types.json import Jsonb
        async with self._owner.cursor() as cur:
            await cur.execute("INSERT INTO camus_status VALUES (%s, %s) ON CONFLICT (name) DO UPDATE "
                              "SET doc = excluded.doc", (LEASE, Jsonb(doc)))
            await cur.execute("DELETE FROM camus_log WHERE version <= %s", (keep_after,))

    async def close(self) -> None:
        for c in (self._writer, self._owner, self._other):
            await c.close()


async def _one(cur: Any, sql: str, params: Any = None) -> Any:
    await cur.execute(sql, params)
    return await cur.fetchone()


async def _all(cur: Any, sql: str, params: Any = None) -> list[Any]:
    await cur.execute(sql, params)
    return list(await cur.fetchall())
