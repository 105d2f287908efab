"""The subscriptions on PostgreSQL, shared by any number of controller processes
(`controller serve --db postgresql://...`).

One truth in the database, three tables:
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

import threading
from dataclasses import dataclass
from typing import Any, Iterator
from contextlib import contextmanager

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
    """One database connection, used by one thread at a time; reopened after a failure."""

    def __init__(self, url: str) -> None:
        self.url, self.lock = url, threading.Lock()
        self.conn: Any = None

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        import psycopg
        with self.lock:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, connect_timeout=10)
                with self.conn.transaction():
                    yield self.conn.cursor()
            except psycopg.Error as exc:
                if self.conn is not None and self.conn.broken:
                    self.conn.close()
                    self.conn = None
                raise StoreError(f"the subscription database refused the change: {exc}".strip()) from None

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


class SharedStore:
    def __init__(self, url: str) -> None:
        try:
            import psycopg  # noqa: F401   said here rather than at the first request
        except ImportError:
            raise StoreError("--db postgresql:// needs psycopg 3 (pip install 'psycopg[binary]')") from None
        self.url = url
        self._writer, self._owner, self._other = _Connection(url), _Connection(url), _Connection(url)
        with self._other.cursor() as cur:            # several controllers may start at once
            cur.execute("SELECT pg_advisory_xact_lock(4242)")
            cur.execute(SCHEMA)

    # -- every controller ------------------------------------------------------------------
    def write(self, groups: list[list[Change]], now_wall: float, expire: bool = False) -> list[list[Done] | None]:
        """Apply groups of changes (and, `expire`, remove every subscription past its time) in
        one transaction. A group is all or nothing: one that names an id its host does not have
        (or no longer has, after an earlier change) is left out whole (None). Each change of the
        others gets the next version, in the order given."""
        with self._writer.cursor() as cur:
            base = cur.execute("UPDATE camus_counter SET version = version WHERE name = 'log' "
                               "RETURNING version").fetchone()[0]
            accepted = self._accepted(cur, groups)
            made = self._apply(cur, [c for g, ok in zip(groups, accepted) if ok for c in g], now_wall)
            lapsed = []
            if expire:
                lapsed = cur.execute("DELETE FROM camus_subscriptions WHERE expires <= %s "
                                     "RETURNING id, host, filter, ttl, expires", (now_wall,)).fetchall()
            logged: list[tuple[int, StoredSubscription]] = [(op, sub) for op, sub in made if sub is not None]
            logged += [(REMOVE, StoredSubscription(*r)) for r in sorted(lapsed)]
            if logged:
                cols = [list(col) for col in zip(*[(base + k + 1, op, s.id, s.host, s.filter, s.ttl, s.expires_wall)
                                                   for k, (op, s) in enumerate(logged)])]
                cur.execute("INSERT INTO camus_log SELECT * FROM unnest(%s::bigint[], %s::smallint[], %s::bigint[], "
                            "%s::text[], %s::text[], %s::float8[], %s::float8[])", cols)
                cur.execute("UPDATE camus_counter SET version = %s WHERE name = 'log'", (base + len(logged),))
                cur.execute("NOTIFY camus_log")
        out: list[list[Done] | None] = []
        version, done = base, iter(made)
        for g, ok in zip(groups, accepted):
            if not ok:
                out.append(None)
                continue
            answers = []
            for _ in g:
                _, sub = next(done)
                assert sub is not None              # (every id a group names was found)
                version += 1
                answers.append(Done(version, sub))
            out.append(answers)
        return out

    @staticmethod
    def _accepted(cur: Any, groups: list[list[Change]]) -> list[bool]:
        """Which groups find every id they name (by its host), in order: an earlier group's
        removal counts. (Every writer holds the counter row: nobody changes the rows meanwhile.)"""
        named = sorted({c.id for g in groups for c in g if c.op != ADD})
        exists = {(r[0], r[1]) for r in cur.execute("SELECT id, host FROM camus_subscriptions WHERE id = ANY(%s)",
                                                    (named,))} if named else set()
        out = []
        for g in groups:
            left, ok = set(exists), True
            for c in g:
                if c.op != ADD and (c.id, c.host) not in left:
                    ok = False
                    break
                if c.op == REMOVE:
                    left.discard((c.id, c.host))
            out.append(ok)
            if ok:
                exists = left
        return out

    def _apply(self, cur: Any, changes: list[Change], now: float) -> list[tuple[int, StoredSubscription | None]]:
        """The changes' rows, three statements whatever their number: inserts, TTL updates,
        deletes. A refresh after a removal of the same id (in this batch) finds nothing."""
        adds = [c for c in changes if c.op == ADD]
        ids = [r[0] for r in cur.execute("SELECT nextval('camus_subscription_ids') FROM generate_series(1, %s)",
                                         (len(adds),))] if adds else []
        fresh = [StoredSubscription(i, c.host, c.filter, float(c.ttl or 0.0), now + float(c.ttl or 0.0))
                 for i, c in zip(ids, adds)]
        if fresh:
            cur.execute("INSERT INTO camus_subscriptions SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], "
                        "%s::float8[], %s::float8[])",
                        [list(col) for col in zip(*[(s.id, s.host, s.filter, s.ttl, s.expires_wall) for s in fresh])])
        new = iter(fresh)
        ttls: dict[tuple[int, str], float | None] = {}     # the last refresh of an id before its removal wins
        removing: set[tuple[int, str]] = set()
        for c in changes:
            if c.op == REMOVE:
                removing.add((c.id, c.host))
            elif c.op == REFRESH and (c.id, c.host) not in removing:
                ttls[(c.id, c.host)] = c.ttl
        refreshed = {}
        if ttls:
            keys = list(ttls)
            rows = cur.execute(
                "UPDATE camus_subscriptions s SET ttl = coalesce(u.ttl, s.ttl), expires = %s + coalesce(u.ttl, s.ttl) "
                "FROM unnest(%s::bigint[], %s::text[], %s::float8[]) AS u(id, host, ttl) "
                "WHERE s.id = u.id AND s.host = u.host RETURNING s.id, s.host, s.filter, s.ttl, s.expires",
                (now, [k[0] for k in keys], [k[1] for k in keys], [ttls[k] for k in keys])).fetchall()
            refreshed = {(r[0], r[1]): StoredSubscription(*r) for r in rows}
        gone = {(c.id, c.host) for c in changes if c.op == REMOVE}
        removed = {}
        if gone:
            rows = cur.execute(
                "DELETE FROM camus_subscriptions s USING unnest(%s::bigint[], %s::text[]) AS u(id, host) "
                "WHERE s.id = u.id AND s.host = u.host RETURNING s.id, s.host, s.filter, s.ttl, s.expires",
                ([k[0] for k in gone], [k[1] for k in gone])).fetchall()
            removed = {(r[0], r[1]): StoredSubscription(*r) for r in rows}
        made: list[tuple[int, StoredSubscription | None]] = []
        dropped: set[tuple[int, str]] = set()
        for c in changes:
            key = (c.id, c.host)
            if c.op == ADD:
                made.append((ADD, next(new)))
            elif c.op == REFRESH:
                made.append((REFRESH, refreshed.get(key) if key not in dropped else None))
            else:
                sub = removed.get(key) if key not in dropped else None
                if sub is not None:
                    dropped.add(key)
                made.append((REMOVE, sub))
        return made

    def listing(self, host: str) -> list[StoredSubscription]:
        with self._other.cursor() as cur:
            rows = cur.execute("SELECT id, host, filter, ttl, expires FROM camus_subscriptions WHERE host = %s "
                               "ORDER BY id", (host,)).fetchall()
        return [StoredSubscription(*r) for r in rows]

    def acquire(self, me: str, address: str, seconds: float) -> Lease:
        """Take or renew the devices' lease for `seconds` (the database's clock): renewed while we
        hold it, taken when it lapsed (a new epoch); otherwise who holds it."""
        with self._other.cursor() as cur:
            row = cur.execute(
                "UPDATE camus_lease SET epoch = CASE WHEN owner = %(me)s THEN epoch ELSE epoch + 1 END, owner = %(me)s, "
                "address = %(addr)s, until = clock_timestamp() + make_interval(secs => %(s)s) "
                "WHERE name = %(name)s AND (owner = %(me)s OR until < clock_timestamp()) RETURNING epoch",
                {"me": me, "addr": address, "s": seconds, "name": LEASE}).fetchone()
            if row is not None:
                return Lease(True, int(row[0]), me, address)
            held = cur.execute("SELECT epoch, owner, address FROM camus_lease WHERE name = %s", (LEASE,)).fetchone()
        return Lease(False, int(held[0]), str(held[1]), str(held[2]))

    def release(self, me: str) -> None:
        """Give the lease up now (a clean stop): another controller takes the devices at once."""
        with self._other.cursor() as cur:
            cur.execute("UPDATE camus_lease SET until = '-infinity' WHERE name = %s AND owner = %s", (LEASE, me))

    def owner_status(self) -> dict | None:
        """The status the devices' owner published last (None before any)."""
        with self._other.cursor() as cur:
            row = cur.execute("SELECT doc FROM camus_status WHERE name = %s", (LEASE,)).fetchone()
        return row[0] if row else None

    # -- the owner of the devices ------------------------------------------------------------
    def snapshot(self) -> tuple[int, list[StoredSubscription]]:
        """The live set and the version it is at, read at one instant."""
        with self._owner.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            version = cur.execute("SELECT version FROM camus_counter WHERE name = 'log'").fetchone()[0]
            rows = cur.execute("SELECT id, host, filter, ttl, expires FROM camus_subscriptions ORDER BY id").fetchall()
        return int(version), [StoredSubscription(*r) for r in rows]

    def tail(self, after: int, limit: int = 100_000) -> list[Logged]:
        """The log's changes after version `after`, in order."""
        with self._owner.cursor() as cur:
            rows = cur.execute("SELECT version, op, id, host, filter, ttl, expires FROM camus_log WHERE version > %s "
                               "ORDER BY version LIMIT %s", (after, limit)).fetchall()
        return [Logged(r[0], r[1], StoredSubscription(*r[2:])) for r in rows]

    def publish(self, doc: dict, keep_after: int) -> None:
        """The owner's status for the other controllers; the log up to `keep_after` is dropped
        (a new owner starts from a snapshot, not from the log's beginning)."""
        from psycopg.types.json import Jsonb
        with self._owner.cursor() as cur:
            cur.execute("INSERT INTO camus_status VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
                        (LEASE, Jsonb(doc)))
            cur.execute("DELETE FROM camus_log WHERE version <= %s", (keep_after,))

    def close(self) -> None:
        for c in (self._writer, self._owner, self._other):
            c.close()
