"""MQTT 5 on the edge broker with real clients (paho-mqtt in its MQTT 5 mode, mosquitto_pub/_sub
-V mqttv5, a raw socket where a library will not misbehave): properties, reason codes, session
and message expiry, topic aliases, subscription options, shared subscriptions, receive maximum,
server keep-alive, enhanced authentication refused; and 3.1.1 and 5 clients on the same topics."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from camus.edge import mqtt, mqtt5
from camus.edge.auth import Acl, Passwords, hash_password
from camus.edge.session import Limits
from tests.edge.edge_server import RawClient, connect_packet, running, topics_broker
from tests.edge.test_mqtt_sessions import WAIT, Paho


def props(kind: int = PacketTypes.PUBLISH, **values) -> Properties:  # type: ignore[no-untyped-def]
    p = Properties(kind)
    for name, value in values.items():
        setattr(p, name, value)
    return p


def subscribe5(packet_id: int, *filters: str, options: int = 0) -> bytes:
    body = packet_id.to_bytes(2, "big") + mqtt5.block() + b"".join(mqtt.encode_string(f) + bytes((options,))
                                                                    for f in filters)
    return mqtt.client_packet(mqtt.SUBSCRIBE, body, 2)


def wait_until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def port():  # type: ignore[no-untyped-def]
    b = topics_broker()
    with running(b) as p:
        yield p


def test_properties_reach_version_5_subscribers_and_3_1_1_ones_get_the_message(port) -> None:
    """User properties, content type, payload format, response topic and correlation data
    (request/response) go through as published; a 3.1.1 subscriber on the same topic gets the
    message without them; QoS 1 and 2 both ways between the versions."""
    new = Paho(port, "new", v5=True)
    old = Paho(port, "old")
    assert new.subscribe(("plant/#", 2)) == [2] and old.subscribe(("plant/#", 2)) == [2]
    request = props(UserProperty=[("site", "north"), ("site", "south")], ContentType="text/plain",
                    PayloadFormatIndicator=1, ResponseTopic="replies/new", CorrelationData=b"\x00\x01req-7")
    new.publish("plant/1", b"21.5", 1, props=request)
    assert new.next() == ("plant/1", b"21.5", 1, False) and old.next() == ("plant/1", b"21.5", 1, False)
    got = new.props.get(timeout=WAIT)
    assert got.UserProperty == [("site", "north"), ("site", "south")] and got.ContentType == "text/plain"
    assert (got.PayloadFormatIndicator, got.ResponseTopic, got.CorrelationData) == (1, "replies/new", b"\x00\x01req-7")
    old.publish("plant/2", b"from 3.1.1", 2)
    assert new.next() == ("plant/2", b"from 3.1.1", 2, False) and old.next() == ("plant/2", b"from 3.1.1", 2, False)
    for c in (new, old):
        c.stop()


def test_mosquitto_clients_in_mqtt_5_mode() -> None:
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs them)")
    b = topics_broker()
    with running(b) as port:
        sub = subprocess.Popen(["mosquitto_sub", "-V", "mqttv5", "-p", str(port), "-t", "plant/#", "-C", "2",
                                "-i", "msub", "-F", "%t %p %P"], stdout=subprocess.PIPE, text=True)
        watcher = Paho(port, "watcher")                  # a 3.1.1 client on the same topics
        watcher.subscribe(("plant/#", 1))
        wait_until(lambda: "msub" in b.by_client and b.by_client["msub"].subs, "mosquitto_sub subscribed")
        for qos in (0, 1):
            subprocess.run(["mosquitto_pub", "-V", "mqttv5", "-p", str(port), "-t", "plant/probe", "-m", f"q{qos}",
                            "-q", str(qos), "-D", "publish", "user-property", "k", "v"], check=True, timeout=WAIT)
            assert watcher.next() == ("plant/probe", b"q%d" % qos, qos, False)
        out, _ = sub.communicate(timeout=WAIT)
        assert out.splitlines() == ["plant/probe q0 k:v", "plant/probe q1 k:v"]   # the user property came through
        watcher.stop()


def test_reason_codes_on_every_acknowledgement(tmp_path) -> None:
    pw = tmp_path / "passwd"
    pw.write_text(f"alice:{hash_password('s3cret')}\n")
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite plant/#\n")
    b = topics_broker(passwords=Passwords(pw), acl=Acl.load(acl))
    with running(b) as port:
        wrong = Paho(port, "w", user="alice", password="nope", v5=True)
        assert wrong.rc == mqtt5.BAD_CREDENTIALS
        anon = Paho(port, "anon", v5=True)
        assert anon.rc == mqtt5.NOT_AUTHORIZED
        alice = Paho(port, "a", user="alice", password="s3cret", v5=True)
        assert alice.subscribe(("plant/#", 1), ("other/#", 0)) == [1, mqtt5.NOT_AUTHORIZED]
        assert alice.unsubscribe("plant/#") == [0] and alice.unsubscribe("never/held") == [mqtt5.NO_SUBSCRIPTION_EXISTED]
        for c in (wrong, anon):
            c.c.loop_stop()
        alice.stop()
        # PUBACK / PUBREC with 0x87 for a publication the ACL refuses; PUBCOMP 0x92 for an unknown id
        raw = RawClient(port)
        raw.send(connect_packet("r", user="alice", password=b"s3cret", level=5))
        assert raw.packet().body[1] == 0
        raw.send(mqtt5.publish_packet("elsewhere/1", b"x", qos=1, packet_id=5))
        ack = raw.packet()
        assert (ack.kind, ack.body) == (mqtt.PUBACK, b"\x00\x05\x87")
        raw.send(mqtt5.publish_packet("elsewhere/1", b"x", qos=2, packet_id=6))
        ack = raw.packet()
        assert (ack.kind, ack.body) == (mqtt.PUBREC, b"\x00\x06\x87")
        raw.send(mqtt5.ack(mqtt.PUBREL, 77))
        ack = raw.packet()
        assert (ack.kind, ack.body) == (mqtt.PUBCOMP, b"\x00\x4d\x92")
        raw.send(subscribe5(9, "bad/#/x", "$share/a+/x", "$share/g", "plant/+"))    # (paho will not send them)
        ack = raw.packet()
        assert (ack.kind, ack.body) == (mqtt.SUBACK, b"\x00\x09\x00" + bytes([mqtt5.TOPIC_FILTER_INVALID] * 3 + [0]))
        raw.close()


def test_enhanced_authentication_and_malformed_properties_are_refused_with_their_reason(port, caplog) -> None:
    raw = RawClient(port)
    raw.send(connect_packet("e", level=5, props=mqtt5.prop(mqtt5.AUTH_METHOD, "SCRAM-SHA-1")))
    ack = raw.packet()
    assert (ack.kind, ack.body[1]) == (mqtt.CONNACK, mqtt5.BAD_AUTH_METHOD) and raw.packet() is None
    assert any("enhanced authentication" in r.getMessage() for r in caplog.records)
    raw = RawClient(port)
    raw.send(connect_packet("e", level=5, props=b"\x7f\x00"))           # no property 0x7f
    ack = raw.packet()
    assert (ack.kind, ack.body[1]) == (mqtt.CONNACK, mqtt5.MALFORMED) and raw.packet() is None
    raw = RawClient(port)                                                # a topic alias past the maximum
    raw.send(connect_packet("e", level=5))
    props_ = raw.packet().body[3:]
    assert mqtt5.prop(mqtt5.TOPIC_ALIAS_MAXIMUM, 10) in props_ and mqtt5.prop(mqtt5.RECEIVE_MAXIMUM, 1000) in props_
    raw.send(mqtt5.publish_packet("a/b", b"x", props=mqtt5.prop(mqtt5.TOPIC_ALIAS, 11)))
    bye = raw.packet()
    assert (bye.kind, bye.body[0]) == (mqtt.DISCONNECT, mqtt5.TOPIC_ALIAS_INVALID)
    again = RawClient(port)                    # back at once, while the old connection drains
    again.send(connect_packet("e", level=5))
    assert again.packet().body[1] == 0 and raw.packet() is None
    again.send(mqtt5.publish_packet("a/b", b"x"))       # the session works (nothing wrote to the old one)
    again.send(mqtt.client_packet(mqtt.PINGREQ, b""))
    assert again.packet().kind == mqtt.PINGRESP
    again.close()


def test_topic_aliases_from_a_publisher(port) -> None:
    """paho-mqtt sets an alias with a topic, then sends the alias alone, then points it at
    another topic; the subscriber sees the topics whole; an alias never set ends the connection
    with DISCONNECT 0x82."""
    sub = Paho(port, "sub", v5=True)
    sub.subscribe(("plant/#", 0))
    pub = Paho(port, "aliased", v5=True)
    for topic, payload in (("plant/7/temp", b"1"), ("", b"2"), ("plant/8/temp", b"3"), ("", b"4")):
        pub.publish(topic, payload, 0, props=props(TopicAlias=3))
    assert [sub.next()[:2] for _ in range(4)] == [("plant/7/temp", b"1"), ("plant/7/temp", b"2"),
                                                  ("plant/8/temp", b"3"), ("plant/8/temp", b"4")]
    pub.stop()
    sub.stop()
    raw = RawClient(port)
    raw.send(connect_packet("aliased", level=5))
    assert raw.packet().body[1] == 0
    raw.send(mqtt5.publish_packet("", b"5", props=mqtt5.prop(mqtt5.TOPIC_ALIAS, 4)))   # never set
    bye = raw.packet()
    assert (bye.kind, bye.body[0]) == (mqtt.DISCONNECT, mqtt5.PROTOCOL_ERROR)
    raw.close()


def test_session_expiry_and_message_expiry() -> None:
    b = topics_broker()
    with running(b) as port:
        keep = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
        away = Paho(port, "away", v5=True, clean=True, connect_props=keep)
        away.subscribe(("plant/#", 1))
        away.stop()
        wait_until(lambda: b.by_client["away"].writer is None, "the session is away")
        pub = Paho(port, "pub", v5=True)
        pub.publish("plant/1", b"short-lived", 1, props=props(MessageExpiryInterval=1))
        pub.publish("plant/2", b"long-lived", 1, props=props(MessageExpiryInterval=600))
        wait_until(lambda: len(b.by_client["away"].queue) == 2, "both queued")
        time.sleep(1.2)                                   # the first one's expiry passes
        back = Paho(port, "away", v5=True, clean=False, connect_props=keep)
        assert back.session_present
        assert back.next() == ("plant/2", b"long-lived", 1, False)
        left = back.props.get(timeout=WAIT).MessageExpiryInterval
        assert 590 <= left <= 600                          # the time it waited taken off
        assert back.nothing_more() and b.by_client["away"].expired_msgs == 1
        back.stop()
        # a session with an expiry of 1 s ends 1 s after its connection: nothing kept for it
        brief = Paho(port, "brief", v5=True, clean=True, connect_props=props(PacketTypes.CONNECT,
                                                                             SessionExpiryInterval=1))
        brief.subscribe(("plant/#", 1))
        brief.stop()
        wait_until(lambda: "brief" not in b.by_client, "the session expired")
        assert b.stats.sessions_expired == 1 and "plant/#" not in b.filters or "away" in b.by_client
        again = Paho(port, "brief", v5=True, clean=False)
        assert not again.session_present
        again.stop()
        pub.stop()


def test_subscription_options_no_local_retain_as_published_and_retain_handling(port) -> None:
    me = Paho(port, "me", v5=True)
    other = Paho(port, "other", v5=True)
    assert me.subscribe(("chat/#", SubscribeOptions(qos=1, noLocal=True))) == [1]
    assert other.subscribe(("chat/#", SubscribeOptions(qos=1, retainAsPublished=True))) == [1]
    me.publish("chat/1", b"mine", 1, retain=True)
    other.publish("chat/2", b"theirs", 1)
    assert me.next() == ("chat/2", b"theirs", 1, False)           # not its own (no-local)
    assert me.nothing_more()
    got = sorted([other.next(), other.next()])
    assert got == [("chat/1", b"mine", 1, True), ("chat/2", b"theirs", 1, False)]   # retain as published
    # retain handling: 0 sends the retained message, 1 only for a new subscription, 2 never
    late = Paho(port, "late", v5=True)
    assert late.subscribe(("chat/#", SubscribeOptions(qos=0, retainHandling=2))) == [0]
    assert late.nothing_more()
    assert late.subscribe(("chat/+", SubscribeOptions(qos=0, retainHandling=1))) == [0]
    assert late.next() == ("chat/1", b"mine", 0, True)
    assert late.subscribe(("chat/+", SubscribeOptions(qos=0, retainHandling=1))) == [0]   # not new: none
    assert late.subscribe(("chat/+", SubscribeOptions(qos=0, retainHandling=0))) == [0]
    assert late.next() == ("chat/1", b"mine", 0, True)
    assert late.nothing_more()
    for c in (me, other, late):
        c.stop()


def test_shared_subscriptions_give_each_message_to_one_member(port) -> None:
    members = [Paho(port, f"worker-{i}", v5=True) for i in range(3)]
    legacy = Paho(port, "legacy-worker")                        # a 3.1.1 member of the same group
    for m in members:
        assert m.subscribe(("$share/workers/jobs/#", 1)) == [1]
    assert legacy.subscribe(("$share/workers/jobs/#", 1)) == [1]
    everyone = Paho(port, "audit", v5=True)
    everyone.subscribe(("jobs/#", 1))
    pub = Paho(port, "pub", v5=True)
    for k in range(40):
        pub.publish(f"jobs/{k}", b"%d" % k, 1)
    assert sorted(int(everyone.next()[1]) for _ in range(40)) == list(range(40))
    got: list[int] = []
    shares = []
    for m in [*members, legacy]:
        m.sync()
        mine = []
        while not m.messages.empty():
            mine.append(int(m.messages.get()[1]))
        shares.append(len(mine))
        got += mine
    assert sorted(got) == list(range(40)), shares             # each exactly once
    assert all(n > 0 for n in shares), shares                 # and shared out
    for c in [*members, legacy, everyone, pub]:
        c.stop()


def test_receive_maximum_bounds_what_is_in_flight_to_a_client(port) -> None:
    raw = RawClient(port)
    raw.send(connect_packet("slow", level=5, props=mqtt5.prop(mqtt5.RECEIVE_MAXIMUM, 1)))
    assert raw.packet().body[1] == 0
    raw.send(subscribe5(1, "q/#", options=1))
    assert raw.packet().kind == mqtt.SUBACK
    pub = Paho(port, "pub", v5=True)
    for k in range(3):
        pub.publish("q/1", b"%d" % k, 1)
    pub.sync()
    first = raw.packet()
    assert first.kind == mqtt.PUBLISH
    raw.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):                          # one in flight until it is acknowledged
        raw.packet()
    raw.sock.settimeout(WAIT)
    for k in range(3):
        raw.send(mqtt.ack(mqtt.PUBACK, int.from_bytes(first.body[5:7], "big")))
        if k < 2:
            first = raw.packet()
            assert first.body.endswith(b"%d" % (k + 1))
    pub.stop()
    raw.close()


def test_server_keep_alive_and_the_disconnect_reason_for_silence() -> None:
    b = topics_broker(limits=Limits(max_keepalive=1))
    with running(b) as port:
        raw = RawClient(port)
        raw.send(connect_packet("quiet", keepalive=60, level=5))
        ack = raw.packet()
        assert mqtt5.prop(mqtt5.SERVER_KEEP_ALIVE, 1) in ack.body
        bye = raw.packet()                                 # 1.5 s of silence
        assert (bye.kind, bye.body[0]) == (mqtt.DISCONNECT, mqtt5.KEEP_ALIVE_TIMEOUT)
        raw.close()


def test_a_delayed_will_waits_and_is_not_sent_if_the_client_returns(port) -> None:
    watcher = Paho(port, "watcher", v5=True)
    watcher.subscribe(("wills/#", 0))
    keep = props(PacketTypes.CONNECT, SessionExpiryInterval=60)
    for name, comes_back in (("returns", True), ("gone", False)):
        dying = Paho(port, name, v5=True, connect_props=keep, will=(f"wills/{name}", b"bye", 0),
                     will_props=props(PacketTypes.WILLMESSAGE, WillDelayInterval=1))
        dying.c.loop_stop()
        dying.c.socket().close()                        # no DISCONNECT: the will is due
        started = time.monotonic()
        if comes_back:
            Paho(port, name, v5=True, clean=False, connect_props=keep).stop()
            assert watcher.nothing_more(1.5), watcher.next()
        else:
            assert watcher.next() == (f"wills/{name}", b"bye", 0, False)
            assert time.monotonic() - started >= 0.9
    watcher.stop()


def test_a_shared_group_on_several_edges_has_one_home_port() -> None:
    """The XDP broker forwards a group's publications to one edge only: the lowest port that
    declares it; the others deliver none of them until it is theirs."""
    from camus.edge.rules_sink import combine, homes
    from camus.edge.shared import declaration, declared
    texts = {2: 'topic == "jobs/#" : fwd(2)\n' + declaration("workers", "jobs/#") + "\n",
             1: 'topic == "a b" : fwd(1)\n' + declaration("w two", "a b") + "\n" + declaration("workers", "jobs/#") + "\n",
             3: declaration("workers", "jobs/#") + "\n" + declaration("solo", "x/+") + "\n"}
    assert declared(declaration("w two", "a b")) == ("w two", "a b") and declared('topic == "x" : fwd(1)') is None
    assert homes(texts) == {("workers", "jobs/#"): 1, ("w two", "a b"): 1, ("solo", "x/+"): 3}
    assert combine(texts).splitlines() == ['topic == "a b" : fwd(1)', 'topic == "jobs/#" : fwd(2)',
                                           'topic == "x/+" : fwd(3)', 'topic == "jobs/#" : fwd(1)']
    del texts[1]                                        # port 1's members left: port 2 is the home
    assert homes(texts)[("workers", "jobs/#")] == 2 and combine(texts).count("fwd(2)") == 1


def test_subscription_identifiers_come_back_with_what_each_subscription_matched(port) -> None:
    one = Paho(port, "one", v5=True)
    one.c.subscribe("ids/#", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=456789))
    assert one.acks.get(timeout=WAIT) == [1]
    one.c.subscribe("ids/+", 0, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=2))
    assert one.acks.get(timeout=WAIT) == [0]
    one.publish("ids/x", b"both", 1, retain=True)
    assert one.next() == ("ids/x", b"both", 1, False)
    assert sorted(one.props.get(timeout=WAIT).SubscriptionIdentifier) == [2, 456789]   # one copy, both ids
    late = Paho(port, "late", v5=True)                           # a retained message carries the id too
    late.c.subscribe("ids/#", 0, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7))
    assert late.acks.get(timeout=WAIT) == [0]
    assert late.next() == ("ids/x", b"both", 0, True) and late.props.get(timeout=WAIT).SubscriptionIdentifier == [7]
    for c in (one, late):
        c.stop()


def test_the_broker_sets_topic_aliases_for_a_client_that_takes_them(port) -> None:
    """A client that takes topic aliases (Topic Alias Maximum in CONNECT) gets each topic once
    with an alias, then the alias alone, up to its maximum; the aliases end with the connection."""
    raw = RawClient(port)
    raw.send(connect_packet("aliases", level=5, props=mqtt5.prop(mqtt5.TOPIC_ALIAS_MAXIMUM, 1)))
    assert raw.packet().body[1] == 0
    raw.send(subscribe5(1, "al/#"))
    assert raw.packet().kind == mqtt.SUBACK
    pub = Paho(port, "pub", v5=True)
    for topic in ("al/1", "al/1", "al/2", "al/1"):
        pub.publish(topic, b"x")
    seen = []
    for _ in range(4):
        p = raw.packet()
        topic, pos = mqtt.string_at(p.body, 0)
        parsed, _ = mqtt5.read_props(p.body, pos)
        seen.append((topic, parsed.get(mqtt5.TOPIC_ALIAS)))
    assert seen == [("al/1", 1), ("", 1), ("al/2", None), ("", 1)]      # one alias: al/2 goes in full
    pub.stop()
    raw.close()


def test_mqtt_over_websockets_beside_tcp() -> None:
    """A WebSocket listener (`--listen ws://...`) serves the same broker: 3.1.1 and 5 clients over
    WebSockets and over TCP exchange publications both ways; a plain HTTP request is told to
    use a WebSocket client."""
    import urllib.error
    import urllib.request

    from tests.edge.edge_server import free_port
    ws_port = free_port()
    b = topics_broker()
    with running(b, websocket=ws_port) as port:
        browser = Paho(ws_port, "browser", v5=True, websocket=True)
        legacy = Paho(ws_port, "legacy", websocket=True)
        device = Paho(port, "device")
        for c in (browser, legacy, device):
            assert c.subscribe(("plant/#", 1)) == [1]
        browser.publish("plant/1", b"from ws", 1, props=props(UserProperty=[("via", "ws")]))
        device.publish("plant/2", b"from tcp", 1)
        for c in (browser, legacy, device):
            assert sorted([c.next(), c.next()]) == [("plant/1", b"from ws", 1, False), ("plant/2", b"from tcp", 1, False)]
        big = b"b" * 200_000                          # one packet over many WebSocket frames and reads
        device.publish("plant/3", big, 0)
        assert browser.next() == ("plant/3", big, 0, False) and legacy.next() == ("plant/3", big, 0, False)
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(f"http://127.0.0.1:{ws_port}/mqtt", timeout=WAIT)
        assert http.value.code == 400 and b"WebSocket" in http.value.read()
        for c in (browser, legacy, device):
            c.stop()
        wait_until(lambda: not b.by_client, "the WebSocket sessions ended with their connections")
