"""Lab test (root, namespaces): the classifier attached to a real veth, fed from a publisher
namespace. A packet socket on the broker side sees what XDP lets through."""
from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import load_spec
from camus.cli import main
from camus.compiler.language.rules_parser import strip_comment
from camus.dataplane import counting, installed as state
from camus.dataplane import runtime
from camus.dataplane.reference import expected_rule_counts
from tests.conftest import APPS
from tests.dataplane.vethlab import send_from, sh, veth_pair

pytestmark = pytest.mark.netns
NS, PUB, BRK = "camus-test-pub", "cxt-pub0", "cxt-brk0"


@pytest.fixture
def lab():
    with veth_pair(NS, PUB, BRK, "10.77.0"):
        try:
            yield
        finally:
            if state.state_path(BRK).exists():
                runtime.detach(BRK)


def send(frames: list[bytes]) -> None:
    send_from(NS, PUB, frames)


def received(frames: list[bytes]) -> list[bool]:
    """Send the frames from the publisher; which of them reached the broker's stack?"""
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    rx.bind((BRK, 0))
    rx.settimeout(0.3)
    send(frames)
    seen = set()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            seen.add(rx.recv(4096))
        except socket.timeout:
            break
    rx.close()
    return [f in seen for f in frames]


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_attached_veth_drops_early_passes_the_rest_and_detaches_cleanly(lab, mode: str) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))

    def feed(*texts: str) -> bytes:
        return build_packet(spec, [message_from_text(spec, t) for t in texts], dst_mac=mac,
                            src_ip="10.77.0.1", dst_ip="10.77.0.2")

    wanted, unwanted, mixed = feed("stock=GOOGL price=60"), feed("stock=IBM price=5"), feed("stock=IBM", "stock=AAPL")
    rules = (APPS / "itch" / "rules.txt").read_text()
    compiled = compile_rules(spec, rules, options=CompileOptions(count_rules=64))
    runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt"), mode)
    assert received([wanted, unwanted, mixed]) == [True, False, True]
    # Per-rule counters without TC (no ports file: delivering packets go to the stack whole).
    lines = [strip_comment(ln) for ln in rules.splitlines() if strip_comment(ln)]
    want = expected_rule_counts(spec, lines, [wanted, unwanted, mixed])
    assert counting.rule_counts(BRK) == want and sum(n for _, n in want) == 2
    shown = CliRunner().invoke(main, ["stats", BRK], catch_exceptions=False).output
    assert all(f"{n:>12}  {ln}" in shown for ln, n in want), shown
    assert f"{BRK} (kernel): rx_packets=" in shown and "rx_dropped=" in shown, shown
    ping = sh("ip", "netns", "exec", NS, "ping", "-c", "1", "-W", "2", "10.77.0.2", check=False)
    assert ping.returncode == 0, "ARP and ICMP must keep working with the classifier attached"
    s = runtime.stats(BRK)
    assert s["no_match"] >= 1 and s["deliver"] >= 2 and s["other"] >= 2

    runtime.update(BRK, compile_rules(spec, "stock == IBM : fwd(9)\n"), "ibm.txt")
    assert received([wanted, unwanted, mixed]) == [False, True, True]
    runtime.update(BRK, compile_rules(spec, "stock == GOOGL : fwd(1)\n"), "googl.txt")
    assert received([wanted, unwanted]) == [True, False]
    # A refresh (the same rules; a comment and a blank line do not count) writes nothing: the
    # live bank and root stay, and the state file names the new rule file.
    before = state.load_installed(BRK)
    rep = runtime.update(BRK, compile_rules(spec, "# refreshed\n\nstock == GOOGL : fwd(1)\n"), "again.txt")
    after = state.load_installed(BRK)
    assert not rep.written and (after.bank, after.root, after.keys) == (before.bank, before.root, before.keys)
    assert after.rules.endswith("again.txt") and received([wanted, unwanted]) == [True, False]

    runtime.detach(BRK)
    assert received([wanted, unwanted, mixed]) == [True, True, True]
    assert "prog/xdp" not in sh("ip", "-d", "link", "show", BRK).stdout
    assert "xdpgeneric" not in sh("ip", "-d", "link", "show", BRK).stdout
    assert not (state.PIN_ROOT / BRK).exists() and not state.state_path(BRK).exists()


def test_attach_errors_leave_nothing_behind(lab) -> None:
    from camus.dataplane.program import DataplaneError
    spec = load_spec(APPS / "itch" / "itch.p4")
    compiled = compile_rules(spec, "stock == GOOGL : fwd(1)\n")
    with pytest.raises(DataplaneError, match="no such interface"):
        runtime.attach("cxt-nope0", compiled, "s", "r")
    runtime.attach(BRK, compiled, "s", "r", "native")
    with pytest.raises(DataplaneError, match="already has camus-xdp attached"):
        runtime.attach(BRK, compiled, "s", "r", "native")
    many = "\n".join(f"stock == S{i} : fwd({i})" for i in range(4100))      # 4,100 ports > 4,096
    with pytest.raises(DataplaneError, match="old tables keep serving.*4100 ports; an XDP broker serves at most 4096"):
        runtime.update(BRK, compile_rules(spec, many), "many.txt")
    assert state.load_installed(BRK).rule_lines == ["stock == GOOGL : fwd(1)"]


def test_detach_after_the_interface_vanished_cleans_up(lab) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    runtime.attach(BRK, compile_rules(spec, "stock == GOOGL : fwd(1)\n"), "s", "r", "native")
    sh("ip", "link", "del", BRK)
    assert "no longer exists" in runtime.detach(BRK)
    assert not (state.PIN_ROOT / BRK).exists() and not state.state_path(BRK).exists()


def test_detach_without_state_file_removes_leftover_pins(lab) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    runtime.attach(BRK, compile_rules(spec, "stock == GOOGL : fwd(1)\n"), "s", "r", "native")
    state.state_path(BRK).unlink()                       # as if /run had been cleared
    assert "leftover" in runtime.detach(BRK)
    assert not (state.PIN_ROOT / BRK).exists()
    assert "prog/xdp" not in sh("ip", "-d", "link", "show", BRK).stdout
    runtime.attach(BRK, compile_rules(spec, "stock == GOOGL : fwd(1)\n"), "s", "r", "native")   # usable again


def test_multi_attribute_rules_attach_and_update_on_bit_vectors(lab, tmp_path) -> None:
    """Sensor filters over 8 attributes (the cost model picks the bit-vector stage) attached to
    a real veth; updates swap between bit-vector and diagram table sets; a rule set beyond the
    attached capacity grows the program (refused, the old tables serving, when held to it)."""
    from camus.bench.workloads import SENSOR_SPEC, sensor_rules
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.compiler.language.spec_parser import parse_spec
    from camus.dataplane.program import DataplaneError
    spec = parse_spec(SENSOR_SPEC, "sensors.p4")
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    rules = "\n".join(sensor_rules(40, seed=4)) + "\n"
    compiled = compile_rules(spec, rules, options=CompileOptions(count_rules=64))
    assert compiled.pipeline.bitvector is not None
    runtime.attach(BRK, compiled, "sensors.p4", "sensors.txt", "native")
    interp = PipelineInterpreter(compiled.pipeline)
    import random
    rng = random.Random(4)
    from camus.bench.workloads import sensor_message
    values = [message_from_text(spec, sensor_message(rng)) for _ in range(40)]
    frames = [build_packet(spec, [v], dst_mac=mac, src_ip="10.77.0.1", dst_ip="10.77.0.2", sequence=i)
              for i, v in enumerate(values)]
    want = [bool(interp.run(v).actions.ports) for v in values]
    assert any(want) and not all(want)
    assert received(frames) == want
    # per-rule counters: the kernel counts each matching rule once per message
    lines = [ln.strip() for ln in rules.splitlines() if ln.strip()]
    assert counting.rule_counts(BRK) == expected_rule_counts(spec, lines, frames)
    runtime.update(BRK, compile_rules(spec, "temperature > 6000 and humidity < 500 : fwd(1)\n",
                                      options=CompileOptions(strategy="bdd")), "hot.txt")
    assert received(frames) == [v["reading.temperature"] > 6000 and v["reading.humidity"] < 500 for v in values]
    runtime.update(BRK, compiled, "sensors.txt")
    assert received(frames) == want
    huge = compile_rules(spec, "\n".join(sensor_rules(40_000, seed=5)))
    with pytest.raises(DataplaneError, match="old tables keep serving"):       # held to today's program
        runtime.update(BRK, huge, "huge.txt", limits=state.load_installed(BRK).limits())
    assert received(frames) == want
    before = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
    assert runtime.update(BRK, huge, "huge.txt").grown                           # a larger program takes over
    assert received(frames) == [bool(PipelineInterpreter(huge.pipeline).run(v).actions.ports) for v in values]
    after = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
    assert "bit-vector stage" in after and after != before
    runtime.update(BRK, compiled, "sensors.txt")
    assert received(frames) == want


def test_attach_with_no_options_uses_the_config_file(lab, tmp_path, monkeypatch) -> None:
    config = tmp_path / "camus" / "config.yaml"
    monkeypatch.setenv("CAMUS_XDP_CONFIG", str(config))
    r = CliRunner().invoke(main, ["attach", BRK], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert config.exists() and "attached to" in r.output
    assert state.load_installed(BRK).spec.endswith("itch.p4")
    spec = load_spec(APPS / "itch" / "itch.p4")
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    frames = [build_packet(spec, [message_from_text(spec, t)], dst_mac=mac, src_ip="10.77.0.1", dst_ip="10.77.0.2")
              for t in ("stock=GOOGL price=60", "stock=IBM price=5")]
    assert received(frames) == [True, False]
