"""What a P4Runtime switch holds for one forwarding-pipeline config, and the P4Runtime rules for
changing and reading it (P4Runtime specification 1.4; section numbers below are its own).

The RPC layer (p4rt_server.py) owns arbitration, roles and configs; this module owns entities:
  * table entries keyed by (table, match, priority) (9.1); INSERT of an existing key is
    ALREADY_EXISTS, MODIFY/DELETE of a missing one NOT_FOUND, a full table RESOURCE_EXHAUSTED (12);
  * default entries (9.1.3): always set (the program's own until modified), only MODIFY; a
    MODIFY without an action resets it; INSERT or DELETE of a default is INVALID_ARGUMENT;
  * multicast groups (9.5.1), counters the data plane counts (9.3.2);
  * reads with the wildcards and filters of 9.1.6 / 13.2 (table, match, action, priority,
    metadata, default entry; group id; counter id and index).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import P4Entry, P4Tables, schema_tables
from camus.compiler.backends.p4.runtime import (DELETE, INSERT, MODIFY, Names, action_message, entry_from_message,
                                                p4runtime_pb2)
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.language.spec import Spec

Msg = Any
_CALL = re.compile(r"^\s*(\w+)\((.*?)\)")


class UpdateError(Exception):
    """One update or read request refused, with the canonical code the specification names."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def match_key(te: Msg) -> tuple:
    """A table entry's match, canonical: (field id, its serialized match) in field order."""
    return tuple(sorted((m.field_id, m.SerializeToString(deterministic=True)) for m in te.match))


def entry_key(te: Msg) -> tuple:
    """A table entry's identity (9.1): table, priority and its match."""
    return (te.table_id, te.priority, match_key(te))


def replica_port(r: Msg) -> int:
    """A replica's egress port: the 1.4 `port` bytes or the older `egress_port` number."""
    return int.from_bytes(r.port, "big") if r.WhichOneof("port_kind") == "port" else r.egress_port


@dataclass
class SwitchState:
    """The entities of one pipeline config (its P4Info's names and sizes)."""
    spec: Spec
    spec_text: str
    info: Msg
    cookie: int = 0
    names: Names = field(init=False)
    capacity: dict[int, int] = field(init=False)
    program_defaults: dict[int, Msg] = field(init=False)   # table id -> the program's default entry
    entries: dict[tuple, tuple[Msg, P4Entry]] = field(default_factory=dict)
    defaults: dict[int, tuple[Msg, tuple[str, str, tuple[int, ...]]]] = field(default_factory=dict)
    groups: dict[int, Msg] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    counts: dict[int, dict[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.names = Names(self.info)
        self.capacity = {t.preamble.id: t.size for t in self.info.tables}
        self.program_defaults = {}
        for t in p4_schema(self.spec).tables:          # every subscription table must be there
            tid = self.names.table(t.name).id
            self.program_defaults[tid] = self._program_default(tid, t.name, t.default)

    def _program_default(self, tid: int, table: str, text: str) -> Msg:
        """The default entry the program declares (`set_state(0);   // ...`), as a TableEntry."""
        te = p4runtime_pb2.TableEntry(table_id=tid, is_default_action=True)
        m = _CALL.match(text)
        if m and m.group(1) != "NoAction":
            params = tuple(int(x) for x in m.group(2).split(",") if x.strip())
            try:
                te.action.action.CopyFrom(action_message(self.names, table, m.group(1), params))
            except BackendError:
                pass
        elif m and "NoAction" in self.names.actions:
            te.action.action.action_id = self.names.actions["NoAction"][0]
        return te

    def copy(self) -> "SwitchState":
        """A snapshot to roll back to (entities only; messages are never changed in place)."""
        c = copy.copy(self)
        c.entries, c.defaults, c.groups, c.sizes = dict(self.entries), dict(self.defaults), dict(self.groups), \
            dict(self.sizes)
        return c

    # -- the data plane's view ---------------------------------------------------------------
    def tables(self) -> P4Tables:
        """What the switch holds, as the entry interpreter runs it."""
        out = schema_tables(p4_schema(self.spec))
        out.entries = [e for _, e in self.entries.values() if e.table != "ipv4_lpm"]
        for _, (table, action, params) in self.defaults.values():
            if table == "t_root":
                out.root = params[0]
            elif table != "ipv4_lpm" and action != "NoAction":
                out.defaults[table] = (action, params)
        out.groups = {g: tuple(replica_port(r) for r in m.replicas) for g, m in self.groups.items()}
        return out

    def count(self, counter: str, index: int, packets: int) -> None:
        got = self.names.counters.get(counter)
        if got is not None and 0 <= index < got[1]:
            cells = self.counts.setdefault(got[0], {})
            cells[index] = cells.get(index, 0) + packets

    # -- writes (section 12) -------------------------------------------------------------------
    def apply(self, u: Msg) -> None:
        if u.type not in (INSERT, MODIFY, DELETE):
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "the update's type is unspecified (INSERT, MODIFY or DELETE)")
        which = u.entity.WhichOneof("entity")
        if which == "table_entry":
            self._table_update(u.type, u.entity.table_entry)
        elif which == "packet_replication_engine_entry":
            self._group_update(u.type, u.entity.packet_replication_engine_entry)
        elif which is None:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "the update names no entity")
        else:
            raise UpdateError(code_pb2.UNIMPLEMENTED, f"{which} is not supported by this switch")

    def _group_update(self, kind: int, pre: Msg) -> None:
        if pre.WhichOneof("type") != "multicast_group_entry":
            raise UpdateError(code_pb2.UNIMPLEMENTED, "only multicast groups are supported (no clone sessions)")
        g = pre.multicast_group_entry
        if g.multicast_group_id == 0:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "multicast group id 0 is reserved")
        exists = g.multicast_group_id in self.groups
        if kind == INSERT and exists or kind in (MODIFY, DELETE) and not exists:
            raise UpdateError(code_pb2.ALREADY_EXISTS if exists else code_pb2.NOT_FOUND,
                              f"multicast group {g.multicast_group_id}")
        if kind == DELETE:
            del self.groups[g.multicast_group_id]
        else:
            self.groups[g.multicast_group_id] = g

    def _table_update(self, kind: int, te: Msg) -> None:
        t = self.names.table_by_id.get(te.table_id)
        if t is None:
            raise UpdateError(code_pb2.NOT_FOUND, f"no table with id {te.table_id:#x} in the P4Info")
        if te.is_default_action:
            self._default_update(kind, te)
            return
        try:
            got = entry_from_message(self.names, te) if kind != DELETE else None
        except BackendError as exc:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, str(exc)) from None
        key = entry_key(te)
        exists = key in self.entries
        if kind == INSERT and exists or kind in (MODIFY, DELETE) and not exists:
            what = "an entry with this match and priority exists" if exists else "no entry with this match and priority"
            raise UpdateError(code_pb2.ALREADY_EXISTS if exists else code_pb2.NOT_FOUND, f"{t.name}: {what}")
        if kind == DELETE:
            del self.entries[key]
            self.sizes[te.table_id] -= 1
            return
        if kind == INSERT:
            size = self.capacity[te.table_id]
            if self.sizes.get(te.table_id, 0) >= size:
                raise UpdateError(code_pb2.RESOURCE_EXHAUSTED, f"{t.name} is full ({size} entries)")
            self.sizes[te.table_id] = self.sizes.get(te.table_id, 0) + 1
        assert isinstance(got, P4Entry)
        self.entries[key] = (te, got)

    def _default_update(self, kind: int, te: Msg) -> None:
        if kind != MODIFY:                                  # 9.1.3: the default entry is always set
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "a default entry is only modified (9.1.3): MODIFY it, "
                              "without an action to reset it to the program's")
        if te.match or te.priority:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "a default entry has no match and priority 0 (9.1.3)")
        if not te.HasField("action"):                       # reset to the program's default
            self.defaults.pop(te.table_id, None)
            return
        try:
            got = entry_from_message(self.names, te)
        except BackendError as exc:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, str(exc)) from None
        assert isinstance(got, tuple)
        self.defaults[te.table_id] = (te, got)

    # -- reads (sections 9.1.6, 13.2) ----------------------------------------------------------
    def read_tables(self, w: Msg) -> list[Msg]:
        """The table entries (or default entries) a TableEntry filter selects."""
        filters = bool(w.match or w.priority or w.HasField("action") or w.controller_metadata or w.metadata)
        if w.table_id == 0 and (filters or w.is_default_action):
            raise UpdateError(code_pb2.INVALID_ARGUMENT, "table_id 0 reads every table; no other filter can be "
                              "used with it (9.1.6)")
        if w.table_id and w.table_id not in self.names.table_by_id:
            raise UpdateError(code_pb2.NOT_FOUND, f"no table with id {w.table_id:#x} in the P4Info")
        if w.is_default_action:
            if w.match or w.priority:
                raise UpdateError(code_pb2.INVALID_ARGUMENT, "a default entry has no match and priority 0 (9.1.3)")
            held = self.defaults.get(w.table_id)
            te = held[0] if held is not None else self.program_defaults.get(w.table_id)
            return [te] if te is not None else []
        want_match = match_key(w) if w.match else None
        want_action = w.action.action.action_id if w.HasField("action") else None
        out = []
        for te, _ in self.entries.values():
            if w.table_id and te.table_id != w.table_id:
                continue
            if want_match is not None and match_key(te) != want_match:
                continue
            if w.priority and te.priority != w.priority:
                continue
            if want_action is not None and te.action.action.action_id != want_action:
                continue
            if w.controller_metadata and te.controller_metadata != w.controller_metadata:
                continue
            if w.metadata and te.metadata != w.metadata:
                continue
            out.append(te)
        return out

    def read_groups(self, w: Msg) -> list[Msg]:
        if w.WhichOneof("type") not in (None, "multicast_group_entry"):
            raise UpdateError(code_pb2.UNIMPLEMENTED, "only multicast groups are held (no clone sessions)")
        gid = w.multicast_group_entry.multicast_group_id
        return [m for g, m in sorted(self.groups.items()) if gid in (0, g)]

    def read_counters(self, w: Msg) -> list[tuple[int, int, int]]:
        """(counter id, index, packets) the CounterEntry filter selects (9.3.2)."""
        if w.counter_id and w.counter_id not in {cid for cid, _ in self.names.counters.values()}:
            raise UpdateError(code_pb2.NOT_FOUND, f"no counter with id {w.counter_id:#x} in the P4Info")
        out = []
        for cid, size in self.names.counters.values():
            if w.counter_id not in (0, cid):
                continue
            if w.HasField("index") and not 0 <= w.index.index < size:
                raise UpdateError(code_pb2.OUT_OF_RANGE, f"counter {cid:#x} has {size} cells (index {w.index.index})")
            cells = [w.index.index] if w.HasField("index") else range(size)
            out += [(cid, i, self.counts.get(cid, {}).get(i, 0)) for i in cells]
        return out
