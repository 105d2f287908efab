"""A unit held for live changes (a host agent's live classifier) is never rewritten beside it:
commands that would are refused at once, naming the holder, instead of writing whole tables
the holder's next delta would be written against; commands still wait for each other; a killed
holder's note means nothing (the kernel released its lock); a holder removes the lock file as
it lets go, and no two ever hold one unit. No root: the lock folder is moved into a temporary one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from camus.dataplane import installed as state
from camus.dataplane.program import DataplaneError


@pytest.fixture(autouse=True)
def _state_root(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_ROOT", tmp_path)


def test_a_held_unit_refuses_commands_at_once_and_names_its_holder() -> None:
    hold = state.hold_unit("veth7", "the host agent (pid 42)")
    try:
        assert state.unit_holder("veth7") == "the host agent (pid 42)"
        with pytest.raises(DataplaneError, match=r"veth7 is held for live changes by the host agent \(pid 42\)"):
            with state.unit_lock("veth7"):
                pass
        with state.unit_lock("veth7", wait=False) as got:   # status's recovery: skips, never raises
            assert got is False
        with pytest.raises(DataplaneError, match="held for live changes"):
            state.hold_unit("veth7", "another agent")
        with state.unit_lock("veth8") as got:               # other units are not affected
            assert got is True
        with state.unit_lock("veth7", held=hold) as got:    # the holder's own whole update
            assert got is True
    finally:
        hold.release()
    assert state.unit_holder("veth7") == ""
    with state.unit_lock("veth7") as got:
        assert got is True


def test_a_holder_waits_for_a_command_and_commands_wait_for_each_other() -> None:
    taken, go = threading.Event(), threading.Event()

    def command() -> None:
        with state.unit_lock("veth7"):
            taken.set()
            go.wait(60)

    first = threading.Thread(target=command)
    first.start()
    assert taken.wait(60)
    held: list[state.UnitHold] = []
    second = threading.Thread(target=lambda: held.append(state.hold_unit("veth7", "agent")))
    second.start()
    second.join(0.3)
    assert second.is_alive() and not held          # still waiting: a command holds the unit
    assert state.unit_holder("veth7") == ""        # and a command is nobody's live hold
    go.set()
    first.join(60)
    second.join(60)
    assert held and state.unit_holder("veth7") == "agent"
    held[0].release()


def test_a_killed_holders_note_does_not_hold_the_unit(tmp_path) -> None:
    code = ("import sys; from camus.dataplane import installed as s; from pathlib import Path; "
            f"s.STATE_ROOT = Path({str(tmp_path)!r}); s.hold_unit('veth7', 'doomed agent'); "
            "print('held', flush=True); sys.stdin.read()")      # holds until killed (stdin stays open)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert state.unit_holder("veth7") == "doomed agent"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "locks" / "veth7").read_text().strip() == "doomed agent"   # left behind
    assert state.unit_holder("veth7") == ""
    with state.unit_lock("veth7") as got:          # taken, and the stale note cleared
        assert got is True
        assert (tmp_path / "locks" / "veth7").read_text() == ""
    assert not (tmp_path / "locks" / "veth7").exists()     # and the file gone with the next holder


def test_no_lock_file_stays_and_holders_never_overlap() -> None:
    """A holder removes the lock file as it lets go; a process that opened the old file and
    locked it after reopens the path: never two holders at once, nothing left behind."""
    inside, overlaps, errors = [0], [0], []

    def command() -> None:
        try:
            for _ in range(30):
                with state.unit_lock("veth7"):
                    inside[0] += 1
                    if inside[0] > 1:
                        overlaps[0] += 1
                    inside[0] -= 1
        except Exception as exc:           # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=command) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and overlaps[0] == 0
    hold = state.hold_unit("veth7", "agent")
    hold.release()
    with state.unit_lock("veth8"):
        pass
    assert not any((state.STATE_ROOT / "locks").iterdir())


def test_a_waiter_that_locks_a_removed_file_opens_the_path_again(monkeypatch) -> None:
    """The race the removal opens, made to happen: a process opened the lock file, the holder
    removed it and let go, then the process locked the file it had (no longer at the path). It
    must not count as holding the unit: another process would then take a new file at the path."""
    stale = state._lock_file("veth7")              # opened while somebody held the unit...
    with state.unit_lock("veth7"):                  # ...who then removed the file and let go
        pass
    real = state._lock_file
    handed = []

    def first_the_stale_one(unit: str) -> int:
        if not handed:
            handed.append(stale)
            return stale
        return real(unit)

    monkeypatch.setattr(state, "_lock_file", first_the_stale_one)
    hold = state.hold_unit("veth7", "agent")
    try:
        assert handed and state.unit_holder("veth7") == "agent"
        with state.unit_lock("veth7", wait=False) as got:
            assert got is False                     # the unit is held: one holder, at the path
    finally:
        hold.release()


def test_a_killed_commands_lock_file_is_swept_and_a_held_one_is_not(tmp_path) -> None:
    """A lock file with no state file and no interface behind it is a killed command's: swept
    (lab/namespaces.remove_stale_labs does it before every lab); one a live command holds stays."""
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cxgone0").touch()             # killed: nobody holds it
    with state.unit_lock("cxgone1"):                     # a live command's (no interface either)
        assert state.stale_lock_units() == ["cxgone0", "cxgone1"]
        assert [u for u in state.stale_lock_units() if state.remove_stale_lock(u)] == ["cxgone0"]
        assert (tmp_path / "locks" / "cxgone1").exists()
    assert not (tmp_path / "locks" / "cxgone0").exists() and not (tmp_path / "locks" / "cxgone1").exists()
