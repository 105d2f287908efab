"""`camus-xdp verify --switch`: what a running switch holds, read back over P4Runtime (as a
reader: the controller writing to it stays primary), is proven equal to the rules the controller
placed there; one entry changed behind the controller's back is reported with a counterexample
the switch's own entries confirm."""
from __future__ import annotations

import json

from click.testing import CliRunner

from camus.cli import main
from camus.compiler.backends.p4.runtime import p4runtime_pb2
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.controller.p4rt_client import P4RuntimeClient
from tests.controller.test_p4runtime import SPEC_PATH, lab  # noqa: F401  (the fixture)


def send_a_leaf_to_port_7(port: int) -> None:
    """Another P4Runtime client (a higher election id) changes one t_leaf entry to port 7."""
    intruder = P4RuntimeClient(f"127.0.0.1:{port}", 1, election_id=9, timeout=3.0)
    try:
        names = intruder.names()
        leaf = next(e.table_entry for e in intruder.read()
                    if e.WhichOneof("entity") == "table_entry" and e.table_entry.table_id == names.table("t_leaf").id
                    and e.table_entry.action.action.action_id == names.action("set_port")[0])
        changed = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
        changed.entity.table_entry.CopyFrom(leaf)
        changed.entity.table_entry.action.action.params[0].value = b"\x07"
        intruder.write([changed])
    finally:
        intruder.close()


def test_a_switch_is_verified_by_reading_it_back_and_a_tampered_entry_is_caught(lab, tmp_path) -> None:  # noqa: F811
    sw, target, ctl = lab
    ctl.add("h1", "stock == GOOGL and price > 500000", 30)
    ctl.add("h2", "stock == AAPL or shares < 100", 30)
    assert ctl.push_pending() == {"sw": True}
    rules = tmp_path / "sw.txt"
    rules.write_text(ctl.tables["sw"].compiled.source.text)
    args = ["verify", str(SPEC_PATH), str(rules), "--target", "p4", "--switch", f"127.0.0.1:{sw.port}", "--json"]
    got = CliRunner().invoke(main, args)
    assert got.exit_code == 0 and json.loads(got.output)["verdict"] == "equal", got.output
    assert target.client is not None and target.client.primary and not target.client.lost   # still the writer

    # behind the controller's back: one leaf entry now sends its messages to another port
    send_a_leaf_to_port_7(sw.port)
    got = CliRunner().invoke(main, args)
    out = json.loads(got.output)
    assert got.exit_code == 1 and out["verdict"] == "differs", got.output
    values = out["counterexample"]["message"]
    held = EntryInterpreter(sw.service.tables()).run(dict(values))       # what the switch does with it
    assert 7 in held.ports and "7" not in out["counterexample"]["rules"], out


def test_the_controller_verifies_its_switch_and_names_a_tampered_entry(lab) -> None:  # noqa: F811
    """`camus-xdp controller verify DEVICE`: the controller's service reads the switch back and
    proves it (GET /v1/devices/{device}/verify); a push pending, an unknown device and an entry
    changed by another client each get their answer; the command prints and exits by it."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from camus.controller.service import make_app
    from camus.controller.verifying import verify_device
    sw, target, ctl = lab
    tokens = {"tok": "h1"}
    ctl.add("h1", "stock == GOOGL and price > 500000", 30)
    ctl.add("h2", "stock == AAPL or shares < 100", 30)
    from camus.controller.verifying import NotCheckable
    try:                                         # not pushed yet: the switch may hold the set before
        verify_device(ctl, "sw")
        raise AssertionError("a device with a push pending was judged")
    except NotCheckable as exc:
        assert exc.status == 409 and "pending" in str(exc)
    assert ctl.push_pending() == {"sw": True}
    assert verify_device(ctl, "sw")["verdict"] == "equal"

    def command(port: int, device: str) -> tuple[int, dict]:
        got = CliRunner().invoke(main, ["controller", "verify", device, "--controller", f"127.0.0.1:{port}",
                                        "--token", "tok", "--json"])
        return got.exit_code, (json.loads(got.output) if got.output.startswith("{") else {"text": got.output})

    async def go() -> None:
        async with TestClient(TestServer(make_app(ctl, tokens))) as client:
            port = client.server.port
            r = await client.get("/v1/devices/sw/verify", headers={"Authorization": "Bearer tok"})
            assert r.status == 200 and (await r.json())["verdict"] == "equal"
            r = await client.get("/v1/devices/nope/verify", headers={"Authorization": "Bearer tok"})
            assert r.status == 404
            assert (await client.get("/v1/devices/sw/verify")).status == 401
            loop = asyncio.get_running_loop()
            code, out = await loop.run_in_executor(None, command, port, "sw")
            assert code == 0 and out["verdict"] == "equal", out
            # another client changes one leaf: the controller's check names a message
            send_a_leaf_to_port_7(sw.port)
            code, out = await loop.run_in_executor(None, command, port, "sw")
            assert code == 1 and out["verdict"] == "differs", out
            held = EntryInterpreter(sw.service.tables()).run(dict(out["counterexample"]["message"]))
            assert 7 in held.ports, out

    asyncio.run(asyncio.wait_for(go(), 120))
