"""The edge broker in the namespace lab: unmodified MQTT clients (mosquitto_pub, mosquitto_sub)
publish and subscribe through camus-xdp. A publisher-side edge broker labels publications and
sends them to the XDP broker; XDP classifies them by topic and sends a copy to each subscribed
edge broker (one logical port each), which hands it to its matching MQTT clients. The
subscriptions reach the XDP tables through the subscriber-side edge brokers."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.language.topics import matches
from camus.dataplane import runtime
from camus.dataplane import installed as state
from camus.lab.namespaces import Lab, netns_popen, processes, sh
from tests.conftest import APPS

pytestmark = [pytest.mark.netns, pytest.mark.bpf]
SPEC = APPS / "topics" / "topics.p4"
CLI = [str(Path(sys.executable).parent / "camus-xdp")]
EDGE_PORT = 9201
SUBS = {1: "plant/+/temp", 2: "plant/#"}
PUBS = ["plant/7/temp", "office/1/temp", "plant", "plant/3/temp", "plant/3/humidity", "$SYS/x", "plant/7/temp/raw"]
BURST = """
import socket, sys
from camus.bench.topic_clients import hello, publish
s = socket.create_connection(("127.0.0.1", 1883))
s.sendall(hello("mqtt", "burst"))
assert s.recv(4)[0] == 0x20                            # CONNACK
s.sendall(b"".join(publish("mqtt", t, b"b%d" % k)[0] for k, t in enumerate(sys.argv[1:])) + b"\\xe0\\x00")
s.recv(1)                                              # DISCONNECT: the edge closes
"""
SILENT = """
import sys
import threading
from tests.edge.edge_server import RawClient, connect_packet
from camus.edge import mqtt
c = RawClient(1883)
c.send(connect_packet("silent", keepalive=2))
assert c.packet().kind == mqtt.CONNACK
c.send(mqtt.client_packet(mqtt.SUBSCRIBE, b"\\x00\\x01" + mqtt.encode_string("plant/#") + b"\\x01", 2))
assert c.packet().kind == mqtt.SUBACK
print("subscribed", flush=True)
p = c.packet()                                         # a QoS 1 publication through XDP
print("qos", (p.flags >> 1) & 3, flush=True)
c.send(mqtt.ack(mqtt.PUBACK, int.from_bytes(p.body[-4:-2], "big")))
print("closed" if c.packet() is None else "still open", flush=True)   # silent: no PINGREQ
"""


def wait_for(what: str, check, timeout: float = 15.0, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} {state()}")


def live_rules(iface: str) -> list[str]:
    return state.load_installed(iface).rule_lines


@pytest.fixture
def lab(tmp_path: Path):
    if not shutil.which("mosquitto_sub"):
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs it)")
    with Lab(prefix="camus-edge", subscribers=2, net="10.81") as lab:
        ports = lab.write_endpoint_ports(tmp_path / "ports.yaml", EDGE_PORT)
        rules = tmp_path / "none.rules"
        rules.write_text("# the edge brokers add the subscriptions\n")
        runtime.attach(lab.broker, compile_rules(load_spec(SPEC), rules.read_text()), str(SPEC), str(rules),
                       "native", ports_path=str(ports))
        with processes() as procs:          # stopped (SIGTERM) before the lab goes
            yield lab, procs


def _edges(lab, procs) -> None:  # type: ignore[no-untyped-def]
    edge = [*CLI, "edge", "--spec", str(SPEC), "--listen", "127.0.0.1:1883"]
    # the edge brokers share the machine's bpffs (as containers on the XDP host do)
    procs.append(netns_popen(lab.pub_ns, *edge, "--feed", f"{lab.net}.0.2:9200", bpffs=True))
    for p in SUBS:
        procs.append(netns_popen(lab.sub_ns(p), *edge, "--deliveries", f"0.0.0.0:{EDGE_PORT}", "--iface", lab.broker,
                                 "--port", str(p), bpffs=True))
    for ns in (lab.pub_ns, lab.sub_ns(1), lab.sub_ns(2)):
        wait_for(f"the edge broker in {ns}", lambda ns=ns: sh("ip", "netns", "exec", ns, "ss", "-ltn").stdout.count(":1883") > 0)


def test_qos_crosses_xdp_and_a_silent_client_leaves_the_tables(lab) -> None:
    """A QoS 1 publication reaches a QoS 1 subscriber at QoS 1 through the XDP broker (the QoS
    byte after the payload); the subscriber then goes silent past 1.5 x its keep-alive of 2 s
    and the edge closes it and takes its filter out of the XDP tables."""
    lab, procs = lab
    _edges(lab, procs)
    silent = netns_popen(lab.sub_ns(1), sys.executable, "-c", SILENT, stdout=subprocess.PIPE, text=True,
                         cwd=str(APPS.parent))
    procs.append(silent)
    assert silent.stdout.readline().strip() == "subscribed"
    wait_for("the subscription in the XDP tables", lambda: 'topic == "plant/#" : fwd(1)' in live_rules(lab.broker),
             state=lambda: f"(live rules: {live_rules(lab.broker)})")
    sh("ip", "netns", "exec", lab.pub_ns, "mosquitto_pub", "-h", "127.0.0.1", "-q", "1", "-t", "plant/1", "-m", "q1")
    assert silent.stdout.readline().strip() == "qos 1"
    assert silent.stdout.readline().strip() == "closed"
    wait_for("the silent client's filter to leave the XDP tables",
             lambda: not any("fwd(" in r for r in live_rules(lab.broker)), timeout=60)


def test_mqtt_clients_publish_and_subscribe_through_xdp(lab) -> None:
    lab, procs = lab
    _edges(lab, procs)
    subs = {p: netns_popen(lab.sub_ns(p), "mosquitto_sub", "-h", "127.0.0.1", "-t", flt, "-v",
                           stdout=subprocess.PIPE, text=True) for p, flt in SUBS.items()}
    procs.extend(subs.values())
    wait_for("the subscriptions in the XDP tables",
             lambda: all(f'topic == "{f}" : fwd({p})' in live_rules(lab.broker) for p, f in SUBS.items()),
             state=lambda: f"(live rules: {live_rules(lab.broker)})")
    before = runtime.stats(lab.broker)
    for k, topic in enumerate(PUBS):
        sh("ip", "netns", "exec", lab.pub_ns, "mosquitto_pub", "-h", "127.0.0.1", "-t", topic, "-m", f"m{k}")
    wait_for("every publication through XDP",
             lambda: runtime.stats(lab.broker)["messages"] - before["messages"] >= len(PUBS), timeout=60,
             state=lambda: f"(counters: {runtime.stats(lab.broker)})")
    after = runtime.stats(lab.broker)
    assert after["messages"] - before["messages"] == len(PUBS)          # every publication went through XDP
    assert after["no_match"] - before["no_match"] == 2                  # office/1/temp and $SYS/x: dropped there
    # a burst from one client (one TCP write) goes in MoldUDP64 batches; each copy keeps its port's
    burst = PUBS * 4
    sh("ip", "netns", "exec", lab.pub_ns, sys.executable, "-c", BURST, *burst)
    wait_for("the burst through XDP",
             lambda: runtime.stats(lab.broker)["messages"] - after["messages"] >= len(burst), timeout=60,
             state=lambda: f"(counters: {runtime.stats(lab.broker)})")
    batched = runtime.stats(lab.broker)
    assert batched["messages"] - after["messages"] == len(burst)
    feed_packets = (batched["packets"] - batched["other"]) - (after["packets"] - after["other"])
    assert feed_packets <= -(-len(burst) // 12)                         # 12 per datagram (edge/framing.py)
    for p, proc in subs.items():
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        want = [f"{t} m{k}" for k, t in enumerate(PUBS) if matches("mqtt", SUBS[p], t)]
        want += [f"{t} b{k}" for k, t in enumerate(burst) if matches("mqtt", SUBS[p], t)]
        assert out.split("\n")[:-1] == want, (p, out)
    # a subscriber leaving takes its filter out of the tables
    wait_for("the subscriptions to leave", lambda: not any("fwd(" in r for r in live_rules(lab.broker)))
    # the edge brokers' files belong to the attachment: detach takes them too
    edge_files = state.attachment_dir(lab.broker) / "edge"
    assert (edge_files / "1.rules").exists()
    for proc in procs:
        proc.terminate()
        proc.wait(20)
    runtime.detach(lab.broker)
    assert not edge_files.exists()


def _lines(proc: subprocess.Popen, into: list[str]) -> threading.Thread:
    """Read a subscriber's output lines into `into` as they come."""
    def read() -> None:
        for line in proc.stdout:                        # type: ignore[union-attr]
            into.append(line.rstrip("\n"))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_a_shared_subscription_across_edges_gives_each_message_to_one_member(lab) -> None:
    """`$share/workers/plant/#` with a member behind each subscriber-side edge (MQTT 5 clients):
    the XDP broker forwards the group's publications to one edge, its home (the lowest port that
    declares it), and each publication reaches exactly one member; when the home's member leaves,
    the rule moves to the other port and its member gets them all."""
    lab, procs = lab
    _edges(lab, procs)
    got: dict[int, list[str]] = {1: [], 2: []}
    members = {}
    for p in (1, 2):
        members[p] = netns_popen(lab.sub_ns(p), "mosquitto_sub", "-V", "mqttv5", "-h", "127.0.0.1", "-t",
                                 "$share/workers/plant/#", "-v", stdout=subprocess.PIPE, text=True)
        procs.append(members[p])
        _lines(members[p], got[p])
    edge_dir = state.attachment_dir(lab.broker) / "edge"
    wait_for("both edges to declare the group", lambda: all(
        (edge_dir / f"{p}.rules").exists() and "workers" in (edge_dir / f"{p}.rules").read_text() for p in (1, 2)))
    wait_for("the group's rule for port 1 only", lambda: [r for r in live_rules(lab.broker) if "fwd(" in r]
             == ['topic == "plant/#" : fwd(1)'], state=lambda: f"(live rules: {live_rules(lab.broker)})")

    def publish(first: int, n: int) -> None:
        for k in range(first, first + n):
            sh("ip", "netns", "exec", lab.pub_ns, "mosquitto_pub", "-V", "mqttv5", "-h", "127.0.0.1", "-q", "1",
               "-t", f"plant/{k}", "-m", f"m{k}")

    def fence(member: int) -> None:
        """Publish fences until one reaches `member` (a publication after the others, on the same
        path: once it is there, they are too); the fences are taken out of what it got."""
        def arrived() -> bool:
            return any(line.startswith("plant/fence") for line in got[member])
        deadline = time.monotonic() + 60
        while not arrived():
            assert time.monotonic() < deadline, got
            sh("ip", "netns", "exec", lab.pub_ns, "mosquitto_pub", "-V", "mqttv5", "-h", "127.0.0.1", "-q", "1",
               "-t", "plant/fence", "-m", "f")
            again = time.monotonic() + 2.0               # (a fence the old home swallowed: send another)
            while not arrived() and time.monotonic() < again:
                time.sleep(0.05)
        got[member][:] = [line for line in got[member] if not line.startswith("plant/fence")]

    publish(0, 12)
    fence(1)                                            # after it, nothing more of the 12 can come
    assert sorted(got[1] + got[2]) == sorted(f"plant/{k} m{k}" for k in range(12)) and not got[2], got
    members[1].terminate()                             # the home's member leaves: port 2 is the home
    wait_for("the group's rule to move to port 2", lambda: [r for r in live_rules(lab.broker) if "fwd(" in r]
             == ['topic == "plant/#" : fwd(2)'], timeout=60, state=lambda: f"(live rules: {live_rules(lab.broker)})")
    fence(2)                                            # port 2's edge has read the move (edge/shared.py)
    publish(12, 6)
    fence(2)
    assert got[2] == [f"plant/{k} m{k}" for k in range(12, 18)], got
