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
    intruder = P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, election_id=9, timeout=3.0)
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
    got = CliRunner().invoke(main, args)
    out = json.loads(got.output)
    assert got.exit_code == 1 and out["verdict"] == "differs", got.output
    values = out["counterexample"]["message"]
    held = EntryInterpreter(sw.service.tables()).run(dict(values))       # what the switch does with it
    assert 7 in held.ports and "7" not in out["counterexample"]["rules"], out
