"""The controller's subscriptions on disk (SQLite, WAL): a restart loses none of them, and ids
are never reused (AUTOINCREMENT), so a client from before a restart can never refresh or
delete somebody's new subscription. Expiry times are kept in wall-clock seconds."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


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

    def add(self, host: str, filter_text: str, ttl: float, expires_wall: float) -> int:
        cur = self.db.execute("INSERT INTO subscriptions (host, filter, ttl, expires) VALUES (?, ?, ?, ?)",
                              (host, filter_text, ttl, expires_wall))
        assert cur.lastrowid is not None
        return cur.lastrowid

    def refresh(self, sub_id: int, ttl: float, expires_wall: float) -> None:
        self.db.execute("UPDATE subscriptions SET ttl = ?, expires = ? WHERE id = ?", (ttl, expires_wall, sub_id))

    def remove(self, sub_ids: list[int]) -> None:
        self.db.executemany("DELETE FROM subscriptions WHERE id = ?", [(i,) for i in sub_ids])

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
        if self._checkpointer is not None:
            self.checkpoint()
            self._checkpointer.close()
        self.db.close()
