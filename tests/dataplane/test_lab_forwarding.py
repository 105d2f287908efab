"""Lab test (root, namespaces): publisher -> broker (XDP + TC) -> three subscribers.
Each subscriber must receive exactly the messages its filters select, nothing missing, nothing
extra, in MoldUDP64 packets pruned for it; the remote endpoint gets rewritten, valid packets."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import build_packet, decode_packet, message_from_text, udp_checksum_v6
from camus.compiler.language.spec_parser import load_spec
from camus.lab.namespaces import CAPTURE_SCRIPT, SENDER_SCRIPT, mold_order_refs
from camus.lab.traffic import Feed, StreamCapture
from camus.dataplane import counting, runtime
from camus.dataplane import installed as state
from camus.dataplane.reference import expected_rule_counts
from tests.conftest import APPS

pytestmark = pytest.mark.netns
PUB_NS, BRK = "camus-lab-pub", "cxl-brk"
SUBS = {1: ("camus-lab-s1", "cxl-s1b", "cxl-s1", "10.78.1.2"),
        2: ("camus-lab-s2", "cxl-s2b", "cxl-s2", "10.78.2.2"),
        3: ("camus-lab-s3", "cxl-s3b", "cxl-s3", "10.78.3.2")}
RULES = """
stock == GOOGL and price > 500 : fwd(1)
stock == GOOGL : fwd(3)
stock == AAPL or stock == MSFT : fwd(2)
stock == TSLA and price < 300 : fwd(1, 2, 3)
stock == JUNK : drop
stock == IBM or (stock == MSFT and price > 900) : fwd(4)
"""


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def teardown() -> None:
    from camus.dataplane.dispatch import dispatch_record_path
    if state.state_path(BRK).exists() or dispatch_record_path(BRK).exists():
        runtime.detach(BRK)
    for ns, brk_side, _, _ in SUBS.values():
        sh("ip", "link", "del", brk_side, check=False)
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", BRK, check=False)
    sh("ip", "netns", "del", PUB_NS, check=False)


@pytest.fixture
def lab(tmp_path):
    teardown()                                       # leftovers of an interrupted run
    try:
        sh("ip", "netns", "add", PUB_NS)
        sh("ip", "link", "add", BRK, "type", "veth", "peer", "name", "cxl-pub", "netns", PUB_NS)
        sh("ip", "link", "set", BRK, "up")
        sh("ip", "netns", "exec", PUB_NS, "ip", "link", "set", "cxl-pub", "up")
        for ns, brk_side, sub, ip in SUBS.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", brk_side, "type", "veth", "peer", "name", sub, "netns", ns)
            sh("ip", "link", "set", brk_side, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", sub)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", sub, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "ethtool", "-K", sub, "gro", "on")   # accepts XDP_REDIRECT
        mac3 = sh("ip", "netns", "exec", SUBS[3][0], "cat", f"/sys/class/net/{SUBS[3][2]}/address").stdout.strip()
        ports = tmp_path / "ports.yaml"
        ports.write_text(f"1: {{iface: {SUBS[1][1]}}}\n2: {{iface: {SUBS[2][1]}}}\n"
                         f"3: {{iface: {SUBS[3][1]}, mac: '{mac3}', ip: {SUBS[3][3]}, udp_port: 26400}}\n"
                         "4: local\n")
        sh("ip", "addr", "add", "10.78.0.2/24", "dev", BRK)       # the broker host's own address
        yield ports
    finally:
        teardown()


def itch_feed(spec, interp, rng: random.Random, n_packets: int, stocks: list[str], want: dict,
              first_ref: int = 1, **addresses) -> tuple[list[bytes], dict]:
    """Packets of 1-12 Add Orders with increasing order references from `first_ref`; `want`
    collects, per port, the references the IR says that port must receive."""
    frames, ref = [], first_ref
    for _ in range(n_packets):
        batch = []
        for _ in range(rng.randint(1, 12)):
            values = message_from_text(spec, f"stock={rng.choice(stocks)} price={rng.randint(1, 1000)}")
            for p in interp.run(values).actions.ports:
                want[p].append(ref)
            values["add_order.order_ref_number"] = ref
            batch.append(values)
            ref += 1
        frames.append(build_packet(spec, batch, **addresses))
    return frames, want


def start_capture(port: int, secs: float) -> subprocess.Popen:
    if port == 4:                     # LOCAL: a UDP socket on the broker host itself
        cmd = [sys.executable, "-c", CAPTURE_SCRIPT, "udp", "10.78.0.2", str(secs), "26400"]
    else:
        ns, _, sub, ip = SUBS[port]
        args = ["udp", ip, str(secs), "26400"] if port == 3 else ["raw", sub, str(secs)]
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-c", CAPTURE_SCRIPT, *args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def lab_feed(spec, interp, seed: int, n_packets: int) -> tuple[list[bytes], dict]:
    """The lab's ITCH feed to the broker's interface, and per port what the IR says it must get."""
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    return itch_feed(spec, interp, random.Random(seed), n_packets, ["GOOGL", "AAPL", "MSFT", "TSLA", "JUNK", "IBM"],
                     {1: [], 2: [], 3: [], 4: []}, dst_mac=brk_mac, src_ip="10.78.0.1", dst_ip="10.78.0.2")


def send_and_capture(frames: list[bytes], ports: tuple[int, ...], cpu: int | None = None) -> dict[int, list[bytes]]:
    """Send the frames from the publisher (on `cpu` if given); per port, what its capture got
    (frames, or UDP payloads for ports 3 and 4). The captures run until the feed is sent and
    their interfaces are quiet, however long the machine takes (bounded generously)."""
    caps = {p: start_capture(p, 120.0) for p in ports}
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    subprocess.run(["ip", "netns", "exec", PUB_NS, *pin, sys.executable, "-c", SENDER_SCRIPT, "cxl-pub", "0"],
                   input=" ".join(f.hex() for f in frames), text=True, check=True)
    for proc in caps.values():
        proc.terminate()                  # each ends once its interface has been quiet for 0.5 s
    got = {}
    for p, proc in caps.items():
        out, _ = proc.communicate(timeout=30)
        got[p] = [bytes.fromhex(h) for h in json.loads(out.strip().splitlines()[-1])]
    return got


def publish_and_capture(spec, frames: list[bytes], cpu: int | None = None) -> dict[int, list[int]]:
    """Send the frames from the publisher (on `cpu` if given: the broker's receive runs there);
    per port, the order references its capture got (each interface copy checked: it decodes and
    its IP length was fixed after pruning)."""
    got = {}
    for p, pkts in send_and_capture(frames, (*SUBS, 4), cpu).items():
        refs = []
        for pkt in pkts:
            if p in (3, 4):
                refs += mold_order_refs(pkt)                      # a real UDP socket got it
            else:
                d = decode_packet(spec, pkt)
                assert d.error is None, d.error
                assert int.from_bytes(pkt[14 + 2:14 + 4], "big") == len(pkt) - 14   # IP length fixed
                refs += mold_order_refs(pkt[14 + 20 + 8:])
        got[p] = refs
    return got


@pytest.mark.parametrize("mode,redirect,fanout", [("native", False, "tc"), ("generic", False, "xdp"),
                                                  ("native", True, "auto"), ("native", False, "xdp")])
def test_each_subscriber_gets_exactly_its_messages(lab: Path, mode: str, redirect: bool, fanout: str) -> None:
    """Copies by TC clones or by XDP broadcast (ports 1-3: their own interfaces, which take XDP
    frames; a packet for port 4, the host's stack, goes by TC; generic XDP: TC only; `auto`
    broadcasts from 16 copies: never here)."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    compiled = compile_rules(spec, RULES, options=CompileOptions(count_rules=64))
    inst = runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), "lab-rules", mode, ports_path=str(lab),
                          xdp_redirect=redirect, fanout_mode=fanout)
    planned = fanout != "tc" and mode == "native"        # generic XDP: TC only (runtime.attach)
    assert ("XDP broadcast to ports 1, 2, 3" in inst.fanout) == planned, inst.fanout
    broadcast = planned and fanout == "xdp"
    interp = PipelineInterpreter(compiled.pipeline)
    frames, want = lab_feed(spec, interp, 11, 60)
    got = publish_and_capture(spec, frames)
    for p in (*SUBS, 4):
        assert sorted(got[p]) == sorted(want[p]), f"subscriber {p}"
        assert want[p], f"the feed should have something for subscriber {p}"
    stats = runtime.stats(BRK)
    assert stats["no_match"] > 0 and stats["deliver"] > 0
    assert (stats["redirected"] > 0) == redirect     # single-interface packets skipped TC
    assert (stats["broadcast"] > 0) == broadcast
    assert stats["local"] == sum(1 for f in frames if any(4 in interp.run(m.values).actions.ports
                                                          for m in decode_packet(spec, f).messages))
    for p in SUBS:     # one copy per packet that held something for the port (LOCAL: the original)
        sent = sum(1 for f in frames if any(interp.run(m.values).actions.ports and p in interp.run(m.values).actions.ports
                                            for m in decode_packet(spec, f).messages))
        assert stats[f"port {p}"] == sent
    # Per-rule counters: each rule compiled alone says which messages it matches.
    want_counts = expected_rule_counts(spec, RULES.strip().splitlines(), frames)
    assert counting.rule_counts(BRK) == want_counts
    assert all(n > 0 for _, n in want_counts)


def test_rps_to_another_cpu_is_turned_off_while_attached_and_restored(lab: Path) -> None:
    """With RPS steering the broker's packets to the other CPU, TC would read that CPU's ring
    and copy nothing (measured before the fix: no subscriber got a message). attach turns RPS
    off on the interface, every subscriber gets exactly its messages, detach restores the mask."""
    import os
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    mask_file = Path(f"/sys/class/net/{BRK}/queues/rx-0/rps_cpus")
    other = f"{1 << cpus[1]:x}"
    mask_file.write_text(other + "\n")
    try:
        spec = load_spec(APPS / "itch" / "itch.p4")
        compiled = compile_rules(spec, RULES)
        inst = runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), "lab-rules", "native",
                              ports_path=str(lab), fanout_mode="tc")
        assert list(inst.rps) == ["rx-0"] and int(inst.rps["rx-0"].replace(",", ""), 16) == 1 << cpus[1]
        assert int(mask_file.read_text().strip().replace(",", ""), 16) == 0
        interp = PipelineInterpreter(compiled.pipeline)
        frames, want = lab_feed(spec, interp, 5, 40)
        got = publish_and_capture(spec, frames, cpu=cpus[0])
        for p in (*SUBS, 4):
            assert sorted(got[p]) == sorted(want[p]), f"subscriber {p}"
        from click.testing import CliRunner
        from camus.cli import main
        assert "warning: RPS" not in CliRunner().invoke(main, ["status"], catch_exceptions=False).output
        mask_file.write_text(other + "\n")                   # someone turns it on again: status says so
        status = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
        assert f"warning: RPS is on for {BRK}'s rx-0" in status, status
        # and TC, now on the other CPU, drops the delivering packets and counts them, never copying
        # them by that CPU's ring slots (another packet's ports)
        before = runtime.stats(BRK)
        frames, _ = lab_feed(spec, interp, 6, 20)
        got = publish_and_capture(spec, frames, cpu=cpus[0])
        assert all(got[p] == [] for p in (*SUBS, 4)), got
        after = runtime.stats(BRK)
        assert after["cross_cpu"] - before["cross_cpu"] == after["deliver"] - before["deliver"] > 0
        mask_file.write_text("0\n")
        runtime.detach(BRK)
        assert int(mask_file.read_text().strip().replace(",", ""), 16) == 1 << cpus[1]
    finally:
        mask_file.write_text("0\n")


def capture_refs(proc: subprocess.Popen, spec, udp: bool) -> list[list[int]]:
    out, _ = proc.communicate(timeout=20)
    packets = [bytes.fromhex(h) for h in json.loads(out.strip().splitlines()[-1])]
    return [mold_order_refs(p if udp else p[14 + 20 + 8:]) for p in packets]


KINDS = ("GOOGL", "AAPL", "MSFT")               # every feed packet: one Add Order of each, in this order


def update_under_feed(spec, change) -> tuple[int, list[list[int]], list[list[str]]]:
    """Feed packets of GOOGL, AAPL and MSFT orders to the broker (one a millisecond) until the
    change has been seen working: AAPL copies reach port 2 under the old tables, `change()`
    runs, then MSFT copies reach it under the new ones; the feed stops there and every copy it
    sent is awaited (bounds generous: nothing here depends on how fast this machine builds).
    Returns the packets sent, port 1's order references per copy, port 2's stocks per copy."""
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    probe = []
    for i, stock in enumerate(KINDS):
        v = message_from_text(spec, f"stock={stock} price=10")
        v["add_order.order_ref_number"] = 0x5A5A5A5A00 + i
        probe.append(v)
    frame = build_packet(spec, probe, dst_mac=brk_mac)
    offsets = [frame.index((0x5A5A5A5A00 + i).to_bytes(8, "big")) for i in range(len(KINDS))]
    caps = {p: StreamCapture(SUBS[p][2], ["ip", "netns", "exec", SUBS[p][0]]) for p in (1, 2)}

    def stocks(pkt: bytes) -> list[str]:
        return [KINDS[(r - 1) % 3] for r in mold_order_refs(pkt[14 + 20 + 8:])]
    try:
        feed = Feed(PUB_NS, "cxl-pub", frame, offsets)
        try:
            caps[2].wait_for(lambda got: len(got) >= 50)                 # flowing under the old tables
            change()
            caps[2].wait_for(lambda got: sum(stocks(p) == ["MSFT"] for p in got) >= 50)   # and the new
        finally:
            sent = feed.stop()
        for cap in caps.values():
            cap.wait_for(lambda got: len(got) >= sent)
    finally:
        got = {p: cap.stop() for p, cap in caps.items()}
    return (sent, [mold_order_refs(p[14 + 20 + 8:]) for p in got[1]], [stocks(p) for p in got[2]])


def test_update_under_traffic_loses_nothing_and_never_mixes_tables(lab: Path) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    old = "stock == GOOGL : fwd(1)\nstock == AAPL : fwd(2)\n"
    new = "stock == GOOGL : fwd(1)\nstock == MSFT : fwd(2)\n"
    count_opts = CompileOptions(count_rules=64)
    runtime.attach(BRK, compile_rules(spec, old, options=count_opts), str(APPS / "itch" / "itch.p4"), "old", "native",
                   ports_path=str(lab))
    n, sub1, seen = update_under_feed(
        spec, lambda: runtime.update(BRK, compile_rules(spec, new, options=count_opts), "new"))
    assert sorted(r for pkt in sub1 for r in pkt) == [3 * k + 1 for k in range(n)]   # unchanged: nothing lost
    assert all(s in (["AAPL"], ["MSFT"]) for s in seen)            # one table set per packet
    switch = next(i for i, s in enumerate(seen) if s == ["MSFT"])
    assert switch > 0 and all(s == ["AAPL"] for s in seen[:switch]) and all(s == ["MSFT"] for s in seen[switch:])
    assert len(seen) == n                                           # and nothing lost across the switch
    # The unchanged rule's counter carried over the update; the new rule counts from its start.
    assert counting.rule_counts(BRK) == [("stock == GOOGL : fwd(1)", n), ("stock == MSFT : fwd(2)", n - switch)]


@pytest.mark.parametrize("fanout", ["tc", "xdp"])
def test_ipv6_feed_is_pruned_with_valid_checksums(lab: Path, fanout: str) -> None:
    """Pruned copies carry a recomputed UDP checksum (IPv6 requires one), made by TC or by the
    broadcast's egress program."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    rules = "stock == GOOGL : fwd(1)\nstock == AAPL : fwd(2)\nstock == MSFT and price > 500 : fwd(1, 2)\n"
    compiled = compile_rules(spec, rules)
    runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), "v6", "native", ports_path=str(lab),
                   fanout_mode=fanout)
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    interp = PipelineInterpreter(compiled.pipeline)
    frames, want = itch_feed(spec, interp, random.Random(3), 40, ["GOOGL", "AAPL", "MSFT", "IBM"],
                             {1: [], 2: []}, dst_mac=brk_mac, src_ip="fd00::1", dst_ip="fd00::2")
    caps = {}
    for p in (1, 2):
        ns, _, sub, _ = SUBS[p]
        caps[p] = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", CAPTURE_SCRIPT, "raw6", sub, "3"],
                                   stdout=subprocess.PIPE, text=True)
        assert caps[p].stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", PUB_NS, sys.executable, "-c", SENDER_SCRIPT, "cxl-pub", "0"],
                   input=" ".join(f.hex() for f in frames), text=True, check=True)
    for p, proc in caps.items():
        out, _ = proc.communicate(timeout=20)
        refs = []
        for pkt in (bytes.fromhex(h) for h in json.loads(out.strip().splitlines()[-1])):
            if decode_packet(spec, pkt).messages == []:
                continue                                   # neighbour discovery and the like
            udp = pkt[54:]
            assert int.from_bytes(pkt[18:20], "big") == len(udp)               # payload length fixed
            assert udp[6:8] == udp_checksum_v6(pkt[22:38], pkt[38:54], udp).to_bytes(2, "big")
            refs += mold_order_refs(udp[8:])
        assert sorted(refs) == sorted(want[p]), f"subscriber {p}"
    assert (runtime.stats(BRK)["broadcast"] > 0) == (fanout == "xdp")


def test_overload_bypass_over_delivers_and_counts(lab: Path) -> None:
    """SANDS's graceful degradation: above the configured rate the broker stops filtering and
    sends every message to every port a rule forwards to. Subscribers get all they asked for
    plus extra copies, never less; `stats` counts the bypassed messages."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    compiled = compile_rules(spec, RULES)
    runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), "lab-rules", "native", ports_path=str(lab))
    cli = Path(sys.executable).parent / "camus-xdp"
    out = sh(str(cli), "overload", BRK, "--bypass-pps", "100").stdout
    assert "bypassed above 100 packets/s per CPU" in out
    frames, want = lab_feed(spec, PipelineInterpreter(compiled.pipeline), 5, 80)
    extra = 0
    for p, refs in publish_and_capture(spec, frames).items():
        assert len(refs) == len(set(refs)), f"subscriber {p}: a message twice"
        assert set(want[p]) <= set(refs), f"subscriber {p} missed {sorted(set(want[p]) - set(refs))[:10]}"
        extra += len(set(refs) - set(want[p]))
    stats = runtime.stats(BRK)
    assert stats["bypassed"] > 0 and extra > 0, (stats, extra)
    assert stats["bypassed"] <= stats["messages"]
    assert "overload bypass off" in sh(str(cli), "overload", BRK, "--bypass-pps", "0").stdout


def test_two_apps_on_one_interface_each_forward_by_their_own_ports_file(lab: Path, tmp_path: Path) -> None:
    """Two ITCH feeds on UDP 26400 and 26500, each its own app with its own rules and ports
    file, both copying to subscriber 1's interface: the TC programs of each app take only their
    app's packets and copies (the app id in the metadata and the mark), so subscriber 1 gets
    exactly the union and every other port exactly the first app's share."""
    from camus.dataplane import apps
    spec_a = load_spec(APPS / "itch" / "itch.p4")
    other = tmp_path / "itch_b.p4"
    other.write_text((APPS / "itch" / "itch.p4").read_text().replace("udp_port(26400)", "udp_port(26500)"))
    spec_b = load_spec(other)
    ports_b = tmp_path / "ports_b.yaml"
    ports_b.write_text(f"1: {{iface: {SUBS[1][1]}}}\n")
    rules_b = "stock == IBM : fwd(1)\n"
    a = compile_rules(spec_a, RULES, options=CompileOptions(count_rules=64))
    b = compile_rules(spec_b, rules_b, options=CompileOptions(count_rules=64))
    apps.attach_apps(BRK, [apps.App("a", a, str(APPS / "itch" / "itch.p4"), "a-rules", str(lab)),
                           apps.App("b", b, str(other), "b-rules", str(ports_b))], "native")
    frames, want = lab_feed(spec_a, PipelineInterpreter(a.pipeline), 5, 30)
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    want_b: dict = {1: []}
    frames_b, _ = itch_feed(spec_b, PipelineInterpreter(b.pipeline), random.Random(6), 20, ["IBM", "GOOGL"], want_b,
                            first_ref=1_000_000, dst_mac=brk_mac, src_ip="10.78.0.1", dst_ip="10.78.0.2",
                            dst_port=26500)          # app b's order references apart from a's
    got = {p: [r for pkt in pkts for r in mold_order_refs(pkt if p in (3, 4) else pkt[14 + 20 + 8:])]
           for p, pkts in send_and_capture(frames + frames_b, (*SUBS, 4)).items()}
    assert sorted(got[1]) == sorted(want[1] + want_b[1]) and want_b[1]
    for p in (2, 3, 4):
        assert sorted(got[p]) == sorted(want[p]), f"subscriber {p}"
    assert runtime.stats(f"{BRK}@b")["port 1"] == sum(1 for f in frames_b if any(
        m.values["add_order.stock"] == message_from_text(spec_b, "stock=IBM")["add_order.stock"]
        for m in decode_packet(spec_b, f).messages))
    runtime.detach(BRK)


def test_broadcast_groups_follow_the_rules_through_updates(lab: Path, tmp_path: Path) -> None:
    """Each port set of the leaves gets a devmap of just those ports: a packet for one of them is
    broadcast to exactly its ports (never to all with the extra copies dropped); an update
    brings the new sets' groups and removes the old ones'."""
    from camus.dataplane import fanout
    from camus.dataplane.installed import pin_dir
    from camus.dataplane.maps import MapSet
    spec = load_spec(APPS / "itch" / "itch.p4")
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))

    def one_message_frames(stocks: list[str]) -> list[bytes]:
        out = []
        for ref, stock in enumerate(stocks, 1):
            values = message_from_text(spec, f"stock={stock} price=10")
            values["add_order.order_ref_number"] = ref
            out.append(build_packet(spec, [values], dst_mac=brk_mac, src_ip="10.78.0.1", dst_ip="10.78.0.2"))
        return out

    def groups() -> set[tuple[int, ...]]:
        maps = MapSet.from_pins(pin_dir(BRK))
        try:
            return fanout.group_keys(maps)
        finally:
            maps.close()

    stocks = ["GOOGL", "AAPL", "IBM", "MSFT"] * 10
    for n, rules in enumerate(["stock == GOOGL : fwd(1)\nstock == AAPL : fwd(1, 2)\nstock == IBM : fwd(4)\n",
                               "stock == GOOGL : fwd(2, 3)\nstock == AAPL : fwd(3)\nstock == MSFT : fwd(1)\n"]):
        compiled = compile_rules(spec, rules)
        (tmp_path / "rules.txt").write_text(rules)
        if n == 0:
            runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), str(tmp_path / "rules.txt"), "native",
                           ports_path=str(lab), fanout_mode="xdp")
            assert groups() == {(0b1, 0, 0, 0), (0b11, 0, 0, 0)}          # ports 1 and 2 are bits 0 and 1
        else:
            runtime.update(BRK, compiled, str(tmp_path / "rules.txt"))
            assert groups() == {(0b110, 0, 0, 0), (0b100, 0, 0, 0), (0b1, 0, 0, 0)}
        before = runtime.stats(BRK)
        frames = one_message_frames(stocks)
        got = publish_and_capture(spec, frames)
        interp = PipelineInterpreter(compiled.pipeline)
        for p in (*SUBS, 4):
            want = [ref for ref, s in enumerate(stocks, 1) if p in interp.run(
                message_from_text(spec, f"stock={s} price=10")).actions.ports]
            assert sorted(got[p]) == want, f"rules {n}, subscriber {p}"
        after = runtime.stats(BRK)
        fan_only = sum(1 for s in stocks if (ports := interp.run(message_from_text(spec, f"stock={s} price=10"))
                                            .actions.ports) and 4 not in ports)
        assert after["broadcast"] - before["broadcast"] == fan_only == 10 * (2 + n)
        assert after["broadcast_all"] == before["broadcast_all"]               # each by its group
