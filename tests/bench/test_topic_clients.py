"""The topic-broker wire formats: what the publisher encodes, the subscriber's parser reads back,
also when the stream is cut at any byte (a partial message at the end is left out)."""
from __future__ import annotations

import pytest

from camus.bench.feeds import add_order, message_seq_ts, parse_mold, mold_payload, itch_feed, FeedConfig
from camus.bench.topic_clients import PROTOS, parse, publish, subscribe, topic


def _delivery(proto: str, t: str, payload: bytes) -> bytes:
    """What the broker sends a subscriber for one message."""
    if proto == "mqtt":
        return publish(proto, t, payload)[0]
    if proto == "mqtt5":                   # as a broker forwards one: with properties, skipped
        from camus.edge import mqtt5
        return mqtt5.publish_packet(t, payload, props=mqtt5.prop(mqtt5.USER_PROPERTY, ("site", "north")))
    if proto == "nats":
        return b"MSG %s 1 %d\r\n%s\r\n" % (t.encode(), len(payload), payload)
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(t), t.encode(), len(payload), payload)


@pytest.mark.parametrize("proto", PROTOS)
def test_parse_reads_back_every_message(proto: str) -> None:
    msgs = [add_order(seq, s, 100 + seq, 10, "B", ts_ns=seq * 1000) for seq, s in
            enumerate(["GOOGL", "AAPL", "PING", "MSFT"] * 5, start=1)]
    noise = {"mqtt": b"\x20\x02\x00\x00" + b"\x90\x03\x00\x01\x00", "nats": b"INFO {}\r\nPONG\r\n+OK\r\n",
             "mqtt5": b"\x20\x03\x00\x00\x00" + b"\x90\x04\x00\x01\x00\x00",
             "redis": b"*3\r\n$9\r\nsubscribe\r\n$10\r\nitch/GOOGL\r\n:1\r\n"}[proto]
    stream = noise + b"".join(_delivery(proto, topic(proto, "X"), m) for m in msgs)
    got = parse(proto, stream)
    assert [p for _, p in got] == msgs
    assert [message_seq_ts(p) for _, p in got] == [(i, i * 1000) for i in range(1, 21)]
    for cut in range(len(stream)):          # a cut stream yields a prefix, never garbage
        part = [p for _, p in parse(proto, stream[:cut])]
        assert part == msgs[:len(part)]
    assert subscribe(proto, [topic(proto, "GOOGL")])


def test_mold_payload_round_trip() -> None:
    feed = itch_feed(FeedConfig(messages=50, seed=3))
    for k, pk in enumerate(feed.packets):
        got = parse_mold(mold_payload(feed, pk, 1))
        assert [message_seq_ts(m)[0] for m in got] == [feed.messages[i][0] for i in pk]
    assert all(1 <= len(pk) <= 12 for pk in feed.packets)


def test_int_and_siena_feeds_decode_back(tmp_path) -> None:
    import struct
    from camus.bench.feeds import int_reports, siena_events, write_spec_frames
    from camus.compiler.codec.packets import decode_packet
    from camus.compiler.language.spec_parser import load_spec
    from tests.conftest import APPS
    for app, make in (("int", lambda s: int_reports(40, 3)), ("siena", lambda s: siena_events(40, s, 3))):
        spec = load_spec(APPS / app / f"{app}.p4")
        msgs = make(spec)
        path = write_spec_frames(spec, msgs, tmp_path / f"{app}.bin", src_ip="10.0.0.1", dst_ip="10.0.0.2",
                                 src_mac=b"\x02" * 6, dst_mac=b"\x04" * 6)
        data, pos, got = path.read_bytes(), 0, []
        while pos < len(data):
            n, k = struct.unpack_from("<HB", data, pos)
            frame = data[pos + 3 + 2 * k:pos + 3 + 2 * k + n]
            got += [m.values for m in decode_packet(spec, frame).messages]
            pos += 3 + 2 * k + n
        assert len(got) == 40
        for want, have in zip(msgs, got):
            assert {k: have[k] for k in want} == want


def test_a_subscriber_is_ready_only_once_the_broker_confirms_its_subscriptions() -> None:
    from camus.bench.topic_clients import subscribed
    connack, suback = b"\x20\x02\x00\x00", b"\x90\x03\x00\x01\x00"
    assert not subscribed("mqtt", connack, 1) and not subscribed("mqtt", connack + suback[:2], 1)
    assert subscribed("mqtt", connack + suback, 1)
    assert not subscribed("mqtt", b"\x30\x05\x00\x01a\x90\x90", 1)      # 0x90 inside a PUBLISH is no SUBACK
    assert not subscribed("nats", b"INFO {}\r\n", 1) and subscribed("nats", b"INFO {}\r\nPONG\r\n", 1)
    one = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
    assert not subscribed("redis", one, 2) and subscribed("redis", one * 2, 2)
