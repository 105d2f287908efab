"""The software switch by the P4Runtime specification (1.4), checked by two clients written by
others — p4runtime-shell 0.0.6 and finsy 0.30.0, each in its own venv (scripts/setup.sh) —
and by our own client on the same cases. Each switch starts with no pipeline; the client sets
it. Spec points covered, by the specification's section:

  5.3   arbitration: primary by the highest election id seen; backups; a taken id, another
        device, an unknown role end the stream (INVALID_ARGUMENT / NOT_FOUND)
  5.4   notifications: OK / ALREADY_EXISTS / NOT_FOUND (no primary after the primary leaves)
  9.1   table entries keyed by match and priority (several entries, several priorities)
  9.1.3 default entries: read even when never written, MODIFY only, reset by MODIFY without action
  9.1.6 wildcard reads and filters: all tables, one table, one key, priority, action
  9.3.2 counters: all cells, one cell
  9.5.1 multicast groups: insert, read all, read one
  12    Write: device / role NOT_FOUND, backup PERMISSION_DENIED, no pipeline FAILED_PRECONDITION
  12.2  atomicity: CONTINUE_ON_ERROR, ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC (all or none)
  12.3  error reporting: UNKNOWN with one p4.v1.Error per update, in order
  13    Read: device NOT_FOUND, no pipeline FAILED_PRECONDITION, an empty entity INVALID_ARGUMENT
  14    SetForwardingPipelineConfig: VERIFY, VERIFY_AND_SAVE + COMMIT, VERIFY_AND_COMMIT,
        RECONCILE_AND_COMMIT, COMMIT without a saved config NOT_FOUND
  15    GetForwardingPipelineConfig: ALL, COOKIE_ONLY, P4INFO_AND_COOKIE, DEVICE_CONFIG_AND_COOKIE
  17    Capabilities: 1.4.0
"""
from __future__ import annotations

import json
import queue
import socket
import subprocess
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2, status_pb2

from camus.compiler.backends.p4.entries import Match, P4Entry
from camus.compiler.backends.p4.runtime import (INSERT, MODIFY, Names, default_entry, group_entry, p4info_message,
                                                p4runtime_pb2, p4runtime_pb2_grpc, table_entry, text, update)
from camus.compiler.language.spec_parser import load_spec
from camus.controller.p4rt_client import P4RuntimeClient, P4RuntimeError
from camus.controller.p4rt_server import P4RuntimeSwitch
from tests.conftest import APPS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "conformance"
SPEC_PATH = APPS / "itch" / "itch.p4"
SPEC = load_spec(SPEC_PATH)
CLIENTS = {"p4runtime-shell": HERE / "shell_client.py", "finsy": HERE / "finsy_client.py"}
R = p4runtime_pb2.WriteRequest
G = p4runtime_pb2.GetForwardingPipelineConfigRequest
S = p4runtime_pb2.SetForwardingPipelineConfigRequest


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A P4Runtime server on loopback holding no pipeline until a client sets one."""

    def __init__(self) -> None:
        self.port = _port()
        self.address = f"127.0.0.1:{self.port}"
        self.service = P4RuntimeSwitch(1)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.service, self.server)
        assert self.server.add_insecure_port(self.address)
        self.server.start()
        self.channel = grpc.insecure_channel(self.address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        self.server.stop(grace=None).wait()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def p4info_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("p4rt") / "p4info.txtpb"
    path.write_text(text(p4info_message(SPEC)))
    return path


def _run_client(name: str, server: Server, p4info: Path, election: int) -> dict:
    python = ROOT / ".venv-conformance" / name / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{name} is not installed in {python.parent.parent} (scripts/setup.sh installs it from PyPI)")
    got = subprocess.run([str(python), str(CLIENTS[name]), server.address, str(p4info), str(SPEC_PATH), str(election)],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_p4runtime_shell_drives_the_switch(server: Server, p4info_file: Path) -> None:
    """Pipeline (14), entries by key and priority (9.1), filtered reads (9.1.6), a duplicate
    (12.3), MODIFY, the default entry (9.1.3), a group (9.5.1), counters (9.3.2), DELETE."""
    got = _run_client("p4runtime-shell", server, p4info_file, 10)
    assert "error" not in got, got
    assert got["table_all"] == 4
    assert got["one_key"] == [2]                        # exactly the entry with that key and priority
    assert got["one_key_any_priority"] == [1, 2]        # the key with priority 0: both priorities
    assert got["no_such_key"] == []
    assert got["priority_filter"] == [1, 3, 4]
    assert "ALREADY_EXISTS" in got["duplicate"]
    assert got["modified"] == [6] and got["default"] == [7]
    assert got["group"] == [[1, 2]]
    assert got["counter_cells"] == 512 and got["after_delete"] == 3 and got["api_version"] == "1.4.0"


def test_finsy_drives_the_switch(server: Server, p4info_file: Path) -> None:
    """Arbitration as primary and as backup (5.3), reads of one key, one table and all tables
    (9.1.6), ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC (12.2) with per-update errors (12.3),
    a group written with 1.4's replica port bytes (9.5.1), a backup's write refused (12)."""
    got = _run_client("finsy", server, p4info_file, 20)
    assert got["primary"] is True
    assert got["one_key"] == [2] and got["table_all"] == 3 and got["all_tables"] == 3
    assert got["rollback"] == "ABORTED ALREADY_EXISTS" and got["rollback_kept"] == []
    assert got["atomic"] == "OK" and got["atomic_kept"] == 5
    assert got["group"] == [[3, 4]]
    assert got["backup_primary"] is False and got["backup_reads"] == 5 and got["backup_write"] == "PERMISSION_DENIED"


# -- our own client and raw requests on the same points -------------------------------------------

def _price(state: int, lo: int, hi: int, prio: int, nxt: int) -> P4Entry:
    return P4Entry("t_add_order_price", (Match("meta.state", "exact", state), Match("add_order.price", "range", lo, hi)),
                   "set_state", (nxt,), prio)


def _details(exc: grpc.RpcError) -> list[int]:
    for k, v in exc.trailing_metadata() or ():
        if k == "grpc-status-details-bin":
            out = []
            for d in status_pb2.Status.FromString(v).details:
                e = p4runtime_pb2.Error()
                d.Unpack(e)
                out.append(e.canonical_code)
            return out
    return []


def test_our_client_on_the_same_cases(server: Server) -> None:
    info = p4info_message(SPEC)
    c = P4RuntimeClient(server.address, 1, election_id=30, timeout=5.0)
    try:
        with pytest.raises(P4RuntimeError, match="runs no pipeline"):
            c.names()
        c.set_pipeline(info, SPEC_PATH.read_text().encode(), cookie=77)
        names = c.names()
        entries = [_price(7, 10, 20, 5, 1), _price(7, 10, 20, 9, 2), _price(7, 30, 40, 5, 3), _price(8, 10, 20, 5, 4)]
        c.write([update(INSERT, table_entry(names, e)) for e in entries] +
                [update(INSERT, group_entry(5, (1, 2)))])
        one = p4runtime_pb2.Entity(table_entry=table_entry(names, entries[1]))
        got = c.read_entities([one])
        assert len(got) == 1 and got[0].table_entry.priority == 9          # one key: that entry alone
        key_only = p4runtime_pb2.Entity(table_entry=table_entry(names, entries[1]))
        key_only.table_entry.ClearField("action")
        key_only.table_entry.priority = 0
        assert sorted(e.table_entry.priority for e in c.read_entities([key_only])) == [5, 9]
        every = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())
        assert len(c.read_entities([every])) == 4                            # table_id 0: all tables
        assert c.read_default("t_root") is not None                          # 9.1.3: always set
        with pytest.raises(P4RuntimeError, match=r"update 0 \(INSERT t_add_order_price\): ALREADY_EXISTS"):
            c.write([update(INSERT, table_entry(names, entries[0]))])
        assert set(c.read_counter("camus_delivered")) == set(range(512))
    finally:
        c.close()


def test_write_atomicity_and_error_reporting(server: Server) -> None:
    c = P4RuntimeClient(server.address, 1, election_id=30, timeout=5.0)
    try:
        c.set_pipeline(p4info_message(SPEC), SPEC_PATH.read_text().encode())
        names = c.names()
        good, dup = table_entry(names, _price(9, 1, 2, 5, 1)), table_entry(names, _price(7, 10, 20, 5, 1))
        c.write([update(INSERT, dup)])
        for atomicity, kept, codes in ((R.CONTINUE_ON_ERROR, 2, [code_pb2.OK, code_pb2.ALREADY_EXISTS]),
                                       (R.ROLLBACK_ON_ERROR, 1, [code_pb2.ABORTED, code_pb2.ALREADY_EXISTS]),
                                       (R.DATAPLANE_ATOMIC, 1, [code_pb2.ABORTED, code_pb2.ALREADY_EXISTS])):
            server.service._load(SPEC, SPEC_PATH.read_text(), server.service.info)      # empty again
            c.write([update(INSERT, dup)])
            req = R(device_id=1, election_id=p4runtime_pb2.Uint128(low=30), atomicity=atomicity,
                    updates=[update(INSERT, good), update(INSERT, dup)])
            with pytest.raises(grpc.RpcError) as exc:
                server.stub.Write(req)
            assert exc.value.code() == grpc.StatusCode.UNKNOWN and _details(exc.value) == codes   # 12.3
            assert len(server.service.tables().entries) == kept
        bad = R(device_id=2, election_id=p4runtime_pb2.Uint128(low=30))
        with pytest.raises(grpc.RpcError) as exc:
            server.stub.Write(bad)
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as exc:
            server.stub.Write(R(device_id=1, role="other", election_id=p4runtime_pb2.Uint128(low=30)))
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as exc:
            server.stub.Write(R(device_id=1, election_id=p4runtime_pb2.Uint128(low=3)))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
        default = default_entry(names, "t_root", "set_state", (4,))
        with pytest.raises(P4RuntimeError, match="INVALID_ARGUMENT: a default entry is only modified"):
            c.write([update(INSERT, default)])
        c.write([update(MODIFY, default)])
        reset = p4runtime_pb2.TableEntry(table_id=names.table("t_root").id, is_default_action=True)
        c.write([update(MODIFY, reset)])                                    # 9.1.3: back to the program's
        assert server.service.tables().root == 0
    finally:
        c.close()


def test_reads_before_a_pipeline_and_malformed_reads(server: Server) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        list(server.stub.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[p4runtime_pb2.Entity(
            table_entry=p4runtime_pb2.TableEntry())])))
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    server.service._load(SPEC, SPEC_PATH.read_text(), p4info_message(SPEC))
    for req, code in ((p4runtime_pb2.ReadRequest(device_id=9), grpc.StatusCode.NOT_FOUND),
                      (p4runtime_pb2.ReadRequest(device_id=1, entities=[p4runtime_pb2.Entity()]),
                       grpc.StatusCode.INVALID_ARGUMENT),
                      (p4runtime_pb2.ReadRequest(device_id=1, entities=[p4runtime_pb2.Entity(
                          table_entry=p4runtime_pb2.TableEntry(priority=3))]), grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as exc:
            list(server.stub.Read(req))
        assert exc.value.code() == code


def test_pipeline_config_actions_and_response_types(server: Server) -> None:
    info = p4info_message(SPEC)
    c = P4RuntimeClient(server.address, 1, election_id=30, timeout=5.0)
    try:
        assert not server.stub.GetForwardingPipelineConfig(G(device_id=1)).HasField("config")      # 15: unset
        cfg = p4runtime_pb2.ForwardingPipelineConfig(p4info=info, p4_device_config=SPEC_PATH.read_bytes())
        cfg.cookie.cookie = 42
        elect = p4runtime_pb2.Uint128(low=30)
        server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.VERIFY, config=cfg))
        assert server.service.state is None                                 # VERIFY changes nothing
        with pytest.raises(grpc.RpcError) as exc:
            server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.COMMIT))
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND                # nothing saved
        server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.VERIFY_AND_SAVE,
                                                  config=cfg))
        names = Names(info)
        c.write([update(INSERT, table_entry(names, _price(7, 10, 20, 5, 1)))])   # refers to the saved config
        assert server.service.state is None
        server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.COMMIT))
        assert len(server.service.tables().entries) == 1                   # with the writes since the save
        server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.RECONCILE_AND_COMMIT,
                                                  config=cfg))
        assert len(server.service.tables().entries) == 1                   # kept
        server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.VERIFY_AND_COMMIT,
                                                  config=cfg))
        assert len(server.service.tables().entries) == 0                   # cleared
        with pytest.raises(grpc.RpcError) as exc:
            server.stub.SetForwardingPipelineConfig(S(device_id=1, election_id=elect, action=S.UNSPECIFIED,
                                                      config=cfg))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for kind, has_info, has_blob in ((G.ALL, True, True), (G.COOKIE_ONLY, False, False),
                                         (G.P4INFO_AND_COOKIE, True, False), (G.DEVICE_CONFIG_AND_COOKIE, False, True)):
            got = server.stub.GetForwardingPipelineConfig(G(device_id=1, response_type=kind)).config
            assert (got.HasField("p4info"), bool(got.p4_device_config), got.cookie.cookie) == (has_info, has_blob, 42)
        caps = server.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
        assert caps.p4runtime_api_version == "1.4.0"
    finally:
        c.close()


class _Stream:
    """A raw stream channel: arbitration requests in, responses (or the status that ended it) out."""

    def __init__(self, server: Server) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.got: queue.Queue = queue.Queue()
        self.call = server.stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        try:
            for r in self.call:
                self.got.put(r.arbitration)
        except grpc.RpcError as exc:
            self.got.put(exc.code())

    def arbitrate(self, election: int, device: int = 1, role: str = "") -> object:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = device
        req.arbitration.election_id.low = election
        if role:
            req.arbitration.role.name = role
        self.requests.put(req)
        return self.got.get(timeout=10)

    def close(self) -> None:
        self.requests.put(None)


def test_arbitration_by_the_spec(server: Server) -> None:
    a, b = _Stream(server), _Stream(server)
    try:
        first = a.arbitrate(5)
        assert first.status.code == code_pb2.OK                             # the first: primary
        second = b.arbitrate(3)
        assert second.status.code == code_pb2.ALREADY_EXISTS and second.election_id.low == 5   # backup
        a.close()                                                           # the primary leaves
        told = b.got.get(timeout=10)
        assert told.status.code == code_pb2.NOT_FOUND and told.election_id.low == 5   # no primary now
        again = b.arbitrate(4)                                              # still below the highest seen
        assert again.status.code == code_pb2.NOT_FOUND
        took = b.arbitrate(6)
        assert took.status.code == code_pb2.OK
        assert _Stream(server).arbitrate(6) == grpc.StatusCode.INVALID_ARGUMENT       # taken
        assert _Stream(server).arbitrate(7, device=2) == grpc.StatusCode.NOT_FOUND     # another device
        assert _Stream(server).arbitrate(7, role="sdn") == grpc.StatusCode.NOT_FOUND   # no such role
        assert b.arbitrate(6, device=3) == grpc.StatusCode.FAILED_PRECONDITION        # another device later
    finally:
        a.close()
        b.close()
