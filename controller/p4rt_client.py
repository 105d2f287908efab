"""The controller's P4Runtime client (gRPC, official protobufs): one switch, one session.

Opens the stream channel and wins the arbitration (primary, by election id); reads the P4Info
the switch runs (GetForwardingPipelineConfig) and resolves our table and action names against
it, so the ids are whatever p4c chose; sets the pipeline only on a switch that has none and
only when given one; reads back what the switch holds; writes batches of updates; and turns
P4Runtime's per-update errors into one clear message. A broken stream (the switch restarted)
is noticed and reported by `lost`, so the controller re-synchronises.
"""
from __future__ import annotations

import queue
import threading
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2

from camus.compiler.backends.p4.runtime import Names, p4runtime_pb2, p4runtime_pb2_grpc, text

from .tls import TlsFiles, grpc_channel_credentials

Msg = Any
CHUNK = 2000            # updates per Write RPC (gRPC's 4 MiB message limit with room to spare)


class P4RuntimeError(RuntimeError):
    pass


def label(u: Msg, names: Names | None) -> str:
    """An update in a few words: INSERT t_leaf, MODIFY t_root (default), DELETE multicast group 3."""
    kind = p4runtime_pb2.Update.Type.Name(u.type)
    if u.entity.WhichOneof("entity") == "table_entry":
        te = u.entity.table_entry
        t = names.table_by_id.get(te.table_id) if names is not None else None
        return f"{kind} {t.name if t else hex(te.table_id)}{' (default)' if te.is_default_action else ''}"
    if u.entity.WhichOneof("entity") == "packet_replication_engine_entry":
        return f"{kind} multicast group {u.entity.packet_replication_engine_entry.multicast_group_entry.multicast_group_id}"
    return f"{kind} {text(u.entity)[:80].strip()}"


def _describe(exc: grpc.RpcError, updates: list[Msg] | None = None, names: Names | None = None) -> str:
    """A failed RPC as one message: the status, and for Write each refused update with its reason."""
    code = exc.code() if hasattr(exc, "code") else None
    lines = [f"{code.name if code else 'error'}: {exc.details() if hasattr(exc, 'details') else exc}"]
    for key, value in (exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else ():
        if key != "grpc-status-details-bin":
            continue
        st = status_pb2.Status.FromString(value)
        for i, any_ in enumerate(st.details):
            err = p4runtime_pb2.Error()
            if any_.Unpack(err) and err.canonical_code != code_pb2.OK:
                what = f" ({label(updates[i], names)})" if updates is not None and i < len(updates) else ""
                lines.append(f"update {i}{what}: {code_pb2.Code.Name(err.canonical_code)}: {err.message}")
    return "\n  ".join(lines[:21]) + (f"\n  ... {len(lines) - 21} more" if len(lines) > 21 else "")


def _listening(address: str) -> bool:
    """Whether something accepts TCP connections at HOST:PORT (a server that would not speak
    gRPC in clear is a TLS one, most likely)."""
    import socket
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


class P4RuntimeClient:
    def __init__(self, address: str, device_id: int = 1, election_id: int = 1, timeout: float = 5.0,
                 primary: bool = True, tls: TlsFiles | None = None, tls_name: str | None = None) -> None:
        """`primary`: insist on winning the arbitration (a writer); a reader (counters, entries)
        may stay secondary. `tls`: the CA that signed the switch's certificate and ours (mutual
        TLS); `tls_name`: the name the switch's certificate carries, when the address is not it."""
        self.address, self.device_id, self.election = address, device_id, (0, election_id)
        self.timeout = timeout
        if tls is not None and tls.enabled:
            options = [("grpc.ssl_target_name_override", tls_name)] if tls_name else []
            self.channel = grpc.secure_channel(address, grpc_channel_credentials(tls), options=options)
        else:
            self.channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.requests: queue.Queue = queue.Queue()
        self.arbitration: queue.Queue = queue.Queue()
        self.broken = threading.Event()
        self.ended = ""                  # how the switch ended the stream (its status), if it did
        self.primary = False
        self._names: Names | None = None
        self.must_be_primary = primary
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.channel.close()
            if tls is not None and tls.enabled:
                why = ("; with TLS: is the switch's certificate signed by our CA and named as the address "
                       "(or tls_name), and does it take our certificate?")
            elif _listening(address):
                raise P4RuntimeError(f"the server at {address} does not answer P4Runtime in clear: it wants TLS? "
                                     "(give the device its CA, `tls_ca` / --tls-ca, and our certificate if it asks "
                                     "for one)") from None
            else:
                why = ""
            raise P4RuntimeError(f"no P4Runtime server at {address} (within {timeout:g} s){why}") from None
        self.responses = self.stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._listen, daemon=True, name=f"p4rt-{address}").start()
        self._arbitrate()

    def _listen(self) -> None:
        try:
            for r in self.responses:
                if r.WhichOneof("update") == "arbitration":
                    self.primary = r.arbitration.status.code == code_pb2.OK
                    self.arbitration.put(r.arbitration)
                elif r.WhichOneof("update") == "error":
                    self.arbitration.put(r.error)
        except grpc.RpcError as exc:      # 5.3: a refused arbitration ends the stream with a status
            code = exc.code() if hasattr(exc, "code") else None
            self.ended = f"{code.name if code else 'error'}: {exc.details() if hasattr(exc, 'details') else exc}"
        self.broken.set()
        self.arbitration.put(None)

    def _arbitrate(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election
        self.requests.put(req)
        try:
            got = self.arbitration.get(timeout=self.timeout)
        except queue.Empty:
            got = None
        if got is None:
            self.close()
            raise P4RuntimeError(f"{self.address}: the switch refused the arbitration: {self.ended}" if self.ended
                                 else f"{self.address}: no arbitration answer (stream closed or timed out)")
        if isinstance(got, p4runtime_pb2.StreamError):
            self.close()
            raise P4RuntimeError(f"{self.address}: {got.message}")
        if got.status.code != code_pb2.OK and self.must_be_primary:
            primary = (got.election_id.high << 64) | got.election_id.low
            self.close()
            if got.status.code == code_pb2.NOT_FOUND:      # 5.4: no primary, ours is below the highest seen
                raise P4RuntimeError(f"{self.address}: no primary for device {self.device_id}, and our election id "
                                     f"{self.election[1]} is below the highest the switch has seen ({primary}): "
                                     "use an election id at least that high to take over")
            raise P4RuntimeError(f"{self.address}: another controller is primary for device {self.device_id} "
                                 f"(election id {primary}; ours is {self.election[1]})")

    @property
    def lost(self) -> bool:
        """The stream broke: the switch restarted or went away (its tables may be gone)."""
        return self.broken.is_set()

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()

    def _call(self, what: str, fn: Any, request: Msg, updates: list[Msg] | None = None) -> Any:
        try:
            return fn(request, timeout=self.timeout * 4)
        except grpc.RpcError as exc:
            raise P4RuntimeError(f"{self.address} {what}: {_describe(exc, updates, self._names)}") from None

    # -- pipeline ----------------------------------------------------------------------------
    def pipeline(self) -> Msg | None:
        """The P4Info the switch runs, or None when it has no pipeline yet."""
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        got = self._call("GetForwardingPipelineConfig", self.stub.GetForwardingPipelineConfig, req)
        return got.config.p4info if got.config.HasField("p4info") and len(got.config.p4info.tables) else None

    def set_pipeline(self, p4info: Msg, device_config: bytes, cookie: int = 0) -> None:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        req.election_id.high, req.election_id.low = self.election
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        req.config.cookie.cookie = cookie
        self._call("SetForwardingPipelineConfig", self.stub.SetForwardingPipelineConfig, req)
        self._names = None

    def names(self) -> Names:
        if self._names is None:
            info = self.pipeline()
            if info is None:
                raise P4RuntimeError(f"{self.address}: the switch runs no pipeline (load the camus program first)")
            self._names = Names(info)
        return self._names

    # -- entries -----------------------------------------------------------------------------
    def read(self) -> list[Msg]:
        """Every table entry, every default entry of the subscription tables, every multicast group."""
        E, T = p4runtime_pb2.Entity, p4runtime_pb2.TableEntry
        wanted = [E(table_entry=T(table_id=0))]
        wanted += [E(table_entry=T(table_id=t.id, is_default_action=True)) for t in self.names().tables.values()]
        wanted.append(E(packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            multicast_group_entry=p4runtime_pb2.MulticastGroupEntry(multicast_group_id=0))))
        return self.read_entities(wanted)

    def read_entities(self, entities: list[Msg]) -> list[Msg]:
        """What the switch holds that these filters select (P4Runtime 9.1.6 and 13.2: a table
        entry with a full key reads that entry alone; table id 0 reads every table)."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=entities)
        try:
            return [e for r in self.stub.Read(req, timeout=self.timeout * 4) for e in r.entities]
        except grpc.RpcError as exc:
            raise P4RuntimeError(f"{self.address} Read: {_describe(exc)}") from None

    def read_default(self, table: str) -> Msg | None:
        """One table's default entry as the switch holds it (the program's own until written: 9.1.3)."""
        te = p4runtime_pb2.TableEntry(table_id=self.names().table(table).id, is_default_action=True)
        got = self.read_entities([p4runtime_pb2.Entity(table_entry=te)])
        return got[0].table_entry if got else None

    def read_counter(self, name: str) -> dict[int, int]:
        """A counter of the program, cell -> packets (`camus_delivered`: delivered copies per port)."""
        got = self.names().counters.get(name)
        if got is None:
            raise P4RuntimeError(f"{self.address}: the switch's P4Info has no counter {name!r} "
                                 f"(it has {', '.join(sorted(self.names().counters)) or 'none'})")
        cells = self.read_entities([p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=got[0]))])
        return {e.counter_entry.index.index: e.counter_entry.data.packet_count for e in cells}

    def write(self, updates: list[Msg]) -> None:
        """Updates in order, CHUNK per RPC; the first refused chunk stops the rest."""
        for i in range(0, len(updates), CHUNK):
            batch = updates[i:i + CHUNK]
            req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
            req.election_id.high, req.election_id.low = self.election
            req.updates.extend(batch)
            self._call("Write", self.stub.Write, req, batch)
