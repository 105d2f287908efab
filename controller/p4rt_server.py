"""The switch side of P4Runtime (gRPC), for the software switch: the protocol a real switch
speaks (bmv2's simple_switch_grpc, Stratum, bf_switchd), by the P4Runtime specification 1.4
(what Capabilities reports; section numbers below are the specification's), so that the
controller, and clients written by others, are exercised exactly as against hardware.

- Arbitration (5.3, 5.4): on the stream channel, per device and the default role; a controller
  whose election id is at least the highest the switch has seen becomes primary, any other is a
  backup; notifications carry the primary's id (or the highest seen) and OK / ALREADY_EXISTS /
  NOT_FOUND (no primary); a wrong device, a role this switch does not have, or an election id
  another live controller holds end the stream with NOT_FOUND / INVALID_ARGUMENT, and a second
  arbitration naming another device FAILED_PRECONDITION.
- Write (12): device and role (NOT_FOUND), primary (PERMISSION_DENIED), a pipeline
  (FAILED_PRECONDITION); per update INSERT / MODIFY / DELETE of table entries, default entries
  and multicast groups (p4rt_state.py), each refusal with its code in a p4.v1.Error, one per
  update, under an UNKNOWN status (12.3). Atomicity (12.2): CONTINUE_ON_ERROR; ROLLBACK_ON_ERROR
  and DATAPLANE_ATOMIC (all or none; the data plane takes the tables once per batch, so a
  packet sees the state before the batch or after it).
- Read (13, 9.1.6): wildcards and filters by table, match, action, priority, metadata, default
  entry; multicast groups (all or one id); counters (all, one counter, one cell).
- SetForwardingPipelineConfig (14): VERIFY, VERIFY_AND_SAVE (later Reads and Writes refer to the
  saved config, the data plane keeps the running one), VERIFY_AND_COMMIT, COMMIT (the saved
  config with the writes made since it was saved; NOT_FOUND without one, INVALID_ARGUMENT with a
  config), RECONCILE_AND_COMMIT (kept entities must fit the new P4Info, else INVALID_ARGUMENT).
- GetForwardingPipelineConfig (15): ALL, COOKIE_ONLY, P4INFO_AND_COOKIE, DEVICE_CONFIG_AND_COOKIE;
  no config field at all before a pipeline is set. The device config is the spec text (what this
  switch "runs": the camus program of that spec).

After each Write `on_change` is called; `tables()` gives the running entries as a `P4Tables` (the
software switch takes them, under the lock, before its next frame).
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable

import grpc
from google.rpc import code_pb2, status_pb2

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import P4Tables
from camus.compiler.backends.p4.runtime import Names, p4info_message, p4runtime_pb2, p4runtime_pb2_grpc
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.language.spec import Spec
from camus.compiler.language.spec_parser import parse_spec

from .p4rt_state import SwitchState, UpdateError

Msg = Any
API_VERSION = "1.4.0"
DEFAULT_ROLE = ""        # this switch has the default role only (5.1): a named one is NOT_FOUND

DETAILS_BYTES = 6000     # per-update errors in the trailing metadata up to this size (gRPC: 8 KiB)
SUMMARY_CHARS = 1500     # past it, the status message: a count and the first refusals

_GRPC_CODE = {c.value[0]: c for c in grpc.StatusCode}


class _Stream:
    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.election: tuple[int, int] | None = None
        self.device: int | None = None


class P4RuntimeSwitch(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device_id: int, spec: Spec | None = None, spec_text: str = "",
                 on_change: Callable[[], None] | None = None) -> None:
        self.device_id = device_id
        self.lock = threading.RLock()
        self.on_change = on_change or (lambda: None)
        self.streams: list[_Stream] = []
        self.primary: _Stream | None = None
        self.highest: tuple[int, int] = (0, 0)      # election_id_past (5.3): the highest ever seen
        self.state: SwitchState | None = None       # what the data plane runs
        self.saved: SwitchState | None = None       # VERIFY_AND_SAVE's config, until COMMIT
        if spec is not None:
            self._load(spec, spec_text, p4info_message(spec))

    # -- pipeline ----------------------------------------------------------------------------
    def _load(self, spec: Spec, spec_text: str, info: Msg, cookie: int = 0) -> None:
        with self.lock:
            self.state = SwitchState(spec, spec_text, info, cookie)
            self.saved = None
            self._changed()

    @property
    def spec(self) -> Spec | None:
        return self.state.spec if self.state is not None else None

    @property
    def info(self) -> Msg:
        return self.state.info if self.state is not None else None

    @property
    def names(self) -> Names | None:
        return self.state.names if self.state is not None else None

    @property
    def entries(self) -> dict:
        return self.state.entries if self.state is not None else {}

    def _current(self) -> SwitchState | None:
        """The config Reads and Writes refer to: the saved one from VERIFY_AND_SAVE to COMMIT (14)."""
        return self.saved if self.saved is not None else self.state

    def tables(self) -> P4Tables:
        """What the switch runs, as the entry interpreter runs it (one batch's writes whole)."""
        with self.lock:
            assert self.state is not None
            return self.state.tables()

    def count(self, counter: str, index: int, packets: int = 1) -> None:
        """The data plane counts a packet in a counter of the program (unknown names: no such counter)."""
        with self.lock:
            if self.state is not None:
                self.state.count(counter, index, packets)

    def _changed(self) -> None:
        if self.state is not None:
            self.on_change()

    # -- arbitration (5.3, 5.4) -------------------------------------------------------------
    def _notify(self, s: _Stream) -> None:
        r = p4runtime_pb2.StreamMessageResponse()
        r.arbitration.device_id = self.device_id
        shown = self.primary.election if self.primary is not None and self.primary.election else self.highest
        r.arbitration.election_id.high, r.arbitration.election_id.low = shown
        r.arbitration.status.code = (code_pb2.OK if s is self.primary else
                                     code_pb2.ALREADY_EXISTS if self.primary is not None else code_pb2.NOT_FOUND)
        r.arbitration.status.message = ("primary" if s is self.primary else
                                        "backup: another controller is primary" if self.primary is not None
                                        else "backup: no primary (a controller with an election id of at least "
                                             f"{(shown[0] << 64) | shown[1]} becomes primary)")
        s.out.put(r)

    def _notify_all(self) -> None:
        """Every live controller of the device, the new primary last (5.3: others first)."""
        live = [s for s in self.streams if s.election is not None]
        for s in sorted(live, key=lambda x: x is self.primary):
            self._notify(s)

    def _arbitrate(self, stream: _Stream, a: Msg) -> tuple[int, str] | None:
        """One MasterArbitrationUpdate (5.3); an error (code, message) ends the stream."""
        first = stream.election is None
        if a.device_id != self.device_id:
            return ((code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION),
                    f"no device {a.device_id} here (this is {self.device_id})" if first else
                    f"this stream arbitrated for device {stream.device}; open another stream for device {a.device_id}")
        if a.role.name != DEFAULT_ROLE or a.role.id:
            return ((code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION),
                    f"role {a.role.name or a.role.id!r}: this switch has the default role only")
        election = (a.election_id.high, a.election_id.low)
        if any(s is not stream and s.election == election for s in self.streams):
            return code_pb2.INVALID_ARGUMENT, f"election id {(election[0] << 64) | election[1]} is taken by another client"
        was_primary = stream is self.primary
        stream.election, stream.device = election, a.device_id
        if election >= self.highest:                    # becomes, or stays, primary
            self.highest = election
            self.primary = stream
            self._notify_all()
        elif was_primary:                               # downgraded itself: everyone is told
            self.primary = None
            self._notify_all()
        else:                                           # a backup: only it is told
            self._notify(stream)
        return None

    def StreamChannel(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        stream = _Stream()
        with self.lock:
            self.streams.append(stream)

        def read() -> None:
            try:
                for req in request_iterator:
                    if req.WhichOneof("update") != "arbitration":
                        continue
                    with self.lock:
                        refused = self._arbitrate(stream, req.arbitration)
                    if refused is not None:
                        stream.out.put(refused)          # the stream ends with this status
                        return
            except Exception:              # the client went away (cancelled, reset): it is no longer a candidate
                pass
            finally:
                self._leave(stream)

        threading.Thread(target=read, daemon=True, name="p4rt-stream").start()
        while True:
            item = stream.out.get()
            if item is None:
                return
            if isinstance(item, tuple):
                self._leave(stream)
                context.abort(_GRPC_CODE[item[0]], item[1])
            yield item

    def _leave(self, stream: _Stream) -> None:
        with self.lock:
            if stream not in self.streams:
                return
            self.streams.remove(stream)
            if stream is self.primary:                  # 5.4: a primary disconnects: everyone is told
                self.primary = None
                self._notify_all()
        stream.out.put(None)

    def _check_write(self, device_id: int, role: str, election: Msg, context: grpc.ServicerContext) -> None:
        """Write and SetForwardingPipelineConfig (12, 14): device and role, then the primary."""
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {device_id} here (this is {self.device_id})")
        if role != DEFAULT_ROLE:
            context.abort(grpc.StatusCode.NOT_FOUND, f"role {role!r}: this switch has the default role only")
        if self.primary is None or self.primary.election != (election.high, election.low):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not the primary controller for this device "
                          "(open the stream channel and win the arbitration first)")

    # -- pipeline config (14, 15) ------------------------------------------------------------
    def GetForwardingPipelineConfig(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} here")
        r = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        kind = p4runtime_pb2.GetForwardingPipelineConfigRequest
        with self.lock:
            st = self.state
            if st is not None:                           # no pipeline: the config field stays unset
                r.config.cookie.cookie = st.cookie
                if request.response_type in (kind.ALL, kind.P4INFO_AND_COOKIE):
                    r.config.p4info.CopyFrom(st.info)
                if request.response_type in (kind.ALL, kind.DEVICE_CONFIG_AND_COOKIE):
                    r.config.p4_device_config = st.spec_text.encode()
        return r

    def _verified(self, config: Msg, context: grpc.ServicerContext) -> SwitchState:
        """The config as this switch would run it, or INVALID_ARGUMENT saying why it cannot."""
        if not config.HasField("p4info") or not config.p4_device_config:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no config: a P4Info and, as the device config, the camus "
                          "spec text are needed")
        try:
            text = config.p4_device_config.decode()
            spec = parse_spec(text, "<device config>")
            return SwitchState(spec, text, config.p4info, config.cookie.cookie)
        except (UnicodeDecodeError, CompileError, CompileErrors, BackendError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the device config is a camus spec with the P4Info of its program: {exc}")
        raise AssertionError("unreachable")

    def SetForwardingPipelineConfig(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        a = p4runtime_pb2.SetForwardingPipelineConfigRequest
        with self.lock:
            self._check_write(request.device_id, request.role, request.election_id, context)
            if request.action == a.COMMIT:
                if request.HasField("config"):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "COMMIT realizes the saved config: send no config")
                if self.saved is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "nothing to commit: no VERIFY_AND_SAVE before")
                self.state, self.saved = self.saved, None    # with the writes made since it was saved
                self._changed()
            elif request.action in (a.VERIFY, a.VERIFY_AND_SAVE, a.VERIFY_AND_COMMIT):
                new = self._verified(request.config, context)
                if request.action == a.VERIFY_AND_SAVE:
                    self.saved = new
                elif request.action == a.VERIFY_AND_COMMIT:
                    self.state, self.saved = new, None        # the forwarding state is cleared
                    self._changed()
            elif request.action == a.RECONCILE_AND_COMMIT:
                new = self._verified(request.config, context)
                self._reconcile(new, context)
                self.state, self.saved = new, None
                self._changed()
            else:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the action is unspecified (VERIFY, VERIFY_AND_SAVE, "
                              "VERIFY_AND_COMMIT, COMMIT or RECONCILE_AND_COMMIT)")
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _reconcile(self, new: SwitchState, context: grpc.ServicerContext) -> None:
        """Carry the running entities into `new`; INVALID_ARGUMENT when one does not fit its P4Info."""
        old = self.state
        if old is None:
            return
        updates = [p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                        entity=p4runtime_pb2.Entity(packet_replication_engine_entry=
                                                                    p4runtime_pb2.PacketReplicationEngineEntry(
                                                                        multicast_group_entry=g)))
                   for g in old.groups.values()]
        updates += [p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=te))
                    for te, _ in old.entries.values()]
        updates += [p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY, entity=p4runtime_pb2.Entity(table_entry=te))
                    for te, _ in old.defaults.values()]
        for u in updates:
            try:
                new.apply(u)
            except UpdateError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"the forwarding state cannot be kept under the new config: {exc}")

    def Capabilities(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- write (12) --------------------------------------------------------------------------
    def Write(self, request: Msg, context: grpc.ServicerContext) -> Msg:
        w = p4runtime_pb2.WriteRequest
        errors = []
        with self.lock:
            self._check_write(request.device_id, request.role, request.election_id, context)
            st = self._current()
            if st is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline: set the forwarding pipeline first")
            assert st is not None
            if request.atomicity not in (w.CONTINUE_ON_ERROR, w.ROLLBACK_ON_ERROR, w.DATAPLANE_ATOMIC):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown atomicity {request.atomicity}")
            all_or_none = request.atomicity != w.CONTINUE_ON_ERROR
            before = st.copy() if all_or_none else None
            for u in request.updates:
                try:
                    st.apply(u)
                    errors.append(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
                except UpdateError as exc:
                    errors.append(p4runtime_pb2.Error(canonical_code=exc.code, message=str(exc)))
            failed = [i for i, e in enumerate(errors) if e.canonical_code != code_pb2.OK]
            if failed and before is not None:           # all or none: back to the state before the batch
                if st is self.saved:
                    self.saved = before
                else:
                    self.state = before
                for e in errors:
                    if e.canonical_code == code_pb2.OK:
                        e.canonical_code, e.message = code_pb2.ABORTED, f"rolled back: update {failed[0]} failed"
            self._changed()
        if failed:
            self._refuse(errors, context)
        return p4runtime_pb2.WriteResponse()

    def _refuse(self, errors: list[Msg], context: grpc.ServicerContext) -> None:
        """12.3: UNKNOWN, with one p4.v1.Error per update (OK for those that applied) in the details."""
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message="some updates failed")
        for e in errors:
            status.details.add().Pack(e)
        details = status.SerializeToString()
        if len(details) <= DETAILS_BYTES:
            context.set_trailing_metadata((("grpc-status-details-bin", details),))
            context.abort(grpc.StatusCode.UNKNOWN, "some updates failed")
        # Past gRPC's metadata limit (8 KiB; 60,000 refused updates were RESOURCE_EXHAUSTED and
        # the client saw none of them): a count and the first refusals in full, in the message.
        refused = [(i, e) for i, e in enumerate(errors) if e.canonical_code != code_pb2.OK]
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
        context.abort(grpc.StatusCode.UNKNOWN, f"{head}; " + "; ".join(shown) + (f"; ... {more} more" if more else ""))

    # -- read (13) ---------------------------------------------------------------------------
    def Read(self, request: Msg, context: grpc.ServicerContext) -> Any:
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} here")
        if request.role != DEFAULT_ROLE:
            context.abort(grpc.StatusCode.NOT_FOUND, f"role {request.role!r}: this switch has the default role only")
        r = p4runtime_pb2.ReadResponse()
        with self.lock:
            st = self._current()
            if st is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline: set the forwarding pipeline first")
            assert st is not None
            try:
                for want in request.entities:
                    which = want.WhichOneof("entity")
                    if which == "table_entry":
                        for te in st.read_tables(want.table_entry):
                            r.entities.add().table_entry.CopyFrom(te)
                    elif which == "packet_replication_engine_entry":
                        for m in st.read_groups(want.packet_replication_engine_entry):
                            r.entities.add().packet_replication_engine_entry.multicast_group_entry.CopyFrom(m)
                    elif which == "counter_entry":
                        for cid, i, n in st.read_counters(want.counter_entry):
                            e = r.entities.add().counter_entry
                            e.counter_id, e.index.index, e.data.packet_count = cid, i, n
                    elif which is None:
                        raise UpdateError(code_pb2.INVALID_ARGUMENT, "an entity to read must name its kind (13.2)")
                    else:
                        raise UpdateError(code_pb2.UNIMPLEMENTED, f"reading {which} is not supported by this switch")
            except UpdateError as exc:
                context.abort(_GRPC_CODE[exc.code], str(exc))
        yield r

