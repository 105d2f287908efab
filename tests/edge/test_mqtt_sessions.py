"""What a mosquitto user relies on, with real clients (paho-mqtt, mosquitto_pub/_sub, and a
raw socket where a client must misbehave): wills, keep-alive, takeover, persistent sessions
with offline queueing and redelivery, zero-length client ids, MQTT 5 refused the MQTT 5 way,
`$` topics, retained, overlapping subscriptions, unsubscribe; each ended session takes its
filters out of the port's rules."""
from __future__ import annotations

import queue
import shutil
import signal
import subprocess
import threading
import time

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from camus.edge import mqtt
from tests.edge.edge_server import RawClient, connect_packet, running, topics_broker

WAIT = 30.0               # a generous bound for anything the broker does "soon"


def until(check) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Recorder:
    """The rule sink's side of the port: each rule set the broker made this port's."""

    def __init__(self) -> None:
        self.sets: list[list[str]] = []
        self.changed = threading.Condition()

    def apply(self, port: int, filters: list[str], shared: list[tuple[str, str]] | None = None) -> None:
        with self.changed:
            self.sets.append(list(filters))
            self.changed.notify_all()

    def wait_for(self, want: list[str]) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.sets and self.sets[-1] == want, WAIT), self.sets


class Paho:
    """A paho-mqtt client (MQTT 3.1.1, or 5 with `v5`) with its messages in a queue (and, for
    MQTT 5, each message's properties in `props`)."""

    def __init__(self, port: int, client_id: str, clean: bool = True, keepalive: int = 60,
                 will: tuple[str, bytes, int] | None = None, user: str | None = None, password: str | None = None,
                 tls_ca: str | None = None, v5: bool = False, connect_props=None, will_props=None,  # type: ignore[no-untyped-def]
                 websocket: bool = False) -> None:
        transport = "websockets" if websocket else "tcp"
        if v5:
            self.c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5,
                                 transport=transport)
        else:
            self.c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean,
                                 protocol=paho.MQTTv311, transport=transport)
        if websocket:
            self.c.ws_set_options(path="/mqtt")
        self.messages: queue.Queue = queue.Queue()
        self.props: queue.Queue = queue.Queue()
        self.connected: queue.Queue = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.gone = threading.Event()
        self.reason: int | None = None                 # the broker's DISCONNECT reason (MQTT 5)

        def on_message(c, u, m) -> None:  # type: ignore[no-untyped-def]
            self.props.put(m.properties)
            self.messages.put((m.topic, m.payload, m.qos, bool(m.retain)))

        def on_disconnect(c, u, flags, rc, props) -> None:  # type: ignore[no-untyped-def]
            self.reason = rc.value
            self.gone.set()
        self.c.on_message = on_message
        self.c.on_connect = lambda c, u, flags, rc, props: self.connected.put((rc.value, flags.session_present, props))
        self.c.on_subscribe = lambda c, u, mid, codes, props: self.acks.put([x.value for x in codes])
        self.c.on_unsubscribe = lambda c, u, mid, codes, props: self.acks.put(
            [x.value for x in codes] if v5 else "unsubscribed")
        self.c.on_disconnect = on_disconnect
        if will:
            self.c.will_set(will[0], will[1], will[2], properties=will_props)
        if user is not None:
            self.c.username_pw_set(user, password)
        if tls_ca:
            self.c.tls_set(ca_certs=tls_ca)
        if v5:
            self.c.connect("127.0.0.1", port, keepalive, clean_start=clean, properties=connect_props)
        else:
            self.c.connect("127.0.0.1", port, keepalive)
        self.c.loop_start()
        self.rc, self.session_present, self.connack_props = self.connected.get(timeout=WAIT)

    def subscribe(self, *filters: tuple[str, int]) -> list[int]:
        self.c.subscribe(list(filters))
        return self.acks.get(timeout=WAIT)

    def unsubscribe(self, flt: str):  # type: ignore[no-untyped-def]
        self.c.unsubscribe(flt)
        got = self.acks.get(timeout=WAIT)
        assert got == "unsubscribed" or isinstance(got, list)
        return got

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, props=None) -> None:  # type: ignore[no-untyped-def]
        self.c.publish(topic, payload, qos, retain, properties=props).wait_for_publish(WAIT)

    def next(self, timeout: float = WAIT):  # type: ignore[no-untyped-def]
        return self.messages.get(timeout=timeout)

    def sync(self) -> None:
        """Return once the broker has handled everything this client sent before (a SUBSCRIBE
        is answered after the packets ahead of it)."""
        self.subscribe(("camus/test/fence", 0))

    def nothing_more(self, settle: float = 0.5) -> bool:
        """No further message arrives (after a round trip through the broker and `settle`)."""
        self.sync()
        time.sleep(settle)
        return self.messages.empty()

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


@pytest.fixture
def broker():
    sink = Recorder()
    b = topics_broker(sink=sink)
    b.port = 1                                   # rules for port 1 go to the recorder
    b.sink_recorder = sink
    with running(b) as port:
        b.listen_port = port
        yield b


def test_a_will_is_published_when_its_client_dies(broker) -> None:
    watcher = Paho(broker.listen_port, "watcher")
    assert watcher.subscribe(("wills/#", 1)) == [1]
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs them)")
    doomed = subprocess.Popen(["mosquitto_sub", "-p", str(broker.listen_port), "-t", "plant/#", "-i", "doomed",
                               "--will-topic", "wills/a", "--will-payload", "dead", "--will-qos", "1"],
                              stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT
    while "doomed" not in broker.by_client or not broker.by_client["doomed"].subs:
        assert time.monotonic() < deadline and doomed.poll() is None
        time.sleep(0.02)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    assert watcher.next() == ("wills/a", b"dead", 1, False)
    broker.sink_recorder.wait_for(["wills/#"])           # the dead client's filter left the port's rules
    # a clean DISCONNECT discards the will
    polite = Paho(broker.listen_port, "polite", will=("wills/b", b"dead", 0))
    polite.stop()
    assert watcher.nothing_more() and broker.stats.wills == 1
    watcher.stop()


def test_a_silent_client_is_disconnected_after_one_and_a_half_keep_alives(broker) -> None:
    watcher = Paho(broker.listen_port, "watcher")
    watcher.subscribe(("wills/#", 0))
    silent = RawClient(broker.listen_port)
    silent.send(connect_packet("silent", keepalive=1, will=("wills/silent", b"expired", 0)))
    assert silent.packet().kind == mqtt.CONNACK
    silent.send(mqtt.client_packet(mqtt.SUBSCRIBE, b"\x00\x01" + mqtt.encode_string("plant/9/#") + b"\x00", 2))
    assert silent.packet().kind == mqtt.SUBACK
    broker.sink_recorder.wait_for(["plant/9/#", "wills/#"])
    t0 = time.monotonic()
    assert silent.packet() is None                       # the broker closed it: no PINGREQ came
    assert 1.5 <= time.monotonic() - t0 < WAIT
    assert watcher.next() == ("wills/silent", b"expired", 0, False)
    broker.sink_recorder.wait_for(["wills/#"])           # and its filter left the XDP tables' rules
    assert broker.stats.expired == 1
    # a client that pings is kept
    pinging = Paho(broker.listen_port, "pinging", keepalive=1)
    kept = broker.by_client["pinging"]
    first_seen = kept.seen
    # wait for its pings to have kept it alive past three keep-alive windows (an event: the
    # broker saw its PINGREQs, however slow the machine), then check it was never closed
    until(lambda: kept.seen - first_seen > 3 * 1.5 * kept.keepalive)
    assert not pinging.gone.is_set() and broker.by_client.get("pinging") is kept and kept.writer is not None
    pinging.stop()
    watcher.stop()


def test_a_second_connection_with_the_same_client_id_takes_the_session_over(broker) -> None:
    first = Paho(broker.listen_port, "twin", clean=False)
    first.subscribe(("plant/1/#", 1))
    second = Paho(broker.listen_port, "twin", clean=False)
    assert first.gone.wait(WAIT)                          # the old connection was closed
    assert second.session_present                         # the session (and its subscription) moved over
    pub = Paho(broker.listen_port, "pub")
    pub.publish("plant/1/temp", b"7", 1)
    assert second.next() == ("plant/1/temp", b"7", 1, False)
    assert broker.stats.taken_over == 1
    first.c.loop_stop()
    for c in (second, pub):
        c.stop()


def test_a_persistent_session_queues_qos_1_and_2_while_away(broker) -> None:
    away = Paho(broker.listen_port, "away", clean=False)
    assert away.subscribe(("TopicA/+", 2)) == [2]
    away.stop()
    pub = Paho(broker.listen_port, "pub")
    for qos in (0, 1, 2):
        pub.publish(f"TopicA/q{qos}", f"qos {qos}".encode(), qos)
    pub.stop()
    back = Paho(broker.listen_port, "away", clean=False)
    assert back.session_present
    got = sorted(back.next() for _ in range(2))
    assert got == [("TopicA/q1", b"qos 1", 1, False), ("TopicA/q2", b"qos 2", 2, False)]
    assert back.nothing_more()                            # QoS 0 is not queued (the default)
    back.stop()
    # a clean session after it: nothing kept, session present 0
    fresh = Paho(broker.listen_port, "away", clean=True)
    assert not fresh.session_present
    fresh.stop()
    until(lambda: "away" not in broker.by_client)          # a clean session ends with its connection


def test_unacknowledged_publications_are_sent_again_on_reconnection(broker) -> None:
    sub = RawClient(broker.listen_port)
    sub.send(connect_packet("forgetful", clean=False))
    assert sub.packet().kind == mqtt.CONNACK
    sub.send(mqtt.client_packet(mqtt.SUBSCRIBE, b"\x00\x01" + mqtt.encode_string("TopicA/#") + b"\x02", 2))
    assert sub.packet().kind == mqtt.SUBACK
    pub = Paho(broker.listen_port, "pub")
    pub.publish("TopicA/B", b"one", 1)
    pub.publish("TopicA/C", b"two", 2)
    first = [sub.packet() for _ in range(2)]
    assert [(p.kind, (p.flags >> 1) & 3, p.flags & 8) for p in first] == [(mqtt.PUBLISH, 1, 0), (mqtt.PUBLISH, 2, 0)]
    sub.close()                                           # never acknowledged
    again = RawClient(broker.listen_port)
    again.send(connect_packet("forgetful", clean=False))
    ack = again.packet()
    assert (ack.kind, ack.body) == (mqtt.CONNACK, b"\x01\x00")   # session present
    resent = [again.packet() for _ in range(2)]
    assert [(p.kind, (p.flags >> 1) & 3, p.flags & 8) for p in resent] == [(mqtt.PUBLISH, 1, 8), (mqtt.PUBLISH, 2, 8)]
    assert [p.body for p in resent] == [p.body for p in first]   # same topics, packet ids, payloads
    pid1, pid2 = (int.from_bytes(p.body[2 + len("TopicA/B"):4 + len("TopicA/B")], "big") for p in resent)
    again.send(mqtt.ack(mqtt.PUBACK, pid1))
    again.send(mqtt.ack(mqtt.PUBREC, pid2))
    rel = again.packet()
    assert (rel.kind, rel.body) == (mqtt.PUBREL, pid2.to_bytes(2, "big"))
    again.send(mqtt.ack(mqtt.PUBCOMP, pid2))
    again.send(mqtt.client_packet(mqtt.PINGREQ, b""))
    assert again.packet().kind == mqtt.PINGRESP
    assert not broker.by_client["forgetful"].inflight
    again.send(mqtt.client_packet(mqtt.DISCONNECT, b""))
    again.close()
    pub.stop()


def test_a_zero_length_client_id_needs_clean_session() -> None:
    b = topics_broker()
    with running(b) as port:
        c = RawClient(port)
        c.send(connect_packet("", clean=False))
        ack = c.packet()
        assert (ack.kind, ack.body[1]) == (mqtt.CONNACK, mqtt.REFUSED_IDENTIFIER)
        assert c.packet() is None
        anon = Paho(port, "")                               # clean session: the broker names it
        assert anon.rc == 0
        assert anon.subscribe(("a/b", 0)) == [0]
        anon.publish("a/b", b"x")
        assert anon.next() == ("a/b", b"x", 0, False)
        anon.stop()


def test_dollar_topics_retained_overlapping_and_unsubscribe(broker) -> None:
    a = Paho(broker.listen_port, "a")
    a.publish("TopicA/B", b"kept", 1, retain=True)
    a.publish("$SYS/x", b"system", 1, retain=True)
    assert a.subscribe(("+/+", 2)) == [2]
    assert a.next() == ("TopicA/B", b"kept", 1, True)      # retained, at its QoS; $SYS not by a wildcard
    assert a.nothing_more()
    assert a.subscribe(("$SYS/#", 0)) == [0]
    assert a.next() == ("$SYS/x", b"system", 0, True)
    # overlapping: one copy at the highest QoS of the matching subscriptions
    assert a.subscribe(("TopicA/#", 1), ("#", 0)) == [1, 0]
    assert a.next() == ("TopicA/B", b"kept", 1, True)      # the new filters' retained message, once
    a.publish("TopicA/C", b"both", 2)
    assert a.next() == ("TopicA/C", b"both", 2, False)
    assert a.nothing_more()
    a.unsubscribe("+/+")
    a.publish("TopicA/C", b"one", 2)
    assert a.next() == ("TopicA/C", b"one", 1, False)       # TopicA/# at QoS 1 is left
    a.publish("TopicA/B", b"", 0, retain=True)              # clears the retained message
    a.sync()
    a.stop()
    b = Paho(broker.listen_port, "b")
    b.subscribe(("TopicA/#", 0))
    assert b.nothing_more() and "TopicA/B" not in broker.retained
    b.stop()


def test_connect_fields_are_read_and_malformed_ones_refused() -> None:
    def parsed(packet: bytes) -> mqtt.Connect:
        (p,), _ = mqtt.split_packets(bytearray(packet))
        return mqtt.parse_connect(p)
    c = parsed(connect_packet("id", clean=False, keepalive=7, will=("w/t", b"bye", 2), user="u", password=b"pw"))
    assert (c.client_id, c.clean, c.keepalive, c.username, c.password) == ("id", False, 7, "u", b"pw")
    assert c.will == mqtt.Will("w/t", b"bye", 2, False)
    assert parsed(connect_packet("id", level=5)).level == 5          # refused by level, before its properties
    for bad, why in [(connect_packet("id", will=("w/#", b"", 0)), "wildcard"),
                     (connect_packet("id", password=b"pw"), "without a user name")]:
        with pytest.raises(mqtt.ProtocolError, match=why):
            parsed(bad)
    reserved = bytearray(connect_packet("id"))
    reserved[9] |= 0x01                                               # the connect flags' reserved bit
    with pytest.raises(mqtt.ProtocolError, match="reserved"):
        parsed(bytes(reserved))


class Refusing:
    """A rule sink whose updates fail (say, the XDP tables are full)."""

    def apply(self, port: int, filters: list[str], shared: list[tuple[str, str]] | None = None) -> None:
        raise RuntimeError("the tables are full")


def test_a_subscription_the_tables_refuse_is_answered_0x80_and_left_out() -> None:
    b = topics_broker(sink=Refusing())
    b.port = 1
    with running(b) as port:
        c = Paho(port, "refused")
        assert c.subscribe(("plant/#", 1)) == [0x80]
        assert not b.by_client["refused"].subs and not b.filters and not b.trie.match("plant/1")
        c.stop()
