"""The edge broker's framing: publications batched into MoldUDP64 datagrams the XDP program
classifies (up to `batch` messages, never more than one MTU), and back."""
from __future__ import annotations

import pytest

from camus.compiler.codec.packets import decode_packet, encode_message, udp_frame
from camus.compiler.language.topics import TopicError
from camus.compiler.language.spec_parser import load_spec
from camus.edge.framing import MAX_DATAGRAM, Framing
from tests.conftest import APPS

SPEC = load_spec(APPS / "topics" / "topics.p4")


def test_publications_that_come_together_share_datagrams_in_order() -> None:
    f = Framing(SPEC)
    pubs = [(f"plant/{k}/temp", b"%d" % k, k % 3) for k in range(30)]         # QoS 0, 1, 2
    grams = f.datagrams([f.encode(t, p, q) for t, p, q in pubs])
    assert [len(f.decode(g)) for g in grams] == [12, 12, 6]
    assert [m[:3] for g in grams for m in f.decode(g)] == pubs          # the QoS comes through
    # the sequence numbers run on across datagrams (MoldUDP64: the first message's number)
    assert [int.from_bytes(g[10:18], "big") for g in grams] == [1, 13, 25]
    # what the XDP program reads: each message's fields, the value parsed from the payload
    d = decode_packet(SPEC, udp_frame(grams[1], SPEC.udp_ports[0]))
    assert d.count == 12
    assert [m.values["note.value"] for m in d.messages] == list(range(12, 24))


def test_retain_origin_and_mqtt5_properties_ride_after_the_payload() -> None:
    """What an MQTT 5 publication carries through the XDP broker: its retain flag (for
    retain-as-published), the publisher (for no-local) and its properties, after the payload
    the header's length states (what the XDP program and the rules see is unchanged)."""
    f = Framing(SPEC)
    plain = f.encode("plant/1", b"42", 1)
    extra = b"EDGE" + (7).to_bytes(4, "big") + b"\x26\x00\x01k\x00\x01v"
    rich = f.encode("plant/1", b"42", 1, retain=True, extra=extra)
    assert rich.startswith(plain[:-1])                       # same header and payload
    both = f.decode(f.datagrams([plain, rich, f.encode("plant/2", b"x")])[0])
    assert both == [("plant/1", b"42", 1, b""), ("plant/1", b"42", 1 | 0x04 | 0x08, extra), ("plant/2", b"x", 0, b"")]


def test_the_qos_byte_is_beyond_the_payload_length_the_header_states() -> None:
    """A reader that does not know the QoS byte (the XDP program, an older edge) sees the
    payload the `length` field says, and the rules' `length` and `value` are the payload's."""
    f = Framing(SPEC)
    msg = f.encode("plant/1/temp", b"81", 2)
    d = decode_packet(SPEC, udp_frame(f.datagrams([msg])[0], SPEC.udp_ports[0]))
    assert d.messages[0].values["note.value"] == 81
    assert int.from_bytes(msg[68:72], "big") == 2                # note.length: the payload's bytes
    assert msg.endswith(b"81\x02") and f.encode("plant/1/temp", b"81", 0).endswith(b"81")


def test_a_datagram_never_outgrows_one_mtu_and_a_big_message_goes_alone() -> None:
    f = Framing(SPEC)
    big = f.encode("a/b", b"x" * 1500)
    small = [f.encode("a/b", b"y" * 600) for _ in range(3)]
    grams = f.datagrams([*small, big, *small])
    assert [len(f.decode(g)) for g in grams] == [2, 1, 1, 2, 1]
    assert all(len(g) <= MAX_DATAGRAM for g in grams if len(f.decode(g)) > 1)


def test_batch_size_is_checked_and_one_means_a_datagram_each() -> None:
    with pytest.raises(ValueError, match="1 to 16"):
        Framing(SPEC, batch=17)
    f = Framing(SPEC, batch=1)
    assert [len(f.decode(g)) for g in f.datagrams([f.encode("a", b"1")] * 3)] == [1, 1, 1]
    assert f.decode(b"short") == []


def test_the_remembered_header_encodes_as_the_generic_encoder_does() -> None:
    f = Framing(SPEC)
    for topic, payload in [("plant/7/temp", b" 81\n"), ("plant/7/temp", b"x"), ("a", b"9" * 20), ("b/c", b"")]:
        for _ in range(2):                       # first written, then remembered
            assert f.encode(topic, payload) == encode_message(SPEC, f._values(topic, payload)) + payload
    with pytest.raises(TopicError):
        f.encode("x" * 65, b"")                  # the field holds 64 bytes; nothing remembered
    with pytest.raises(TopicError):
        f.encode("x" * 65, b"")


def test_an_edge_refuses_an_xdp_broker_that_would_misread_it() -> None:
    from camus.compiler.language.spec_parser import parse_spec
    from camus.edge.framing import mismatch
    assert mismatch(SPEC, load_spec(APPS / "topics" / "topics.p4")) is None
    text = (APPS / "topics" / "topics.p4").read_text()
    unframed = parse_spec(text.replace("moldudp64_t moldudp64; ", ""), "old.p4")
    assert "moldudp64, the XDP broker reads none" in (mismatch(SPEC, unframed) or "")   # from before batching
    wider = parse_spec(text.replace("bit<512> topic;", "bit<256> topic;"), "narrow.p4")
    assert "72 bytes here and 40 there" in (mismatch(SPEC, wider) or "")
