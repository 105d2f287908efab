"""`camus-xdp update` as a delta (root, kernel): after `attach`, each update of the rules file
writes only the states its changed lines touch, through the host agent's live path, and the
kernel then serves what the reference interpreter says for the whole file; counted rules keep
their counts; a crash at any step leaves the old or the new set serving and the next command
finishes or undoes it; a write by anyone else makes the next update rebuild, never trust stale
state."""
from __future__ import annotations

import ctypes
import json
import os
import random
import time
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import CompileOptions, compile_files, compile_rules
from camus.compiler.language.rules_parser import parse_rules
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.structure.slicing import sort_ports
from camus.dataplane import installed as state
from camus.dataplane import runtime
from camus.dataplane.counting import parsed_key, rule_counts, texts_of
from camus.dataplane.maps import MapSet
from camus.lab.pinned_run import port_bits_of
from tests.conftest import APPS, veth_pair

pytestmark = pytest.mark.bpf
SPEC_PATH = APPS / "itch" / "itch.p4"
IF_A, IF_B = "cxlu-a", "cxlu-b"
SYMBOLS = [f"S{i:02d}" for i in range(24)]
PORTS = 6


def _rules(rng: random.Random, n: int) -> list[str]:
    body = [f"stock == {rng.choice(SYMBOLS)} and price > {rng.randrange(1000)} : fwd({1 + rng.randrange(PORTS)})"
            for _ in range(n)]
    return body + [f"stock == ANCHOR{p} : fwd({p})" for p in range(1, PORTS + 1)]   # every port stays in use


def _messages(rng: random.Random, n: int = 240) -> list[str]:
    return [f"stock={rng.choice(SYMBOLS + ['ANCHOR1', 'NONE'])} price={rng.randrange(1100)}" for _ in range(n)]


def served(msgs: list[str]) -> list[tuple[str, ...]]:
    """The ports the attached program gives each message (the kernel runs it: pinned_run), named
    in the rules' port order."""
    names = sort_ports({str(p) for p in range(1, PORTS + 1)})
    return [tuple(sorted(names[b] for b in bits)) for bits in port_bits_of(IF_A, load_spec(SPEC_PATH), msgs)]


def wanted(text: str, msgs: list[str]) -> list[tuple[str, ...]]:
    spec = load_spec(SPEC_PATH)
    ip = PipelineInterpreter(compile_rules(spec, text, options=CompileOptions(count_rules=64)).pipeline)
    return [tuple(sorted(str(p) for p in ip.run(message_from_text(spec, m)).actions.ports)) for m in msgs]


def cli(*args: str) -> dict:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout) if "--json" in args else {}


def update(path: Path, text: str) -> dict:
    path.write_text(text)
    return cli("update", IF_A, "--rules", str(path), "--json")


def change_line(path: Path, lines: list[str], k: int, msgs: list[str]) -> str:
    """Line k of the file changed and `update` run; the kernel then serves the new file. Returns
    how the update wrote the tables."""
    lines[k] = f"stock == {SYMBOLS[k % 24]} and price > {30 + k} : fwd({1 + k % PORTS})"
    text = "\n".join(lines) + "\n"
    how = update(path, text)["path"]
    assert served(msgs) == wanted(text, msgs)
    return how


def check_record(text: str) -> None:
    """The state file says what serves in the terms the whole path uses: its key is the file's
    (a refresh is found from the parse alone), its counted rules the file's first 64."""
    rules, src = parse_rules(text, "<t>")
    inst = state.load_installed(IF_A)
    assert inst.tables_key == parsed_key(text, rules, CompileOptions(count_rules=64))
    assert inst.counted == texts_of(text, rules)[:64]


@pytest.fixture
def attached(tmp_path):
    with veth_pair(IF_A, IF_B):
        try:
            rng = random.Random(7)
            lines = _rules(rng, 150)
            path = tmp_path / "rules.txt"
            path.write_text("\n".join(lines) + "\n")
            cli("attach", IF_A, "--spec", str(SPEC_PATH), "--rules", str(path), "--mode", "generic")
            end = time.monotonic() + 300               # attach's child leaves the live state after it exits
            while not state.live_state_path(IF_A).exists() and time.monotonic() < end:
                time.sleep(0.05)
            assert _next_update() == "delta"
            yield path, lines, rng
        finally:
            if state.state_path(IF_A).exists():
                runtime.detach(IF_A)


def test_updates_are_deltas_that_serve_the_whole_file(attached) -> None:
    path, lines, rng = attached
    msgs = _messages(rng)
    assert served(msgs) == wanted(path.read_text(), msgs)
    edits = [
        lambda ls: ls.__setitem__(100, f"stock == {SYMBOLS[3]} and price > 5 : fwd(2)"),      # below the window
        lambda ls: ls.__setitem__(10, f"stock == {SYMBOLS[4]} and price > 900 : fwd(5)"),     # a counted rule
        lambda ls: ls.insert(0, f"stock == {SYMBOLS[5]} and price > 1 : fwd(6)"),             # the window moves
        lambda ls: ls.pop(30),
        lambda ls: ls.insert(40, ls[2]),                                                       # a repeat
        lambda ls: ls.__setitem__(60, ls[60] + "   # why we want it"),                         # a comment only
        lambda ls: ls.insert(70, "") or ls.insert(71, "# a comment line"),
        lambda ls: ls.__setitem__(slice(5, 7), [ls[6], ls[5]]),                                # two swapped
    ]
    for edit in edits:
        edit(lines)
        text = "\n".join(lines) + "\n"
        doc = update(path, text)
        assert doc["path"] == "delta", doc
        assert served(msgs) == wanted(text, msgs)
        check_record(text)
    doc = update(path, text)                                       # the same file: nothing written
    assert not doc["written"] and doc["path"] == "delta"
    # a rule over two lines: the file is parsed, and it is still a delta
    lines[20] = lines[20].replace(" and ", " and\n    ")
    text = "\n".join(lines) + "\n"
    doc = update(path, text)
    assert doc["written"] is False                                 # the same rules, written otherwise
    lines[21] = f"stock == {SYMBOLS[9]} and price > 77 : fwd(3)"
    text = "\n".join(lines) + "\n"
    assert update(path, text)["path"] == "delta"
    assert served(msgs) == wanted(text, msgs)
    check_record(text)


def test_a_bad_line_changes_nothing_and_is_named(attached) -> None:
    path, lines, rng = attached
    msgs = _messages(rng)
    before = served(msgs)
    path.write_text("\n".join(lines[:50] + ["stock == GOOGL and prize > 5 : fwd(1)"] + lines[50:]) + "\n")
    res = CliRunner().invoke(main, ["update", IF_A, "--rules", str(path)])
    assert res.exit_code == 1 and f"{path}:51:" in res.output, res.output
    assert served(msgs) == before
    lines[3] = f"stock == {SYMBOLS[1]} and price > 3 : fwd(4)"
    assert update(path, "\n".join(lines) + "\n")["path"] == "delta"


def test_counted_rules_keep_their_counts_across_deltas(attached) -> None:
    path, lines, rng = attached
    target = "stock == ANCHOR1 : fwd(1)"
    lines.remove(target)
    lines.insert(5, target)                                         # counted: the 6th rule
    update(path, "\n".join(lines) + "\n")
    served(["stock=ANCHOR1 price=1"] * 7)
    assert dict(rule_counts(IF_A))[target] == 7
    lines.insert(0, f"stock == {SYMBOLS[0]} and price > 999 : fwd(1)")   # its index moves: new leaves
    lines[30] = f"stock == {SYMBOLS[2]} and price > 998 : fwd(2)"
    assert update(path, "\n".join(lines) + "\n")["path"] == "delta"
    assert dict(rule_counts(IF_A))[target] == 7
    served(["stock=ANCHOR1 price=1"] * 3)
    assert dict(rule_counts(IF_A))[target] == 10


def test_a_write_by_another_path_makes_the_next_update_rebuild(attached) -> None:
    path, lines, rng = attached
    msgs = _messages(rng)
    other = path.with_name("other.txt")
    other.write_text("\n".join(lines[:80]) + "\n")
    runtime.update(IF_A, compile_files(str(SPEC_PATH), str(other), CompileOptions(count_rules=64)), str(other))
    assert not state.live_state_path(IF_A).exists() and _next_update() == "live"
    assert change_line(path, lines, 1, msgs) == "live"
    assert change_line(path, lines, 2, msgs) == "delta"


@pytest.mark.parametrize("step", ["update:journaled", "update:flipped", "update:cleaned"])
def test_a_delta_killed_at_every_step_serves_one_whole_set(attached, step: str) -> None:
    path, lines, rng = attached
    msgs = _messages(rng)
    old_text = path.read_text()
    for k in (3, 90, 120):
        lines[k] = f"stock == {SYMBOLS[k % 24]} and price > {k} : fwd({1 + k % PORTS})"
    new_text = "\n".join(lines) + "\n"
    path.write_text(new_text)
    done = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "update", IF_A,
                           "--rules", str(path)], env={**os.environ, "CAMUS_FAULT": step},
                          capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    now = served(msgs)
    assert now in (wanted(old_text, msgs), wanted(new_text, msgs))        # never a mix
    cli("status")                                                         # finishes or undoes it
    inst = state.load_installed(IF_A)
    assert inst.pending is None
    maps = MapSet.from_pins(inst.pins)
    try:
        held = _descriptors(maps, inst)
    finally:
        maps.close()
    assert held == set(inst.keys["desc"])                                 # no garbage, nothing missing
    lines[4] = f"stock == {SYMBOLS[4]} and price > 44 : fwd(2)"
    text = "\n".join(lines) + "\n"
    update(path, text)
    assert served(msgs) == wanted(text, msgs)
    check_record(text)


@pytest.mark.parametrize("how", ["delta", "live"])
def test_status_names_the_rules_that_serve_after_undoing_a_killed_update(attached, tmp_path, how: str) -> None:
    """An update of another file killed after it journals, before the flip: `status` undoes it
    and then names the file and the rule count that serve (the old ones), in text and JSON.
    ("live": the saved parts are gone, so the update rebuilds through the live path.)"""
    path, lines, rng = attached
    msgs = _messages(rng)
    old_text = path.read_text()
    other = tmp_path / "other.txt"
    new_lines = list(lines)
    for k in (3, 90, 120):
        new_lines[k] = f"stock == {SYMBOLS[k % 24]} and price > {k} : fwd({1 + k % PORTS})"
    new_lines.append(f"stock == {SYMBOLS[1]} and price > 7 : fwd(3)")
    other.write_text("\n".join(new_lines) + "\n")
    if how == "live":
        state.forget_live_state(IF_A)
    done = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "update", IF_A,
                           "--rules", str(other)], env={**os.environ, "CAMUS_FAULT": "update:journaled"},
                          capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    res = CliRunner().invoke(main, ["status"], catch_exceptions=False)
    assert "undid an interrupted update" in res.output, res.output
    assert str(path.resolve()) in res.output and str(other.resolve()) not in res.output, res.output
    doc = json.loads(CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False).stdout)
    unit = next(u for u in doc["units"] if u["unit"] == IF_A)
    assert unit["rules_file"] == str(path.resolve()) and unit["rules"] == len(lines), unit
    assert served(msgs) == wanted(old_text, msgs)
    update(other, other.read_text())                                   # and the file is served when asked again
    assert served(msgs) == wanted(other.read_text(), msgs)


def _next_update() -> str:
    doc = json.loads(CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False).stdout)
    return next(u for u in doc["units"] if u["unit"] == IF_A)["next_update"]


def _descriptors(maps: MapSet, inst: state.Installed) -> set[int]:
    """State ids of the live bank that hold a descriptor."""
    from camus.dataplane.maps import Desc
    half = inst.limits().max_states // 2
    lo = inst.bank * half
    d = Desc()
    return {s for s in range(max(lo, 1), lo + half) if maps.lookup("desc", ctypes.c_uint32(s), d) and d.kind}


def test_logged_deltas_replay_and_a_bad_log_is_not_trusted(attached, monkeypatch) -> None:
    """Deltas are logged after the saved parts (saved afresh every LOG_MAX); the next update
    replays them. A log that does not lead to what serves (torn, edited) makes it rebuild."""
    from camus.dataplane import live_state
    path, lines, rng = attached
    msgs = _messages(rng)
    monkeypatch.setattr(live_state, "LOG_MAX", 3)
    monkeypatch.setattr(live_state, "REPLAY_BUDGET_S", 60.0)        # (the count decides here, not the clock)
    log = state.live_log_path(IF_A)
    sizes = []
    for k in range(7):
        lines[k * 7] = f"stock == {SYMBOLS[k]} and price > {100 + k} : fwd({1 + k % PORTS})"
        assert update(path, "\n".join(lines) + "\n")["path"] == "delta"
        sizes.append(len(log.read_text().splitlines()) if log.exists() else 0)
    assert sizes == [1, 2, 3, 0, 1, 2, 3]                   # saved afresh after three logged deltas
    text = "\n".join(lines) + "\n"
    assert served(msgs) == wanted(text, msgs)
    records = log.read_text().splitlines()
    log.write_text("\n".join(records[:-1] + [records[-1][:-5]]) + "\n")      # torn
    assert change_line(path, lines, 3, msgs) == "live"
    assert change_line(path, lines, 4, msgs) == "delta"
    log.write_text(log.read_text().replace('"root": ', '"root": 1'))          # leads elsewhere
    assert change_line(path, lines, 5, msgs) == "live"


def test_deltas_killed_at_random_times_then_back_and_forth(attached) -> None:
    """20 CLI updates (deltas) killed at a random moment of their run (its length measured here):
    after each the kernel serves the old file or the new one, never a mix; `status` finishes or
    undoes what was journaled, the live bank holds exactly what the state file records; the next
    update serves its file."""
    import time
    path, lines, rng = attached
    msgs = _messages(rng, 120)
    cmd = [sys.executable, "-c", "from camus.cli import main; main()", "update", IF_A, "--rules", str(path)]
    t0 = time.monotonic()
    change_line(path, lines, 7, msgs)
    whole = time.monotonic() - t0
    for i in range(20):
        old_text = path.read_text()
        for k in (rng.randrange(150), rng.randrange(150)):
            lines[k] = f"stock == {rng.choice(SYMBOLS)} and price > {rng.randrange(1000)} : fwd({1 + rng.randrange(PORTS)})"
        new_text = "\n".join(lines) + "\n"
        path.write_text(new_text)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(0.3, 1.0) * whole)
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.wait()
        assert served(msgs) in (wanted(old_text, msgs), wanted(new_text, msgs)), i     # never a mix
        cli("status")
        inst = state.load_installed(IF_A)
        assert inst.pending is None
        maps = MapSet.from_pins(inst.pins)
        try:
            assert _descriptors(maps, inst) == set(inst.keys["desc"]), i
        finally:
            maps.close()
        assert change_line(path, lines, 1 + i, msgs) in ("delta", "live")
        check_record(path.read_text())


def test_an_update_right_after_attach_waits_for_its_live_state(tmp_path) -> None:
    """attach's child builds the live state after the command exits, holding the unit's lock from
    before: an update run at once waits for it and is a delta, never a race with it."""
    with veth_pair(IF_A, IF_B):
        try:
            rng = random.Random(11)
            lines = _rules(rng, 20_000)            # the live state takes a while: the update comes first
            path = tmp_path / "rules.txt"
            path.write_text("\n".join(lines) + "\n")
            cli("attach", IF_A, "--spec", str(SPEC_PATH), "--rules", str(path), "--mode", "generic")
            with state.unit_lock(IF_A, wait=False) as free:
                assert not free                 # the child holds it from before attach returned
            msgs = _messages(rng)
            assert change_line(path, lines, 3, msgs) == "delta"       # no wait here: the lock orders them
            assert state.live_state_path(IF_A).exists()
        finally:
            if state.state_path(IF_A).exists():
                runtime.detach(IF_A)
