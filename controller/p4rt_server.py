"""The switch side of P4Runtime (gRPC), for the software switch: the tables a switch holds and
the protocol a real one speaks (bmv2's simple_switch_grpc, Stratum, bf_switchd), so the
controller is exercised exactly as against hardware.

- Arbitration on the stream channel: the client with the highest election id is primary; only
  the primary may write or set the pipeline; when it goes, the next one is told it is primary.
- Write: INSERT / MODIFY / DELETE of table entries, default entries (MODIFY only, DELETE resets
  the program's default) and multicast groups; every update is checked against the P4Info the
  switch runs (ids, match kinds, widths, priorities: `p4_runtime.entry_from_message`) and
  against the table's size; a bad update is refused with its reason in a p4.v1.Error, the
  others of the batch still apply (CONTINUE_ON_ERROR, the default atomicity).
- Read: every entry (table id 0) or one table's, default entries, multicast groups, counters
  (the v1model program's delivered copies per egress port, which the software switch counts).
- Get/SetForwardingPipelineConfig: the P4Info and, as the device config, the spec text (what
  this switch "runs": the camus program of that spec).

After each Write `on_change` is called; `tables()` gives the held entries as a `P4Tables` (the
software switch takes them before its next frame: one rebuild for a burst of writes).
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable

import grpc
from google.rpc import code_pb2, status_pb2

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import P4Entry, P4Tables, schema_tables
from camus.compiler.backends.p4.runtime import (DELETE, INSERT, MODIFY, Names, entry_from_message, p4info_message,
                                                p4runtime_pb2, p4runtime_pb2_grpc)
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.language.spec import Spec
from camus.compiler.language.spec_parser import parse_spec

Msg = Any
API_VERSION = "1.4.0"


DETAILS_BYTES = 6000     # per-update errors in the trailing metadata up to this size (gRPC: 8 KiB)
SUMMARY_CHARS = 1500     # past it, the status message: a count and the first refusals


class UpdateError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _key(te: Msg) -> tuple:
    """A table entry's identity: table, priority and its matches (canonical bytes)."""
    return (te.table_id, te.priority,
            tuple(sorted((m.field_id, m.SerializeToString(deterministic=True)) for m in te.match)))


class _Stream:
    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.election: tuple[int, int] | None = None


class P4RuntimeSwitch(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device_id: int, spec: Spec | None = None, spec_text: str = "",
                 on_change: Callable[[], None] | None = None) -> None:
        self.device_id = device_id
        self.lock = threading.RLock()
        self.on_change = on_change or (lambda: None)
        self.streams: list[_Stream] = []
        self.spec: Spec | None = None
        self.names: Names | None = None
        self.info: Msg = None
        self.capacity: dict[int, int] = {}
        self.spec_text, self.cookie = "", 0
        self.entries: dict[tuple, tuple[Msg, P4Entry]] = {}
        self.defaults: dict[int, tuple[Msg, tuple[str, str, tuple[int, ...]]]] = {}
        self.groups: dict[int, Msg] = {}
        self.sizes: dict[int, int] = {}               # table id -> entries held (tables have a size)
        self.counts: dict[int, dict[int, int]] = {}   # counter id -> cell -> packets (the data plane counts)
        if spec is not None:
            self._load(spec, spec_text, p4info_message(spec))

    # -- pipeline ----------------------------------------------------------------------------
    def _load(self, spec: Spec, spec_text: str, info: Msg, cookie: int = 0) -> None:
        with self.lock:
            self.spec, self.spec_text, self.info, self.cookie = spec, spec_text, info, cookie
            self.names = Names(info)
            self.capacity = {t.preamble.id: t.size for t in info.tables}   # looked up per insert
            for t in p4_schema(spec).tables:          # every subscription table must be there
                self.names.table(t.name)
            self.entries.clear()
            self.sizes.clear()
            self.counts.clear()
            self.defaults.clear()
            self.groups.clear()
            self._changed()

    def tables(self) -> P4Tables:
        """What the switch holds, as the entry interpreter runs it."""
        assert self.spec is not None
        schema = p4_schema(self.spec)
        out = schema_tables(schema)
        out.entries = [e for _, e in self.entries.values() if e.table != "ipv4_lpm"]
        for _, (table, action, params) in self.defaults.values():
            if table == "t_root":
                out.root = params[0]
            elif table != "ipv4_lpm" and action != "NoAction":
                out.defaults[table] = (action, params)
        out.groups = {g: tuple(r.egress_port for r in m.replicas) for g, m in self.groups.items()}
        return out

    def count(self, counter: str, index: int, packets: int = 1) -> None:
        """The data plane counts a packet in a counter of the program (unknown names: no such counter)."""
        with self.lock:
            got = self.names.counters.get(counter) if self.names is not None else None
            if got is not None and 0 <= index < got[1]:
                cells = self.counts.setdefault(got[0], {})
                cells[index] = cells.get(index, 0) + packets

    def _changed(self) -> None:
        if self.spec is not None:
            self.on_change()

    # -- arbitration -------------------------------------------------------------------------
    def _primary(self) -> _Stream | None:
        live = [s for s in self.streams if s.election is not None]
        return max(live, key=lambda s: s.election or (0, 0), default=None)

    def _tell_all(self) -> None:
        primary = self._primary()
        for s in self.streams:
            if s.election is None:
                continue
            r = p4runtime_pb2.StreamMessageResponse()
            r.arbitration.device_id = self.device_id
            if primary is not None and primary.election is not None:
                r.arbitration.election_id.high, r.arbitration.election_id.low = primary.election
            r.arbitration.status.code = code_pb2.OK if s is primary else code_pb2.ALREADY_EXISTS
            s.out.put(r)

    def StreamChannel(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        stream = _Stream()
        with self.lock:
            self.streams.append(stream)

        def read() -> None:
            try:
                for req in request_iterator:
                    if req.WhichOneof("update") != "arbitration":
                        continue
                    a = req.arbitration
                    with self.lock:
                        election = (a.election_id.high, a.election_id.low)
                        refused = (f"no device {a.device_id} here (this is {self.device_id})"
                                   if a.device_id != self.device_id else
                                   f"election id {election[1]} is taken by another client"
                                   if any(s is not stream and s.election == election for s in self.streams) else "")
                        if refused:              # told on the stream (this thread cannot abort the call)
                            r = p4runtime_pb2.StreamMessageResponse()
                            r.error.canonical_code = (code_pb2.NOT_FOUND if a.device_id != self.device_id
                                                      else code_pb2.INVALID_ARGUMENT)
                            r.error.message = refused
                            stream.out.put(r)
                            continue
                        stream.election = election
                        self._tell_all()
            except Exception:              # the client went away (cancelled, reset): it is no longer a candidate
                pass
            finally:
                with self.lock:
                    if stream in self.streams:
                        self.streams.remove(stream)
                    self._tell_all()
                stream.out.put(None)

        threading.Thread(target=read, daemon=True, name="p4rt-stream").start()
        while True:
            item = stream.out.get()
            if item is None:
                return
            yield item

    def _check_primary(self, device_id: int, election: Msg, context: grpc.ServicerContext) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {device_id} here (this is {self.device_id})")
        primary = self._primary()
        if primary is None or primary.election != (election.high, election.low):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not the primary controller for this device "
                          "(open the stream channel and win the arbitration first)")

    # -- pipeline config ---------------------------------------------------------------------
    def GetForwardingPipelineConfig(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} here")
        r = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        with self.lock:
            if self.info is not None:
                r.config.p4info.CopyFrom(self.info)
                r.config.cookie.cookie = self.cookie
                if request.response_type in (request.ALL, request.DEVICE_CONFIG_AND_COOKIE):
                    r.config.p4_device_config = self.spec_text.encode()
        return r

    def SetForwardingPipelineConfig(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        with self.lock:
            self._check_primary(request.device_id, request.election_id, context)
            try:
                text = request.config.p4_device_config.decode()
                spec = parse_spec(text, "<device config>")
                names = Names(request.config.p4info)
                for t in p4_schema(spec).tables:
                    names.table(t.name)
            except (UnicodeDecodeError, CompileError, CompileErrors, BackendError) as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"the device config is a camus spec with the P4Info of its program: {exc}")
            if request.action in (request.VERIFY_AND_COMMIT, request.COMMIT, request.RECONCILE_AND_COMMIT):
                self._load(spec, text, request.config.p4info, request.config.cookie.cookie)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def Capabilities(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- write -------------------------------------------------------------------------------
    def Write(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        errors = []
        with self.lock:
            self._check_primary(request.device_id, request.election_id, context)
            if self.names is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline: set the forwarding pipeline first")
            for u in request.updates:
                try:
                    self._update(u)
                    errors.append(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
                except UpdateError as exc:
                    errors.append(p4runtime_pb2.Error(canonical_code=exc.code, message=str(exc)))
            self._changed()
        refused = [(i, e) for i, e in enumerate(errors) if e.canonical_code != code_pb2.OK]
        if refused:
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message="some updates failed")
            for e in errors:
                status.details.add().Pack(e)
            details = status.SerializeToString()
            if len(details) <= DETAILS_BYTES:       # one Error per update, as P4Runtime has it
                context.set_trailing_metadata((("grpc-status-details-bin", details),))
                context.abort(grpc.StatusCode.UNKNOWN, "some updates failed")
            # Past gRPC's metadata limit (8 KiB; 60,000 refused updates were RESOURCE_EXHAUSTED and
            # the client saw none of them): a count and the first refusals in full, in the message.
            head = f"{len(refused)} of {len(errors)} updates refused"
            shown: list[str] = []
            used = len(head)
            for i, e in refused:
                item = f"update {i}: {code_pb2.Code.Name(e.canonical_code)}: {e.message[:200]}"
                used += len(item) + 2
                if used > SUMMARY_CHARS:
                    break
                shown.append(item)
            more = len(refused) - len(shown)
            context.abort(grpc.StatusCode.UNKNOWN, f"{head}; " + "; ".join(shown)
                          + (f"; ... {more} more" if more else ""))
        return p4runtime_pb2.WriteResponse()

    def _update(self, u: Msg) -> None:
        which = u.entity.WhichOneof("entity")
        if which == "table_entry":
            self._table_update(u.type, u.entity.table_entry)
        elif which == "packet_replication_engine_entry":
            pre = u.entity.packet_replication_engine_entry
            if pre.WhichOneof("type") != "multicast_group_entry":
                raise UpdateError(code_pb2.UNIMPLEMENTED, "only multicast groups are supported")
            g = pre.multicast_group_entry
            if g.multicast_group_id == 0:
                raise UpdateError(code_pb2.INVALID_ARGUMENT, "multicast group id 0 is reserved")
            exists = g.multicast_group_id in self.groups
            if u.type == INSERT and exists or u.type in (MODIFY, DELETE) and not exists:
                raise UpdateError(code_pb2.ALREADY_EXISTS if exists else code_pb2.NOT_FOUND,
                                  f"multicast group {g.multicast_group_id}")
            if u.type == DELETE:
                del self.groups[g.multicast_group_id]
            else:
                self.groups[g.multicast_group_id] = g
        else:
            raise UpdateError(code_pb2.UNIMPLEMENTED, f"{which or 'an empty entity'} is not supported")

    def _table_update(self, kind: int, te: Msg) -> None:
        assert self.names is not None
        try:
            got = entry_from_message(self.names, te) if kind != DELETE or te.is_default_action else None
        except BackendError as exc:
            raise UpdateError(code_pb2.INVALID_ARGUMENT, str(exc)) from None
        if te.is_default_action:
            if kind == INSERT:
                raise UpdateError(code_pb2.INVALID_ARGUMENT, "a default entry is modified, never inserted")
            if kind == DELETE:
                self.defaults.pop(te.table_id, None)          # back to the program's default
            else:
                assert isinstance(got, tuple)
                self.defaults[te.table_id] = (te, got)
            return
        key = _key(te)
        exists = key in self.entries
        if kind == INSERT and exists or kind in (MODIFY, DELETE) and not exists:
            t = self.names.table_by_id.get(te.table_id)
            what = "an entry with this match exists" if exists else "no entry with this match"
            raise UpdateError(code_pb2.ALREADY_EXISTS if exists else code_pb2.NOT_FOUND,
                              f"{t.name if t else te.table_id}: {what}")
        if kind == DELETE:
            del self.entries[key]
            self.sizes[te.table_id] -= 1
            return
        if kind == INSERT:
            size = self.capacity[te.table_id]
            if self.sizes.get(te.table_id, 0) >= size:
                raise UpdateError(code_pb2.RESOURCE_EXHAUSTED, f"table {te.table_id:#x} is full ({size} entries)")
            self.sizes[te.table_id] = self.sizes.get(te.table_id, 0) + 1
        assert isinstance(got, P4Entry)
        self.entries[key] = (te, got)

    # -- read --------------------------------------------------------------------------------
    def Read(self, request: Msg, context: grpc.ServicerContext) -> Any:
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} here")
        r = p4runtime_pb2.ReadResponse()
        with self.lock:
            for want in request.entities:
                which = want.WhichOneof("entity")
                if which == "table_entry":
                    w = want.table_entry
                    if w.is_default_action:
                        for tid, (te, _) in self.defaults.items():
                            if w.table_id in (0, tid):
                                r.entities.add().table_entry.CopyFrom(te)
                    else:
                        for te, _ in self.entries.values():
                            if w.table_id in (0, te.table_id):
                                r.entities.add().table_entry.CopyFrom(te)
                elif which == "packet_replication_engine_entry":
                    gid = want.packet_replication_engine_entry.multicast_group_entry.multicast_group_id
                    for g, m in sorted(self.groups.items()):
                        if gid in (0, g):
                            r.entities.add().packet_replication_engine_entry.multicast_group_entry.CopyFrom(m)
                elif which == "counter_entry" and self.names is not None:
                    w = want.counter_entry
                    for cid, size in self.names.counters.values():
                        if w.counter_id not in (0, cid):
                            continue
                        cells = [w.index.index] if w.HasField("index") else range(size)
                        for i in cells:
                            e = r.entities.add().counter_entry
                            e.counter_id, e.index.index = cid, i
                            e.data.packet_count = self.counts.get(cid, {}).get(i, 0)
                else:
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, f"reading {which} is not supported")
        yield r
