"""MQTT 3.1.1 (OASIS standard, 2014) packets as the edge broker speaks them: CONNECT with its
will, user name and password, PUBLISH at QoS 0, 1 and 2 both ways with their acknowledgements,
SUBSCRIBE/UNSUBSCRIBE, ping and disconnect. What MQTT 5 changes is in edge/mqtt5.py.

`read_packet` reads one control packet from an asyncio stream; the `*_packet` functions build
the server's replies. Malformed input raises `ProtocolError` (the session is then closed, as
section 4.8 asks).
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14
MAX_PACKET = 1 << 20                  # larger packets are refused (the data plane carries datagrams)
# CONNACK return codes (3.2.2.3)
REFUSED_PROTOCOL, REFUSED_IDENTIFIER, REFUSED_UNAVAILABLE, REFUSED_CREDENTIALS, REFUSED_NOT_AUTHORIZED = 1, 2, 3, 4, 5


class ProtocolError(ValueError):
    pass


@dataclass(slots=True)
class Packet:
    kind: int
    flags: int
    body: bytes


@dataclass
class Will:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    props: bytes = b""                # MQTT 5: forwarded with it (its message expiry among them)
    delay: int = 0                    # MQTT 5: seconds after the connection ends it waits


@dataclass
class Connect:
    client_id: str
    keepalive: int
    level: int
    clean: bool
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    packet_id: int = 0
    props: bytes = b""                # MQTT 5 properties forwarded to subscribers
    origin: int = 0                   # the publishing session (no-local subscriptions skip it)


@dataclass
class Subscribe:
    packet_id: int
    filters: list[tuple[str, int]] = field(default_factory=list)     # (filter, requested QoS)


class TooLarge(ProtocolError):
    """A packet whose remaining length is over the limit (known from its fixed header, before
    its body is read: nothing of it is buffered)."""


async def read_packet(reader: asyncio.StreamReader, limit: int = MAX_PACKET) -> Packet | None:
    """The next control packet, or None at a clean end of stream."""
    first = await reader.read(1)
    if not first:
        return None
    length, shift = 0, 0
    for _ in range(4):
        b = (await reader.readexactly(1))[0]
        length |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    else:
        raise ProtocolError("remaining length longer than four bytes")
    if length > limit:
        raise TooLarge(f"packet of {length} bytes (at most {limit})")
    return Packet(first[0] >> 4, first[0] & 0x0F, await reader.readexactly(length))


def pending_length(buf: bytearray) -> int | None:
    """The whole size of the packet `buf` starts with, once its fixed header is in (None
    before): how much a partial packet will take, to refuse it before it is buffered."""
    length, shift, i = 0, 0, 1
    while i < len(buf) and i <= 4:
        b = buf[i]
        length |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return i + length
        shift += 7
    return None


def split_packets(buf: bytearray, limit: int = MAX_PACKET) -> tuple[list[Packet], int]:
    """The whole control packets at the start of `buf` and the bytes they take (a client that
    streams many PUBLISH packets is parsed from one read, not one await per packet)."""
    out: list[Packet] = []
    pos, n = 0, len(buf)
    while pos + 2 <= n:
        length = buf[pos + 1]
        if length < 0x80:                 # the usual small packet: a one-byte remaining length
            i = pos + 2
            if i + length > n:
                break
            out.append(Packet(buf[pos] >> 4, buf[pos] & 0x0F, bytes(buf[i:i + length])))
            pos = i + length
            continue
        length, shift, i = 0, 0, pos + 1
        while True:
            if i >= n:
                return out, pos
            b = buf[i]
            length |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                break
            shift += 7
            if shift > 21:
                raise ProtocolError("remaining length longer than four bytes")
        if length > limit:
            raise TooLarge(f"packet of {length} bytes (at most {limit})")
        if i + length > n:
            break
        out.append(Packet(buf[pos] >> 4, buf[pos] & 0x0F, bytes(buf[i:i + length])))
        pos = i + length
    return out, pos


def binary_at(data: bytes, pos: int) -> tuple[bytes, int]:
    """A length-prefixed field (1.5.3, 1.5.6) at `pos`, and the position after it."""
    if pos + 2 > len(data):
        raise ProtocolError("truncated string")
    n = struct.unpack_from("!H", data, pos)[0]
    if pos + 2 + n > len(data):
        raise ProtocolError("truncated string")
    return data[pos + 2:pos + 2 + n], pos + 2 + n


def string_at(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = binary_at(data, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError:
        raise ProtocolError("string is not UTF-8") from None


def encode_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("!H", len(raw)) + raw


def varint(n: int) -> bytes:
    """A variable byte integer (1.5.5): remaining lengths, MQTT 5 property lengths."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fixed_header(kind: int, flags: int, body: bytes) -> bytes:
    return bytes((kind << 4 | flags,)) + varint(len(body)) + body



def parse_connect(p: Packet) -> Connect:
    """CONNECT's fields (3.1). A CONNECT of another level is read as far as its level: version 5
    is read by mqtt5.parse_connect, others are refused."""
    name, pos = string_at(p.body, 0)
    if name not in ("MQTT", "MQIsdp") or pos + 4 > len(p.body):
        raise ProtocolError(f"not an MQTT CONNECT (protocol {name!r})")
    level, flags, keepalive = p.body[pos], p.body[pos + 1], struct.unpack_from("!H", p.body, pos + 2)[0]
    if level not in (3, 4):
        return Connect("", keepalive, level, bool(flags & 0x02))     # (no more read)
    if flags & 0x01:
        raise ProtocolError("CONNECT's reserved flag is set")
    client_id, pos = string_at(p.body, pos + 4)
    will = None
    if flags & 0x04:
        topic, pos = string_at(p.body, pos)
        message, pos = binary_at(p.body, pos)
        qos = (flags >> 3) & 3
        if qos == 3:
            raise ProtocolError("will QoS 3")
        if not topic or "+" in topic or "#" in topic:
            raise ProtocolError(f"will topic {topic!r} is empty or a wildcard")
        will = Will(topic, message, qos, bool(flags & 0x20))
    elif flags & 0x38:
        raise ProtocolError("will QoS or retain set without a will")
    username = password = None
    if flags & 0x80:
        username, pos = string_at(p.body, pos)
    if flags & 0x40:
        if username is None:
            raise ProtocolError("a password without a user name")
        password, pos = binary_at(p.body, pos)
    return Connect(client_id, keepalive, level, bool(flags & 0x02), will, username, password)


def parse_publish(p: Packet) -> Publish:
    qos = (p.flags >> 1) & 3
    if qos == 3:
        raise ProtocolError("PUBLISH with QoS 3")
    body = p.body
    n = (body[0] << 8 | body[1]) if len(body) >= 2 else -1
    if 0 <= n and 2 + n <= len(body):
        try:
            topic, pos = body[2:2 + n].decode("utf-8"), 2 + n
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None
    else:
        topic, pos = string_at(body, 0)         # raises: truncated
    packet_id = 0
    if qos:
        if pos + 2 > len(p.body):
            raise ProtocolError("PUBLISH without its packet id")
        packet_id = struct.unpack_from("!H", p.body, pos)[0]
        pos += 2
    if not topic or "+" in topic or "#" in topic:
        raise ProtocolError(f"cannot publish to {topic!r} (empty or a wildcard)")
    return Publish(topic, p.body[pos:], qos, bool(p.flags & 1), packet_id)


def parse_subscribe(p: Packet, unsubscribe: bool = False) -> Subscribe:
    if p.flags != 0x2:
        raise ProtocolError("SUBSCRIBE/UNSUBSCRIBE flags must be 0010")
    if len(p.body) < 2:
        raise ProtocolError("SUBSCRIBE without its packet id")
    out = Subscribe(struct.unpack_from("!H", p.body, 0)[0])
    pos = 2
    while pos < len(p.body):
        flt, pos = string_at(p.body, pos)
        qos = 0
        if not unsubscribe:
            if pos >= len(p.body):
                raise ProtocolError("SUBSCRIBE filter without its QoS byte")
            qos, pos = p.body[pos] & 3, pos + 1
        out.filters.append((flt, qos))
    if not out.filters:
        raise ProtocolError("SUBSCRIBE with no topic filter")
    return out


def connack(code: int = 0, session_present: bool = False) -> bytes:
    return fixed_header(CONNACK, 0, bytes([int(session_present and code == 0), code]))


def publish_packet(topic: str, payload: bytes, retain: bool = False, qos: int = 0, packet_id: int = 0,
                   dup: bool = False) -> bytes:
    head = encode_string(topic) + (struct.pack("!H", packet_id) if qos else b"")
    return fixed_header(PUBLISH, int(retain) | qos << 1 | int(dup) << 3, head + payload)


def publish_wire(topic: bytes, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH from the topic already as an MQTT string (encode_string): the edge
    broker's per-delivery path, with the usual remaining lengths (< 16 KiB) written inline."""
    n = len(topic) + len(payload)
    if n < 0x80:
        return bytes((PUBLISH << 4, n)) + topic + payload
    if n < 0x4000:
        return bytes((PUBLISH << 4, (n & 0x7F) | 0x80, n >> 7)) + topic + payload
    return fixed_header(PUBLISH, 0, topic + payload)


def ack(kind: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBCOMP or UNSUBACK: the packet id alone (PUBREL carries flags 0010)."""
    return fixed_header(kind, 2 if kind == PUBREL else 0, struct.pack("!H", packet_id))


def suback(packet_id: int, codes: list[int]) -> bytes:
    return fixed_header(SUBACK, 0, struct.pack("!H", packet_id) + bytes(codes))


def pingresp() -> bytes:
    return fixed_header(PINGRESP, 0, b"")


def client_packet(kind: int, body: bytes, flags: int = 0) -> bytes:
    """A packet as a client sends it (tests and the benchmark's publishers)."""
    return fixed_header(kind, flags, body)
