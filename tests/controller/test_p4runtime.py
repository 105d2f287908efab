"""The controller and a switch over real P4Runtime (gRPC on loopback, no root): arbitration,
names resolved from the switch's own P4Info, deltas written make-before-break, per-update
errors made readable, and a restarted or tampered-with switch re-synchronised by reading back
and writing only the difference."""
from __future__ import annotations

import socket
import time
from concurrent import futures

import grpc
import pytest

from camus.compiler.backends.p4.entries import P4Entry
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.runtime import p4runtime_pb2, p4runtime_pb2_grpc
from camus.compiler.codec.packets import message_from_text
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.controller.core import Controller
from camus.controller.p4rt_client import P4RuntimeClient, P4RuntimeError
from camus.controller.p4rt_server import P4RuntimeSwitch
from camus.controller.targets import P4RuntimeTarget
from camus.controller.topology import Topology
from tests.conftest import APPS

SPEC_PATH = APPS / "itch" / "itch.p4"
SPEC = load_spec(SPEC_PATH)
MSGS = [f"stock={s} price={p} shares={n}" for s in ("GOOGL", "AAPL", "MSFT", "ZZZ")
        for p in (10, 600_000, 2_500_000) for n in (5, 500)]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Switch:
    """A P4Runtime server on loopback holding one device's tables (what softswitch serves)."""

    def __init__(self, port: int, spec=SPEC, text: str = "") -> None:
        self.port = port
        self.service = P4RuntimeSwitch(1, spec, text or SPEC_PATH.read_text())
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.service, self.server)
        assert self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None).wait()

    def run(self, text: str):
        v = EntryInterpreter(self.service.tables()).run(message_from_text(SPEC, text))
        return v.ports


def _topology(address: str) -> Topology:
    t = Topology("one-switch")
    t.add_device("sw", "p4", "edge", p4runtime=address, device_id="1")
    for h in ("h1", "h2", "h3"):
        t.add_device(h, "host")
    for i, h in enumerate(("h1", "h2", "h3"), start=1):
        t.add_link("sw", h, i, 1)
    return t


@pytest.fixture
def lab():
    port = _port()
    sw = Switch(port)
    target = P4RuntimeTarget(f"127.0.0.1:{port}", 1, election_id=5, timeout=3.0)
    ctl = Controller(_topology(f"127.0.0.1:{port}"), SPEC, "mr", targets={"sw": target})
    yield sw, target, ctl
    if target.client is not None:
        target.client.close()
    sw.stop()


def _deliveries_agree(sw: Switch, ctl: Controller) -> None:
    ir = PipelineInterpreter(ctl.tables["sw"].compiled.pipeline)
    for text in MSGS:
        want = ir.run(message_from_text(SPEC, text), 0).actions
        assert sw.run(text) == tuple(want.ports), text


def test_subscriptions_reach_the_switch_as_deltas_over_grpc(lab) -> None:
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL and price > 500000", 30)
    ctl.add("h2", "stock == AAPL", 30)
    assert ctl.push_pending() == {"sw": True}, ctl.status()
    _deliveries_agree(sw, ctl)
    held = target.current("sw")                 # a restarted controller can tell what the switch holds
    assert held is not None and (held.digest, held.rules) == (ctl.tables["sw"].digest, 2)
    full = target.last["insert"]
    s3 = ctl.add("h3", "stock == MSFT and shares < 100", 30)
    assert ctl.push_pending() == {"sw": True}
    _deliveries_agree(sw, ctl)
    assert 0 < sum(target.last.values()) and target.last["insert"] < full + 10
    ctl.remove("h3", s3.id)
    ctl.push_pending()
    _deliveries_agree(sw, ctl)
    assert sw.run("stock=MSFT price=10 shares=5") == ()
    assert target.push("sw", ctl.tables["sw"]).startswith("0 inserted, 0 modified, 0 deleted")


def test_a_restarted_switch_is_resynchronised_and_a_changed_one_gets_only_the_difference(lab) -> None:
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL", 30)
    ctl.add("h2", "price > 1000000", 30)
    ctl.push_pending()
    assert ctl.status()["devices"]["sw"]["in_sync"]
    sw.stop()                                                  # the switch restarts, empty
    fresh = Switch(sw.port)
    deadline = time.monotonic() + 60                         # until the client has seen its session break
    while not target.lost("sw"):
        assert time.monotonic() < deadline, "the broken session was never noticed"
        time.sleep(0.05)
    assert ctl.pending() == ["sw"] and ctl.push_pending() == {"sw": True}
    _deliveries_agree(fresh, ctl)
    # one entry lost behind the controller's back: a re-sync writes just that one
    key, (te, _) = next((k, v) for k, v in fresh.service.entries.items() if v[1].table == "t_leaf")
    del fresh.service.entries[key]
    target.forget()                             # (the session is intact: make the push read back)
    assert target.push("sw", ctl.tables["sw"]).startswith("1 inserted, 0 modified, 0 deleted")
    _deliveries_agree(fresh, ctl)
    fresh.stop()


def test_arbitration_and_refused_updates_are_explained(lab) -> None:
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL", 30)
    ctl.push_pending()                                          # the controller is primary (election id 5)
    with pytest.raises(P4RuntimeError, match="another controller is primary"):
        P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, election_id=2, timeout=3.0)
    with pytest.raises(P4RuntimeError, match="election id 5 is taken"):
        P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, election_id=5, timeout=3.0)
    c = target.client
    names = c.names()
    bad = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    te = bad.entity.table_entry
    te.table_id = names.table("t_leaf").id
    te.match.add(field_id=1).exact.value = b"\x07"
    te.action.action.action_id = names.action("set_state")[0]        # not one of t_leaf's actions
    with pytest.raises(P4RuntimeError, match=r"update 0 \(INSERT .*INVALID_ARGUMENT: t_leaf: action id"):
        c.write([bad])
    with pytest.raises(P4RuntimeError, match="no P4Runtime server"):
        P4RuntimeClient(f"127.0.0.1:{_port()}", 1, timeout=0.5)


def test_names_come_from_the_switchs_p4info_whatever_ids_it_chose(lab) -> None:
    """A switch whose compiler chose other ids: entries still land in the right tables."""
    sw, target, ctl = lab
    info = sw.service.info
    for k, t in enumerate(info.tables):
        t.preamble.id = 0x02000100 + k
    for k, a in enumerate(info.actions):
        old, new = a.preamble.id, 0x01000100 + k
        a.preamble.id = new
        for t in info.tables:
            for r in t.action_refs:
                if r.id == old:
                    r.id = new
    sw.service._load(SPEC, SPEC_PATH.read_text(), info)
    ctl.add("h1", "stock == GOOGL and price > 500000", 30)
    assert ctl.push_pending() == {"sw": True}, ctl.status()
    _deliveries_agree(sw, ctl)
    assert all(isinstance(e, P4Entry) for _, e in sw.service.entries.values())


def test_counters_are_read_by_any_client(lab) -> None:
    """The program's per-port delivered counter, counted by the switch, read by a secondary client."""
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL", 30)
    ctl.push_pending()
    sw.service.count("camus_delivered", 2, 3)
    sw.service.count("camus_delivered", 7)
    reader = P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, election_id=2, timeout=3.0, primary=False)
    try:
        cells = reader.read_counter("camus_delivered")
        assert len(cells) == 512 and cells[2] == 3 and cells[7] == 1 and cells[1] == 0
        with pytest.raises(P4RuntimeError, match="no counter 'nope'"):
            reader.read_counter("nope")
    finally:
        reader.close()


def test_sixty_thousand_refused_updates_come_back_summarised(lab) -> None:
    """Issue 40: one Write of 60,000 refused updates answered RESOURCE_EXHAUSTED (the per-update
    errors past gRPC's metadata limit), so the caller saw none of them."""
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL", 30)
    ctl.push_pending()
    c = target.client
    names = c.names()
    bad = p4runtime_pb2.Update(type=p4runtime_pb2.Update.DELETE)
    te = bad.entity.table_entry
    te.table_id = names.table("t_leaf").id
    te.match.add(field_id=1).exact.value = b"\x00\x00\x7f\x00"        # a state nobody holds
    te.action.action.action_id = names.action("drop_msg")[0]
    request = p4runtime_pb2.WriteRequest(device_id=1, election_id=p4runtime_pb2.Uint128(high=0, low=5),
                                         updates=[bad] * 60_000)
    with pytest.raises(grpc.RpcError) as err:
        c.stub.Write(request, timeout=60)
    assert err.value.code() == grpc.StatusCode.UNKNOWN, err.value
    text = err.value.details()
    assert text.startswith("60000 of 60000 updates refused; update 0: NOT_FOUND") and "more" in text
    few = [bad] * 3                                       # a few: one Error per update, as before
    with pytest.raises(P4RuntimeError, match=r"update 2 \(DELETE t_leaf\): NOT_FOUND"):
        c.write(few)


def test_a_cover_with_port_filters_is_pushed_and_changed_over_p4runtime() -> None:
    """A controller whose switch gets a narrow cover: the egress port filters go over P4Runtime
    with the rest (the switch's P4Info declares them under CamusEgress), the switch delivers what
    the IR does on every message, and a change renumbers the filters make-before-break."""
    from camus.compiler.compile import CompileOptions
    port = _port()
    sw = Switch(port)
    target = P4RuntimeTarget(f"127.0.0.1:{port}", 1, election_id=5, timeout=3.0)
    narrow = CompileOptions(switch_entries=1, cover_width=2, cover_fanout=2)     # a cover, whatever the rules
    ctl = Controller(_topology(f"127.0.0.1:{port}"), SPEC, "mr", options=narrow, targets={"sw": target})
    try:
        ctl.add("h1", "stock == GOOGL and price > 500000", 30)
        ctl.add("h2", "stock == AAPL and shares < 100", 30)
        ctl.add("h3", "stock == MSFT or price < 100", 30)
        assert ctl.push_pending() == {"sw": True}, ctl.status()
        pipeline = ctl.tables["sw"].compiled.pipeline
        assert pipeline.cover is not None and pipeline.port_filters is not None
        assert any(e.table.startswith("t_pf_") for e in sw.service.tables().entries)
        _deliveries_agree(sw, ctl)
        ctl.add("h1", "stock == AAPL and price > 2000000", 30)
        assert ctl.push_pending() == {"sw": True}
        _deliveries_agree(sw, ctl)
        # what the switch holds, filters included, never under-delivers (verify reads it back)
        from camus.verify.check import check
        from camus.verify.rules import read_rules
        from camus.verify.targets import switch_p4_machine
        rules = read_rules(SPEC, ctl.tables["sw"].compiled.source.text)
        machine = switch_p4_machine(SPEC, f"127.0.0.1:{port}")
        assert machine.filters and check(rules, machine, cover=True).verdict == "covers"
    finally:
        if target.client is not None:
            target.client.close()
        sw.stop()


def test_a_push_whose_tables_differ_from_its_rules_is_refused_before_anything_is_written(lab) -> None:
    """`controller serve --verify-pushes`: each push's planned tables are proven against the
    device's rules before the first write. Tables compiled from other rules (a stand-in for a
    compiler bug) are refused with the message they differ on, and the switch keeps what it had."""
    from camus.compiler.compile import compile_rules
    from camus.controller.devices import DeviceTables
    from camus.controller.targets import PushError
    sw, target, ctl = lab
    target.verify_pushes = True
    ctl.add("h1", "stock == GOOGL and price > 500000", 30)
    ctl.add("h2", "stock == AAPL", 30)
    assert ctl.push_pending() == {"sw": True}, ctl.status()
    good = ctl.tables["sw"]
    assert target.push("sw", good).endswith("proven equal before writing")
    held = sorted(map(str, sw.service.tables().entries))
    wrong = good.rules.replace("AAPL", "MSFT", 1)
    assert wrong != good.rules
    bad = DeviceTables("sw", "p4", "bad0", good.rule_count, good.rules, compiled_=compile_rules(SPEC, wrong))
    with pytest.raises(PushError, match="refused before writing: the planned tables differ from the rules"):
        target.push("sw", bad)
    assert sorted(map(str, sw.service.tables().entries)) == held          # nothing written
    _deliveries_agree(sw, ctl)
    assert target.push("sw", good).startswith("0 inserted, 0 modified, 0 deleted")
