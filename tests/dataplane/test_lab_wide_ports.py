"""Lab test (root, namespaces): one broker serving 4,096 subscriber ports, every one a remote
endpoint (its own UDP port) behind one interface, so a port's copies are told apart by their
rewritten destination. Each port must get exactly the messages its filter selects: the port sets
are 64 words wide, TC's copies go on in tail calls past the first 1,024 ports, and a copy's
messages are read from the packet's ring slot at the egress (bpf/camus_tc.c)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from camus.compiler.compile import compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import decode_packet
from camus.compiler.language.spec_parser import load_spec
from camus.lab.namespaces import mold_order_refs
from camus.dataplane import installed as state
from camus.dataplane import runtime
from tests.conftest import APPS
from tests.dataplane.test_lab_forwarding import itch_feed, sh

pytestmark = pytest.mark.netns
PUB_NS, SUB_NS, BRK, SUB_BRK = "camus-wide-pub", "camus-wide-sub", "cxw-brk", "cxw-sb"
N_PORTS = 4096
FIRST_UDP = 20000                      # port k's endpoint listens on FIRST_UDP + k
WIDE = (1, 64, 65, 1024, 1025, 2049, 3000, 4096)     # one rule's ports across the words and TC's runs


def teardown() -> None:
    if state.state_path(BRK).exists():
        runtime.detach(BRK)
    for link in (BRK, SUB_BRK):
        sh("ip", "link", "del", link, check=False)
    for ns in (PUB_NS, SUB_NS):
        sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def lab(tmp_path):
    teardown()                                       # leftovers of an interrupted run
    try:
        sh("ip", "netns", "add", PUB_NS)
        sh("ip", "netns", "add", SUB_NS)
        sh("ip", "link", "add", BRK, "type", "veth", "peer", "name", "cxw-pub", "netns", PUB_NS)
        sh("ip", "link", "add", SUB_BRK, "type", "veth", "peer", "name", "cxw-sub", "netns", SUB_NS)
        for link in (BRK, SUB_BRK):
            sh("ip", "link", "set", link, "up")
        sh("ip", "netns", "exec", PUB_NS, "ip", "link", "set", "cxw-pub", "up")
        sh("ip", "netns", "exec", SUB_NS, "ip", "addr", "add", "10.79.1.2/24", "dev", "cxw-sub")
        sh("ip", "netns", "exec", SUB_NS, "ip", "link", "set", "cxw-sub", "up")
        sh("ip", "addr", "add", "10.79.0.2/24", "dev", BRK)
        mac = sh("ip", "netns", "exec", SUB_NS, "cat", "/sys/class/net/cxw-sub/address").stdout.strip()
        ports = tmp_path / "ports.yaml"
        ports.write_text("".join(f"{k}: {{iface: {SUB_BRK}, mac: '{mac}', ip: 10.79.1.2, udp_port: {FIRST_UDP + k}}}\n"
                                 for k in range(1, N_PORTS + 1)))
        yield ports
    finally:
        teardown()


def capture_by_port(frames: list[bytes]) -> dict[int, list[int]]:
    """Send the frames from the publisher; per subscriber port (by the copy's UDP destination),
    the order references the subscriber's interface received."""
    import json
    import subprocess
    import sys

    from camus.lab.namespaces import CAPTURE_SCRIPT, SENDER_SCRIPT
    cap = subprocess.Popen(["ip", "netns", "exec", SUB_NS, sys.executable, "-c", CAPTURE_SCRIPT, "raw", "cxw-sub",
                            "300"], stdout=subprocess.PIPE, text=True)
    assert cap.stdout is not None and cap.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", PUB_NS, sys.executable, "-c", SENDER_SCRIPT, "cxw-pub", "0.001"],
                   input=" ".join(f.hex() for f in frames), text=True, check=True)
    cap.terminate()                       # it ends once the interface has been quiet for 0.5 s
    out, _ = cap.communicate(timeout=60)
    got: dict[int, list[int]] = {}
    for h in json.loads(out.strip().splitlines()[-1]):
        pkt = bytes.fromhex(h)
        if pkt[14 + 9] != 17:                          # not UDP (neighbour discovery and such)
            continue
        dport = int.from_bytes(pkt[14 + 20 + 2:14 + 20 + 4], "big")
        got.setdefault(dport - FIRST_UDP, []).extend(mold_order_refs(pkt[14 + 20 + 8:]))
    return got


def test_4096_ports_each_get_exactly_their_messages(lab: Path) -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    rules = "".join(f"stock == S{k:04d} : fwd({k})\n" for k in range(1, N_PORTS + 1))
    rules += f"stock == FANOUT : fwd({', '.join(map(str, WIDE))})\n"
    compiled = compile_rules(spec, rules)
    inst = runtime.attach(BRK, compiled, str(APPS / "itch" / "itch.p4"), "wide-rules", "native",
                          ports_path=str(lab), fanout_mode="tc")
    assert inst.limits().port_words == 64
    interp = PipelineInterpreter(compiled.pipeline)
    rng = random.Random(5)
    stocks = [f"S{k:04d}" for k in rng.sample(range(1, N_PORTS + 1), 300)] + [f"S{k:04d}" for k in WIDE] + ["FANOUT"] * 8
    want: dict[int, list[int]] = {k: [] for k in range(1, N_PORTS + 1)}
    brk_mac = bytes.fromhex(Path(f"/sys/class/net/{BRK}/address").read_text().strip().replace(":", ""))
    frames, want = itch_feed(spec, interp, rng, 80, stocks, want, dst_mac=brk_mac, src_ip="10.79.0.1",
                             dst_ip="10.79.0.2")
    assert all(decode_packet(spec, f).error is None for f in frames)
    got = capture_by_port(frames)
    assert set(got) <= set(want), sorted(set(got) - set(want))[:10]
    wanted = {k: refs for k, refs in want.items() if refs}
    assert max(wanted) > 3073 and min(wanted) < 64           # words at both ends, past TC's first run
    for k, refs in wanted.items():
        assert sorted(got.get(k, [])) == sorted(refs), f"port {k}"
    assert not {k for k in got if not want[k]}
    stats = runtime.stats(BRK)
    assert stats["deliver"] == len(frames) and stats["cross_cpu"] == 0


def test_an_update_naming_more_ports_grows_the_port_sets() -> None:
    """Attached for 10 ports (4 words), updated to rules over 600: the program grows to 16-word
    port sets (make before break, dataplane/grow.py) and the kernel gives each message the ports
    the rules say; an update past 4,096 is refused and the old tables keep serving."""
    from camus.dataplane.program import DataplaneError
    from camus.lab.pinned_run import port_bits_of
    from camus.compiler.semantics.interpreter import PipelineInterpreter as Interp
    from camus.compiler.codec.packets import message_from_text
    unit = "cxw-g0"
    sh("ip", "link", "del", unit, check=False)
    sh("ip", "link", "add", unit, "type", "veth", "peer", "name", "cxw-g1")
    try:
        spec = load_spec(APPS / "itch" / "itch.p4")
        few = compile_rules(spec, "".join(f"stock == S{k:04d} : fwd({k})\n" for k in range(1, 11)))
        runtime.attach(unit, few, str(APPS / "itch" / "itch.p4"), "few", "generic")
        assert state.load_installed(unit).limits().port_words == 4
        text = "".join(f"stock == S{k:04d} : fwd({k})\n" for k in range(1, 601)) + "stock == FANOUT : fwd(2, 300, 600)\n"
        many = compile_rules(spec, text)
        assert runtime.update(unit, many, "many").grown
        inst = state.load_installed(unit)
        assert inst.limits().port_words == 16
        msgs = [f"stock=S{k:04d} price=5" for k in (1, 64, 65, 257, 599, 600)] + ["stock=FANOUT price=1", "stock=NONE price=1"]
        names = inst.keys["ports"]
        interp = Interp(many.pipeline)
        got = [sorted(names[b] for b in bits) for bits in port_bits_of(unit, spec, msgs)]
        assert got == [sorted(interp.run(message_from_text(spec, m)).actions.ports) for m in msgs]
        with pytest.raises(DataplaneError, match="old tables keep serving"):
            runtime.update(unit, compile_rules(spec, "".join(f"stock == T{k:04d} : fwd({k})\n" for k in range(1, 4200))),
                           "too-many")
        assert state.load_installed(unit).limits().port_words == 16
    finally:
        if state.state_path(unit).exists():
            runtime.detach(unit)
        sh("ip", "link", "del", unit, check=False)
