"""The controller's subscriptions on disk (SQLite, WAL): a restart loses none of them, and ids
are never reused (AUTOINCREMENT), so a client from before a restart can never refresh or
delete somebody's new subscription. Expiry times are kept in wall-clock seconds.

Each write is committed at once, or (`hold_commits`, the service) the writes of one turn of the
event loop share one transaction: under churn a commit's log writes are paid once for all the
changes that arrived together."""
from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class StoreError(Exception):
    """The database refused a write (locked by another process, disk full, I/O error)."""


@dataclass(frozen=True)
class StoredSubscription:
    id: int
    host: str
    filter: str
    ttl: float
    expires_wall: float


class SubscriptionStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._checkpointer: sqlite3.Connection | None = None
        self.db.execute("CREATE TABLE IF NOT EXISTS subscriptions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                        "host TEXT NOT NULL, filter TEXT NOT NULL, ttl REAL NOT NULL, expires REAL NOT NULL)")
        # Ids are handed out here (an id is known before its row is committed); past every id
        # the database ever gave, so none is reused (an explicit id updates AUTOINCREMENT's record).
        seq = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'subscriptions'").fetchone()
        top = self.db.execute("SELECT max(id) FROM subscriptions").fetchone()
        self._next_id = max(seq[0] if seq else 0, top[0] or 0) + 1
        self._on_open: Callable[[], None] | None = None

    def add(self, host: str, filter_text: str, ttl: float, expires_wall: float) -> int:
        sub_id, self._next_id = self._next_id, self._next_id + 1
        self._write("INSERT INTO subscriptions (id, host, filter, ttl, expires) VALUES (?, ?, ?, ?, ?)",
                    [(sub_id, host, filter_text, ttl, expires_wall)])
        return sub_id

    def refresh(self, sub_id: int, ttl: float, expires_wall: float) -> None:
        self._write("UPDATE subscriptions SET ttl = ?, expires = ? WHERE id = ?", [(ttl, expires_wall, sub_id)])

    def remove(self, sub_ids: list[int]) -> None:
        self._write("DELETE FROM subscriptions WHERE id = ?", [(i,) for i in sub_ids])

    def _write(self, sql: str, rows: list[tuple]) -> None:
        """One write: committed now, or (`hold_commits`) into the open transaction, which
        `commit()` ends. A write the database refuses raises StoreError and changes nothing."""
        try:
            if self._on_open is not None and not self.db.in_transaction:
                self.db.execute("BEGIN IMMEDIATE")
                self._on_open()
            self.db.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise StoreError(f"the subscription database refused the change: {exc}") from None

    @contextmanager
    def together(self) -> Iterator[None]:
        """The writes made inside are kept all or none (a savepoint: inside the open transaction
        of `hold_commits`, else a transaction of its own); StoreError if the database refuses."""
        try:
            if self._on_open is not None and not self.db.in_transaction:
                self.db.execute("BEGIN IMMEDIATE")
                self._on_open()
            self.db.execute("SAVEPOINT together")
        except sqlite3.Error as exc:
            raise StoreError(f"the subscription database refused the change: {exc}") from None
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK TO together")
            self.db.execute("RELEASE together")
            raise
        try:
            self.db.execute("RELEASE together")
        except sqlite3.Error as exc:
            raise StoreError(f"the subscription database refused the change: {exc}") from None

    def hold_commits(self, on_open: Callable[[], None] | None) -> None:
        """Writes from now on go into one open transaction until `commit()`; `on_open()` is
        called when a write opens one (the service commits once per turn of its event loop:
        the changes answered in one turn share a commit); None: each write commits at once again."""
        self._on_open = on_open

    def commit(self) -> StoreError | None:
        """End the open transaction: None when its writes are in, else the error (rolled back)."""
        if not self.db.in_transaction:
            return None
        try:
            self.db.execute("COMMIT")
            return None
        except sqlite3.Error as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            return StoreError(f"the subscription database refused the change: {exc}")

    def live(self, now_wall: float) -> list[StoredSubscription]:
        """Every subscription still within its TTL (lapsed ones are deleted on the way)."""
        self.db.execute("DELETE FROM subscriptions WHERE expires <= ?", (now_wall,))
        rows = self.db.execute("SELECT id, host, filter, ttl, expires FROM subscriptions ORDER BY id").fetchall()
        return [StoredSubscription(*r) for r in rows]

    def used(self) -> bool:
        """Whether this database ever held a subscription (a start on it is a restart)."""
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'subscriptions'").fetchone()
        return bool(row and row[0])

    def checkpoint_elsewhere(self) -> None:
        """Stop checkpointing the write-ahead log on commit: a commit that crossed SQLite's
        threshold copied the log into the database and synced it, 8-14 ms on this VM, in the
        request that committed, so every request queued behind it waited too (the API's tail
        under churn). The caller runs `checkpoint()` in another thread instead (the service's
        housekeeping: its own connection, so the sync holds neither the event loop nor this one)."""
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    def checkpoint(self) -> None:
        """Copy the log into the database without blocking writers (PASSIVE)."""
        if self._checkpointer is not None:
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self.commit()
        if self._checkpointer is not None:
            self.checkpoint()
            self._checkpointer.close()
        self.db.close()
