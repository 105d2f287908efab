"""`camus-xdp verify IFACE` (root, kernel): the tables live in an attached unit's pinned maps are
read back the way the XDP program walks them and proven equal to the rules the state file says
are live; one wrong value written into a live map with the BPF syscall is reported with a
message on which the kernel itself really disagrees with the rules; after a crashed update is
recovered, and after 100 deltas, the unit verifies again."""
from __future__ import annotations

import ctypes
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.dataplane import installed as state
from camus.dataplane import runtime
from camus.dataplane.maps import Leaf, MapSet, Slot
from tests.conftest import APPS, veth_pair
from tests.dataplane.test_live_update import served, wanted

pytestmark = pytest.mark.bpf
SPEC_PATH = APPS / "itch" / "itch.p4"
IF_A, IF_B = "cxlu-a", "cxlu-b"              # the names test_live_update's helpers read
SYMBOLS = [f"S{i:02d}" for i in range(24)]
PORTS = 6


def verify() -> tuple[int, dict]:
    res = CliRunner().invoke(main, ["verify", IF_A, "--json"], catch_exceptions=False)
    return res.exit_code, json.loads(res.stdout)


def cli(*args: str) -> None:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output


def rule(rng: random.Random) -> str:
    return f"stock == {rng.choice(SYMBOLS)} and price > {rng.randrange(1000)} : fwd({1 + rng.randrange(PORTS)})"


@pytest.fixture
def attached(tmp_path):
    with veth_pair(IF_A, IF_B):
        try:
            rng = random.Random(11)
            lines = [rule(rng) for _ in range(120)] + [f"stock == ANCHOR{p} : fwd({p})" for p in range(1, PORTS + 1)]
            path = tmp_path / "rules.txt"
            path.write_text("\n".join(lines) + "\n")
            cli("attach", IF_A, "--spec", str(SPEC_PATH), "--rules", str(path), "--mode", "generic")
            yield path, lines, rng
        finally:
            if state.state_path(IF_A).exists():
                runtime.detach(IF_A)


def as_text(values: dict[str, int]) -> str:
    return " ".join(f"{path}={value:#x}" for path, value in values.items())


def test_live_maps_verify_and_a_wrong_value_is_caught(attached) -> None:
    path, _, _ = attached
    code, doc = verify()
    assert code == 0 and doc["verdict"] == "equal", doc
    inst = state.load_installed(IF_A)
    maps = MapSet.from_pins(inst.pins)
    try:
        # one leaf that forwards: its port word moved by one bit (what a stray write would do)
        leaf = Leaf()
        s = next(s for s in inst.keys["leaf"] if maps.lookup("leaf", ctypes.c_uint32(s), leaf) and leaf.ports[0])
        before = Leaf.from_buffer_copy(leaf)
        leaf.ports[0] = (leaf.ports[0] << 1) & 0x3F or 1
        maps.update("leaf", ctypes.c_uint32(s), leaf)
        code, doc = verify()
        assert code == 1 and doc["verdict"] == "differs", doc
        cx = doc["counterexample"]
        msg = as_text(cx["message"])
        # the kernel, run on that very message, gives what verify says the tables give, and not
        # what the rules give
        got = served([msg])[0]
        assert set(got) != set(wanted(path.read_text(), [msg])[0]), (cx, got)
        assert cx["tables"] == (f"fwd({', '.join(got)})" if got else "not delivered"), (cx, got)
        maps.update("leaf", ctypes.c_uint32(s), before)
        assert verify()[0] == 0

        # an exact slot whose key no longer is the symbol's: that symbol's messages miss
        slot = Slot()
        i = next(i for i in inst.keys["xslots"] if maps.lookup("xslots", ctypes.c_uint32(i), slot) and slot.used)
        before_slot = Slot.from_buffer_copy(slot)
        slot.value ^= 1 << 40
        maps.update("xslots", ctypes.c_uint32(i), slot)
        code, doc = verify()
        assert code == 1 and doc["verdict"] == "differs", doc
        msg = as_text(doc["counterexample"]["message"])
        assert served([msg]) != wanted(path.read_text(), [msg])
        maps.update("xslots", ctypes.c_uint32(i), before_slot)
        assert verify()[0] == 0
    finally:
        maps.close()

    # the counters: a leaf whose hits the state file gives to one rule counter too few
    path_json = state.state_path(IF_A)
    saved = path_json.read_text()
    doc = json.loads(saved)
    leaf_state, counters = next((s, ks) for s, ks in sorted(doc["leaf_rules"].items()) if ks)
    doc["leaf_rules"][leaf_state] = counters[1:]
    path_json.write_text(json.dumps(doc))
    try:
        code, out = verify()
        assert code == 1 and out["verdict"] == "differs", out
        assert "counted by rule counter" in out["counterexample"]["rules"], out
    finally:
        path_json.write_text(saved)
    assert verify()[0] == 0


def test_verifies_after_a_crash_recovered_and_after_100_deltas(attached) -> None:
    path, lines, rng = attached
    other = path.with_name("other.txt")
    other.write_text("\n".join(lines[:60] + [rule(rng) for _ in range(30)]) + "\n")
    done = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "update", IF_A, "--rules", str(other)],
                          env={**os.environ, "CAMUS_FAULT": "update:flipped"}, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    code, doc = verify()
    assert code == 2 and "in flight" in doc["reason"], doc        # not judged half-done
    cli("status")                                                  # the next command finishes it
    code, doc = verify()
    assert code == 0 and doc["verdict"] == "equal", doc
    current = Path(state.load_installed(IF_A).rules).read_text().splitlines()
    for k in range(100):                                           # single-line changes: deltas
        current[rng.randrange(len(current) - PORTS)] = rule(rng)
        path.write_text("\n".join(current) + "\n")
        cli("update", IF_A, "--rules", str(path))
    code, doc = verify()
    assert code == 0 and doc["verdict"] == "equal", doc
    msgs = [f"stock={rng.choice(SYMBOLS)} price={rng.randrange(1100)}" for _ in range(120)]
    assert served(msgs) == wanted(path.read_text(), msgs)
