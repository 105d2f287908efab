"""Crash safety of the data plane (root, namespaces): `update` and `attach` killed with
SIGKILL at every step (fault injection through $CAMUS_FAULT); packets always see one whole
table set, and the next command finishes or undoes what the crash left, leaving no garbage."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import installed as state
from camus.dataplane import runtime
from camus.dataplane.maps import CFG_ROOT, Desc, MapSet
from tests.conftest import APPS
from tests.dataplane.test_lab_attach import BRK, lab, received, sh  # noqa: F401  (the lab fixture)

pytestmark = pytest.mark.netns
SPEC_PATH = APPS / "itch" / "itch.p4"
# b has more tables than c: what a crash leaves of b cannot hide under c's entries
RULES = {"a": "stock == GOOGL : fwd(1)\n",
         "b": "stock == IBM : fwd(2)\nstock == MSFT and price > 5 : fwd(2)\nprice > 100 and shares > 5 : fwd(4)\n",
         "c": "stock == AAPL : fwd(3)\n"}


def _frames() -> list[bytes]:
    spec = load_spec(SPEC_PATH)
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    return [build_packet(spec, [message_from_text(spec, f"stock={s}")], dst_mac=mac,
                         src_ip="10.77.0.1", dst_ip="10.77.0.2") for s in ("GOOGL", "IBM", "AAPL")]


WANT = {"a": [True, False, False], "b": [False, True, False], "c": [False, False, True]}


def _killed(code: str, fault: str) -> None:
    env = {**os.environ, "CAMUS_FAULT": fault}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == -9, (fault, done.returncode, done.stderr[-2000:])


def _write(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.txt"
    path.write_text(RULES[name])
    return str(path)


def _update_code(tmp_path, name: str) -> str:
    """Python for a child process that updates the broker to rule set `name`."""
    rules = _write(tmp_path, name)
    return ("from camus.dataplane import runtime; from camus.compiler.compile import compile_files; "
            f"runtime.update({BRK!r}, compile_files({str(SPEC_PATH)!r}, {rules!r}), {rules!r})")


def _descriptors(inst: state.Installed) -> tuple[set[int], set[int]]:
    """State ids holding a descriptor in the live half of the maps and in the idle half."""
    import ctypes
    half = inst.limits().max_states // 2
    maps = MapSet.from_pins(inst.pins)
    try:
        live_bank = 1 if (maps.cfg(CFG_ROOT) & 0x3FFFFFFF) >= half else 0
        d = Desc()
        held = {s for s in range(1, 2 * half) if maps.lookup("desc", ctypes.c_uint32(s), d) and d.kind}
    finally:
        maps.close()
    live = {s for s in held if (s >= half) == bool(live_bank)}
    return live, held - live


@pytest.mark.parametrize("step", ["update:journaled", "update:flipped", "update:cleaned"])
def test_update_killed_at_every_step(lab, tmp_path, step: str) -> None:  # noqa: F811
    spec = load_spec(SPEC_PATH)
    frames = _frames()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native")
    _killed(_update_code(tmp_path, "b"), step)
    now = received(frames)
    assert now in (WANT["a"], WANT["b"])                      # one whole table set, never a mix
    assert now == (WANT["a"] if step == "update:journaled" else WANT["b"])
    runtime.update(BRK, compile_rules(spec, RULES["c"]), _write(tmp_path, "c"))   # recovers first
    inst = state.load_installed(BRK)
    assert inst.pending is None and inst.rule_lines == ["stock == AAPL : fwd(3)"]
    maps = MapSet.from_pins(inst.pins)
    try:
        assert maps.cfg(CFG_ROOT) == inst.root                # the state file agrees with the maps
    finally:
        maps.close()
    assert received(frames) == WANT["c"]
    live, idle = _descriptors(inst)
    assert live == set(inst.keys["desc"]) and not idle       # only c's tables, nothing of a, b or the crash


@pytest.mark.parametrize("step", ["attach:tc", "attach:xdp", "attach:pinned"])
def test_attach_killed_then_detach_cleans_up(lab, tmp_path, step: str) -> None:  # noqa: F811
    spec = load_spec(SPEC_PATH)
    ports = tmp_path / "ports.yaml"
    ports.write_text(f"1: {{iface: {BRK}}}\n")                # TC filters too
    code = ("from camus.dataplane import runtime; from camus.compiler.compile import compile_files; "
            f"runtime.attach({BRK!r}, compile_files({str(SPEC_PATH)!r}, {_write(tmp_path, 'a')!r}), "
            f"{str(SPEC_PATH)!r}, {_write(tmp_path, 'a')!r}, 'native', ports_path={str(ports)!r})")
    _killed(code, step)
    left = sh("ip", "-d", "link", "show", BRK).stdout + sh("tc", "filter", "show", "dev", BRK, "ingress").stdout
    assert ("prog/xdp" in left) == (step != "attach:tc") and "camus_tc_in" in left   # what the crash left
    note = runtime.detach(BRK)
    assert "removed" in note
    assert "camus_tc" not in sh("tc", "filter", "show", "dev", BRK, "ingress").stdout
    assert "prog/xdp" not in sh("ip", "-d", "link", "show", BRK).stdout
    assert not state.pin_dir(BRK).exists() and not state.state_path(BRK).exists()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native")
    assert received(_frames()) == WANT["a"]


@pytest.mark.parametrize("step", ["detach:xdp", "detach:tc", "detach:pins"])
def test_detach_killed_at_every_step_then_detach_again(lab, tmp_path, step: str) -> None:  # noqa: F811
    spec = load_spec(SPEC_PATH)
    ports = tmp_path / "ports.yaml"
    ports.write_text(f"1: {{iface: {BRK}}}\n")                # TC on the interface too
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native",
                   ports_path=str(ports))
    _killed(f"from camus.dataplane import runtime; runtime.detach({BRK!r})", step)
    runtime.detach(BRK)                                       # starts over and finishes
    link = sh("ip", "-d", "link", "show", BRK).stdout
    assert "prog/xdp" not in link and "camus_tc" not in sh("tc", "filter", "show", "dev", BRK, "ingress").stdout
    assert not state.pin_dir(BRK).exists() and not state.state_path(BRK).exists()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native")
    assert received(_frames()) == WANT["a"]


@pytest.mark.parametrize("step", ["grow:journaled", "grow:swapped"])
def test_grow_killed_then_the_next_update_finishes_or_undoes_it(lab, tmp_path, step: str) -> None:  # noqa: F811
    """An update that outgrows the program (dataplane/grow.py) killed before and after the swap:
    the frames see one whole program; the next update finishes (the grown one's pins take over)
    or undoes (its pins and filters go) and nothing of the other program is left."""
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.dataplane.bpfinfo import pinned_id
    from camus.dataplane.grow import attached_prog_id, staging_dir
    spec = load_spec(SPEC_PATH)
    frames = _frames()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native",
                   limits=EbpfLimits(max_exact=16))
    big = tmp_path / "big.txt"                                # more exact slots than the program holds
    big.write_text(RULES["b"] + "".join(f"stock == Z{i:03d} : fwd(5)\n" for i in range(40)))
    code = ("from camus.dataplane import runtime; from camus.compiler.compile import compile_files; "
            f"runtime.update({BRK!r}, compile_files({str(SPEC_PATH)!r}, {str(big)!r}), {str(big)!r})")
    _killed(code, step)
    assert received(frames) == (WANT["a"] if step == "grow:journaled" else WANT["b"])
    report = runtime.update(BRK, compile_rules(spec, RULES["c"]), _write(tmp_path, "c"))   # recovers first
    assert not report.grown
    inst = state.load_installed(BRK)
    assert inst.pending is None and inst.generation == (0 if step == "grow:journaled" else 1)
    assert attached_prog_id(inst) == pinned_id(inst.pins, "prog_xdp")     # the pins are the live program's
    assert received(frames) == WANT["c"]
    assert not staging_dir(inst).exists()
    assert sorted(p.name for p in state.PIN_ROOT.iterdir() if p.name.startswith(BRK)) == [BRK]


def test_detach_after_a_grow_killed_past_its_swap_leaves_nothing(lab, tmp_path) -> None:  # noqa: F811
    from camus.compiler.backends.ebpf.program import EbpfLimits
    spec = load_spec(SPEC_PATH)
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native",
                   limits=EbpfLimits(max_exact=16))
    big = tmp_path / "big.txt"
    big.write_text(RULES["b"] + "".join(f"stock == Z{i:03d} : fwd(5)\n" for i in range(40)))
    code = ("from camus.dataplane import runtime; from camus.compiler.compile import compile_files; "
            f"runtime.update({BRK!r}, compile_files({str(SPEC_PATH)!r}, {str(big)!r}), {str(big)!r})")
    _killed(code, "grow:swapped")
    assert any(p.name.endswith("~grow") for p in state.PIN_ROOT.iterdir())      # what the crash left
    runtime.detach(BRK)
    assert not [p for p in state.PIN_ROOT.iterdir() if p.name.startswith(BRK)]
    assert "prog/xdp" not in sh("ip", "-d", "link", "show", BRK).stdout


def _status() -> str:
    from click.testing import CliRunner
    from camus.cli import main
    return CliRunner().invoke(main, ["status"], catch_exceptions=False).output


def _serving(frames: list[bytes]) -> str:
    """Which of the rule sets a, b, c the frames show serving."""
    now = received(frames)
    names = [name for name, want in WANT.items() if want == now]
    assert names, f"the frames show no whole rule set: {now}"
    return names[0]


def _check_named(tmp_path, frames: list[bytes], name: str) -> None:
    """The set `name` serves, and `status` and the state file name it (the rules file, the key)."""
    assert _serving(frames) == name
    status = _status()
    assert f"rules from {tmp_path / f'{name}.txt'}" in status, status
    assert "warning" not in status and "in progress" not in status, status
    inst = state.load_installed(BRK)
    assert inst.pending is None and inst.rule_lines == sorted(RULES[name].splitlines())


def _back_and_forth(tmp_path, frames: list[bytes], spec, sequence: str) -> None:
    for name in sequence:
        rep = runtime.update(BRK, compile_rules(spec, RULES[name]), _write(tmp_path, name))
        _check_named(tmp_path, frames, name)
        assert rep.written or rep.added == rep.removed == []


@pytest.mark.parametrize("step", ["update:journaled", "update:flipped", "update:cleaned"])
def test_an_update_killed_never_leaves_a_later_one_reporting_unchanged(lab, tmp_path, step: str) -> None:  # noqa: F811
    """Issue 40.1: a, then b killed after its flip, then a again reported "unchanged" while b
    served (the recovery adopted b's tables but kept a's key). Now `status` finishes or undoes
    the journal itself and names what serves; every later update serves what it reports."""
    spec = load_spec(SPEC_PATH)
    frames = _frames()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native")
    _killed(_update_code(tmp_path, "b"), step)
    _check_named(tmp_path, frames, "a" if step == "update:journaled" else "b")   # status recovered it
    rep = runtime.update(BRK, compile_rules(spec, RULES["a"]), _write(tmp_path, "a"))
    assert rep.written == (step != "update:journaled")
    _check_named(tmp_path, frames, "a")
    _back_and_forth(tmp_path, frames, spec, "babcca")


def test_an_update_killed_at_random_times_then_back_and_forth(lab, tmp_path) -> None:  # noqa: F811
    """20 updates killed at a random moment of their run (the run's length measured here, not
    guessed): after each, `status` names the set that serves, and the next updates serve what
    they report."""
    import random
    import time
    spec = load_spec(SPEC_PATH)
    frames = _frames()
    runtime.attach(BRK, compile_rules(spec, RULES["a"]), str(SPEC_PATH), _write(tmp_path, "a"), "native")

    def update_cmd(name: str) -> list[str]:
        return [sys.executable, "-c", _update_code(tmp_path, name)]

    t0 = time.monotonic()
    subprocess.run(update_cmd("b"), check=True, capture_output=True)
    whole = time.monotonic() - t0                   # this machine's time for one update, start to end
    _check_named(tmp_path, frames, "b")
    rng = random.Random(40)
    live = "b"
    for i in range(20):
        target = "ac"[i % 2] if live == "b" else "b"
        proc = subprocess.Popen(update_cmd(target), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(0.3, 1.0) * whole)
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.wait()
        now = _serving(frames)
        assert now in (live, target)
        _check_named(tmp_path, frames, now)
        live = now
        other = "a" if live != "a" else "c"
        _back_and_forth(tmp_path, frames, spec, other)
        live = other


def test_an_update_of_a_later_line_of_a_rule_is_written_and_served(lab, tmp_path) -> None:  # noqa: F811
    """A rule over two lines, its second changed: the update reported "unchanged" and wrote
    nothing (the rule was known by its first line) while the file said another threshold."""
    spec = load_spec(SPEC_PATH)
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    frame = build_packet(spec, [message_from_text(spec, "stock=GOOGL price=100")], dst_mac=mac,
                         src_ip="10.77.0.1", dst_ip="10.77.0.2")
    low, high = tmp_path / "low.txt", tmp_path / "high.txt"
    low.write_text("stock == GOOGL and\n    price > 50 : fwd(1)\n")
    high.write_text("stock == GOOGL and\n    price > 500 : fwd(1)\n")
    runtime.attach(BRK, compile_rules(spec, low.read_text()), str(SPEC_PATH), str(low), "native")
    assert received([frame]) == [True]
    rep = runtime.update(BRK, compile_rules(spec, high.read_text()), str(high))
    assert rep.written and rep.added == ["stock == GOOGL and price > 500 : fwd(1)"]
    assert received([frame]) == [False]
    assert state.load_installed(BRK).rule_lines == ["stock == GOOGL and price > 500 : fwd(1)"]


def test_a_reordered_file_counts_its_own_first_rules(lab, tmp_path) -> None:  # noqa: F811
    """With per-rule counters the first `count_rules` rules are counted: the same rules in
    another order are other tables (it reported "unchanged" and kept counting the old ones)."""
    from camus.compiler.compile import CompileOptions
    from camus.dataplane import counting
    spec = load_spec(SPEC_PATH)
    opts = CompileOptions(count_rules=1)
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("stock == GOOGL : fwd(1)\nstock == IBM : fwd(2)\n")
    second.write_text("stock == IBM : fwd(2)\nstock == GOOGL : fwd(1)\n")
    runtime.attach(BRK, compile_rules(spec, first.read_text(), options=opts), str(SPEC_PATH), str(first), "native")
    assert [text for text, _ in counting.rule_counts(BRK)] == ["stock == GOOGL : fwd(1)"]
    rep = runtime.update(BRK, compile_rules(spec, second.read_text(), options=opts), str(second))
    assert rep.written
    assert [text for text, _ in counting.rule_counts(BRK)] == ["stock == IBM : fwd(2)"]
