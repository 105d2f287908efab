"""`camus-xdp edge --persistence DIR`: retained messages and persistent sessions (subscriptions,
owed QoS 1/2 publications) survive a kill -9 of the edge; what clean sessions, unsubscribes and
cleared retained messages leave is nothing."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from camus.edge.store import EdgeStore, Kept
from tests.conftest import APPS
from tests.edge.edge_server import free_port, running, topics_broker
from tests.edge.test_mqtt_sessions import WAIT, Paho


def _edge(port: int, store: Path, said: list[str] | None = None) -> subprocess.Popen:
    """The edge command on `port` keeping its state in `store`; its lines up to "MQTT on" into `said`."""
    edge = subprocess.Popen([str(Path(sys.executable).parent / "camus-xdp"), "edge", "--spec",
                             str(APPS / "topics" / "topics.p4"), "--listen", f"127.0.0.1:{port}",
                             "--persistence", str(store), "--log-level", "info"], stderr=subprocess.PIPE, text=True)
    assert edge.stderr is not None
    for line in edge.stderr:                      # its start is logged: no fixed wait
        if said is not None:
            said.append(line)
        if "edge broker: MQTT on" in line:
            return edge
    raise AssertionError(f"the edge did not start (exit {edge.wait()})")


def test_acknowledged_publications_and_retained_messages_survive_a_kill_9(tmp_path) -> None:
    """The edge killed with -9 while a publisher sends QoS 1 as fast as it can: after restart
    the persistent session gets every publication the edge had acknowledged (PUBACK), in order,
    and the retained message is back."""
    import threading

    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion
    store, port = tmp_path / "store", free_port()
    edge = _edge(port, store)
    acked: set[int] = set()
    enough = threading.Event()
    try:
        keeper = Paho(port, "keeper", clean=False)
        assert keeper.subscribe(("plant/#", 1)) == [1]
        keeper.stop()                              # away: what it is owed is queued
        first = Paho(port, "first")
        first.publish("plant/1/temp", b"81", 1, retain=True)
        first.publish("plant/3/q2", b"exactly", 2)
        first.stop()
        pub = paho.Client(CallbackAPIVersion.VERSION2, client_id="pub", protocol=paho.MQTTv311)
        pub.max_inflight_messages_set(100)
        mids: dict[int, int] = {}

        def on_publish(c, u, mid, rc, props) -> None:  # type: ignore[no-untyped-def]
            acked.add(mid - 1)                     # paho numbers a client's publications 1, 2, ...
            if len(acked) >= 500:
                enough.set()
        pub.on_publish = on_publish
        pub.connect("127.0.0.1", port)
        pub.loop_start()
        for k in range(20_000):                    # far more than the edge gets through before the kill
            mids[pub.publish(f"plant/2/p{k}", str(k).encode(), 1).mid] = k
            if enough.is_set():
                break
        assert enough.wait(60) and all(mid == k + 1 for mid, k in mids.items())
    finally:
        edge.send_signal(signal.SIGKILL)           # mid-stream: only what was committed
        edge.wait(60)
    pub.loop_stop()
    said: list[str] = []
    edge = _edge(port, store, said)
    try:
        late = Paho(port, "late")
        assert late.subscribe(("plant/1/#", 0)) == [0]
        assert late.next() == ("plant/1/temp", b"81", 0, True)      # the retained message is back
        late.stop()
        back = Paho(port, "keeper", clean=False)
        assert back.session_present
        got = [back.next(), back.next()]
        assert got == [("plant/1/temp", b"81", 1, False), ("plant/3/q2", b"exactly", 1, False)]
        seen = []
        while not back.messages.empty() or not back.nothing_more():
            seen.append(int(back.next()[1]))
        assert seen == sorted(seen) and acked <= set(seen), sorted(acked - set(seen))[:5]
        back.stop()
    finally:
        edge.send_signal(signal.SIGINT)
        edge.communicate(timeout=60)
    assert any("persistent sessions" in line and "taken back" in line for line in said)
    kept = EdgeStore(store)
    try:
        assert kept.sessions()["keeper"].owed == []          # acknowledged by the client: paid
        assert kept.sessions()["keeper"].subs == {"plant/#": 1, "camus/test/fence": 0}   # (nothing_more's fence)
    finally:
        kept.close()


def test_clean_sessions_unsubscribes_and_cleared_retained_messages_leave_nothing(tmp_path) -> None:
    store = EdgeStore(tmp_path)
    b = topics_broker(store=store)
    with running(b) as port:
        p = Paho(port, "p", clean=False)
        assert p.subscribe(("a/#", 1), ("b/#", 2)) == [1, 2]
        p.unsubscribe("b/#")
        p.publish("a/x", b"kept", 1, retain=True)
        p.publish("a/y", b"gone", 1, retain=True)
        p.publish("a/y", b"", 1, retain=True)                  # an empty retained message clears it
        assert p.next()[1] == b"kept"
        p.stop()
        q = Paho(port, "q", clean=False)
        q.subscribe(("z", 0))
        q.stop()
        Paho(port, "q", clean=True).stop()                   # a clean session ends what "q" kept
    store = EdgeStore(tmp_path)                              # as the next run opens it
    try:
        assert store.retained() == {"a/x": Kept(b"kept", 1, True)}
        kept = store.sessions()
        assert list(kept) == ["p"] and kept["p"].subs == {"a/#": 1}
    finally:
        store.close()
    again = topics_broker(store=EdgeStore(tmp_path))
    assert set(again.filters) == {"a/#"} and again.by_client["p"].subs == {"a/#": 1}
    assert not again.by_client["p"].online and again.retained == {"a/x": (b"kept", 1)}


def test_mqtt_5_sessions_keep_their_expiry_options_and_properties_across_a_restart(tmp_path) -> None:
    """What MQTT 5 adds is kept too: a session's expiry interval and protocol level, its
    subscription options, an owed publication's properties and message expiry, a retained
    message's properties. (A store an earlier version wrote is opened with the new columns.)"""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.subscribeoptions import SubscribeOptions

    from tests.edge.test_mqtt5 import props
    keep = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
    b = topics_broker(store=EdgeStore(tmp_path))
    with running(b) as port:
        away = Paho(port, "away", v5=True, connect_props=keep)
        assert away.subscribe(("a/#", SubscribeOptions(qos=1, noLocal=True))) == [1]
        away.stop()
        pub = Paho(port, "pub", v5=True)
        pub.publish("a/1", b"owed", 1, props=props(MessageExpiryInterval=600, UserProperty=[("k", "v")]))
        pub.publish("a/r", b"kept", 1, retain=True, props=props(ContentType="text/plain"))
        pub.sync()
        pub.stop()
    again = topics_broker(store=EdgeStore(tmp_path))
    s = again.by_client["away"]
    assert (s.level, s.expiry, s.subs) == (5, 3600, {"a/#": 1 | 0x04})
    assert [(m.topic, m.payload) for m in s.queue] == [("a/1", b"owed"), ("a/r", b"kept")]
    assert 590 < s.queue[0].expires - time.monotonic() <= 600 and b"\x26" in s.queue[0].props
    assert again.retained_props["a/r"][0] == b"\x03\x00\x0atext/plain"
    with running(again) as port:
        back = Paho(port, "away", v5=True, clean=False, connect_props=keep)
        assert back.session_present
        assert back.next() == ("a/1", b"owed", 1, False)
        got = back.props.get(timeout=WAIT)
        assert got.UserProperty == [("k", "v")] and 590 <= got.MessageExpiryInterval <= 600
        assert back.next() == ("a/r", b"kept", 1, False)
        back.stop()
