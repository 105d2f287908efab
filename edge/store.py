"""What the edge broker keeps across a restart or a kill -9 (`camus-xdp edge --persistence DIR`,
mosquitto's `persistence true` + `persistence_location`): retained messages, and persistent
sessions (clean session 0, or an MQTT 5 session expiry) with their subscriptions and the QoS 1/2
publications they are owed, queued or in flight, MQTT 5 properties and expiry included (an MQTT 5
session's expiry interval counts again from the restart).

One SQLite database in write-ahead-log mode, DIR/camus-edge.db. A change is written as it
happens, inside a transaction the broker commits before it acknowledges what caused it (a
publisher's PUBACK or PUBREC, a SUBACK) and after each burst of copies from the XDP broker: an
edge killed at any point finds, after restart, every retained message and owed publication it
had acknowledged. Synchronous mode NORMAL: a committed transaction survives the process (kill
-9); a power cut may lose the last ones. Bounded by what the broker holds: the retained limits
and each session's queue and in-flight window.

A publication still travelling through the XDP broker when the edge dies is in the network, not
in any store (the publisher's PUBACK was sent when the edge handed it on). After a restart an
owed QoS 2 publication is sent again as a new one (a client that had already received it may see
it twice); QoS 1 allows exactly that.
"""
from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

DB_NAME = "camus-edge.db"
SCHEMA = """
CREATE TABLE IF NOT EXISTS retained (topic TEXT PRIMARY KEY, payload BLOB NOT NULL, qos INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (client_id TEXT PRIMARY KEY, user TEXT);
CREATE TABLE IF NOT EXISTS subs (client_id TEXT NOT NULL, filter TEXT NOT NULL, qos INTEGER NOT NULL,
                                 PRIMARY KEY (client_id, filter));
CREATE TABLE IF NOT EXISTS owed (seq INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT NOT NULL,
                                 topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL,
                                 retain INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS owed_by_client ON owed (client_id, seq);
"""
# columns MQTT 5 added (a database an earlier version wrote gets them, with their defaults)
ADDED = {
    "retained": [("props", "BLOB NOT NULL DEFAULT x''"), ("expires", "REAL NOT NULL DEFAULT 0")],
    "sessions": [("level", "INTEGER NOT NULL DEFAULT 4"), ("expiry", "REAL")],
    "owed": [("props", "BLOB NOT NULL DEFAULT x''"), ("expires", "REAL NOT NULL DEFAULT 0")],
}


class StoreError(Exception):
    pass


@dataclass
class Kept:
    """A message as stored: its MQTT 5 properties and when it expires (time.time(); 0: never)."""
    payload: bytes
    qos: int
    retain: bool = False
    props: bytes = b""
    expires: float = 0.0


@dataclass
class StoredSession:
    user: str | None
    level: int = 4
    expiry: float = math.inf                                                  # seconds it outlives its connection
    subs: dict[str, int] = field(default_factory=dict)                       # filter -> granted QoS | options
    owed: list[tuple[int, str, Kept]] = field(default_factory=list)          # seq, topic, message


class EdgeStore:
    def __init__(self, directory: str | Path) -> None:
        where = Path(directory)
        try:
            where.mkdir(parents=True, exist_ok=True)
            self.path = where / DB_NAME
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            for table, columns in ADDED.items():
                have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
                for name, decl in columns:
                    if name not in have:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"persistence in {where}: {exc}") from exc

    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        return self.db.execute(sql, args)

    def commit(self) -> None:
        """Everything written since the last commit, durable (before the broker acknowledges it)."""
        if self.db.in_transaction:
            self.db.execute("COMMIT")

    def close(self) -> None:
        self.commit()
        self.db.close()

    # -- retained messages ---------------------------------------------------------------
    def retain(self, topic: str, payload: bytes, qos: int, props: bytes = b"", expires: float = 0.0) -> None:
        self._write("INSERT OR REPLACE INTO retained (topic, payload, qos, props, expires) VALUES (?, ?, ?, ?, ?)",
                    (topic, payload, qos, props, expires))

    def unretain(self, topic: str) -> None:
        self._write("DELETE FROM retained WHERE topic = ?", (topic,))

    def retained(self) -> dict[str, Kept]:
        return {t: Kept(bytes(p), q, True, bytes(pr), e)
                for t, p, q, pr, e in self.db.execute("SELECT topic, payload, qos, props, expires FROM retained")}

    # -- persistent sessions ---------------------------------------------------------------
    def save_session(self, client_id: str, user: str | None, level: int = 4, expiry: float = math.inf) -> None:
        self._write("INSERT OR REPLACE INTO sessions (client_id, user, level, expiry) VALUES (?, ?, ?, ?)",
                    (client_id, user, level, None if expiry == math.inf else expiry))

    def drop_session(self, client_id: str) -> None:
        for table in ("sessions", "subs", "owed"):
            self._write(f"DELETE FROM {table} WHERE client_id = ?", (client_id,))

    def save_sub(self, client_id: str, flt: str, qos: int) -> None:
        self._write("INSERT OR REPLACE INTO subs VALUES (?, ?, ?)", (client_id, flt, qos))

    def drop_sub(self, client_id: str, flt: str) -> None:
        self._write("DELETE FROM subs WHERE client_id = ? AND filter = ?", (client_id, flt))

    def owe(self, client_id: str, topic: str, msg: Kept) -> int:
        """A QoS 1/2 publication the session is owed; returns its number (for `paid`)."""
        cur = self._write("INSERT INTO owed (client_id, topic, payload, qos, retain, props, expires) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (client_id, topic, msg.payload, msg.qos, int(msg.retain), msg.props, msg.expires))
        return int(cur.lastrowid or 0)

    def paid(self, seq: int) -> None:
        """The client acknowledged it (PUBACK, PUBCOMP)."""
        self._write("DELETE FROM owed WHERE seq = ?", (seq,))

    def sessions(self) -> dict[str, StoredSession]:
        out = {cid: StoredSession(user, level, math.inf if expiry is None else expiry)
               for cid, user, level, expiry in self.db.execute("SELECT client_id, user, level, expiry FROM sessions")}
        for cid, flt, qos in self.db.execute("SELECT client_id, filter, qos FROM subs"):
            if cid in out:
                out[cid].subs[flt] = qos
        for seq, cid, topic, payload, qos, retain, props, expires in self.db.execute(
                "SELECT seq, client_id, topic, payload, qos, retain, props, expires FROM owed ORDER BY seq"):
            if cid in out:
                out[cid].owed.append((seq, topic, Kept(bytes(payload), qos, bool(retain), bytes(props), expires)))
        return out
