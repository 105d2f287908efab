"""MQTT 5.0 (OASIS standard, 2019) as the edge broker speaks it, beside 3.1.1 (edge/mqtt.py):
the packets whose layout changed (a properties block after the variable header, reason codes
on acknowledgements, subscription options, AUTH), and the properties themselves.

Properties are read into `Props` (one value per kind, user properties and subscription
identifiers as lists) keeping each one's bytes as it came, so a PUBLISH's properties are
forwarded to subscribers without being encoded again (`Props.forwarded`: those FORWARDED names;
the message expiry is rewritten with the time left). Malformed input raises `Refused` (an
mqtt.ProtocolError) with the reason code the DISCONNECT carries.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import mqtt
from .mqtt import varint

AUTH = 15
LEVEL = 5

# reason codes (MQTT 5.0 2.4)
SUCCESS = 0x00
NO_SUBSCRIPTION_EXISTED = 0x11
UNSPECIFIED = 0x80
MALFORMED = 0x81
PROTOCOL_ERROR = 0x82
CLIENT_ID_NOT_VALID = 0x85
BAD_CREDENTIALS = 0x86
NOT_AUTHORIZED = 0x87
SERVER_SHUTTING_DOWN = 0x8B
BAD_AUTH_METHOD = 0x8C
KEEP_ALIVE_TIMEOUT = 0x8D
SESSION_TAKEN_OVER = 0x8E
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_ID_NOT_FOUND = 0x92
RECEIVE_MAXIMUM_EXCEEDED = 0x93
TOPIC_ALIAS_INVALID = 0x94
PACKET_TOO_LARGE = 0x95
QUOTA_EXCEEDED = 0x97

# property identifiers (3.x.2.3) and how each is written
PAYLOAD_FORMAT, MESSAGE_EXPIRY, CONTENT_TYPE, RESPONSE_TOPIC, CORRELATION_DATA = 0x01, 0x02, 0x03, 0x08, 0x09
SUBSCRIPTION_ID, SESSION_EXPIRY, ASSIGNED_CLIENT_ID, SERVER_KEEP_ALIVE = 0x0B, 0x11, 0x12, 0x13
AUTH_METHOD, AUTH_DATA, REQUEST_PROBLEM_INFO, WILL_DELAY, REQUEST_RESPONSE_INFO = 0x15, 0x16, 0x17, 0x18, 0x19
RESPONSE_INFO, SERVER_REFERENCE, REASON_STRING, RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM = 0x1A, 0x1C, 0x1F, 0x21, 0x22
TOPIC_ALIAS, MAXIMUM_QOS, RETAIN_AVAILABLE, USER_PROPERTY, MAXIMUM_PACKET_SIZE = 0x23, 0x24, 0x25, 0x26, 0x27
WILDCARD_AVAILABLE, SUBSCRIPTION_IDS_AVAILABLE, SHARED_AVAILABLE = 0x28, 0x29, 0x2A
BYTE, TWO, FOUR, VARINT, STRING, BINARY, PAIR = range(7)
KIND = {
    PAYLOAD_FORMAT: BYTE, MESSAGE_EXPIRY: FOUR, CONTENT_TYPE: STRING, RESPONSE_TOPIC: STRING,
    CORRELATION_DATA: BINARY, SUBSCRIPTION_ID: VARINT, SESSION_EXPIRY: FOUR, ASSIGNED_CLIENT_ID: STRING,
    SERVER_KEEP_ALIVE: TWO, AUTH_METHOD: STRING, AUTH_DATA: BINARY, REQUEST_PROBLEM_INFO: BYTE,
    WILL_DELAY: FOUR, REQUEST_RESPONSE_INFO: BYTE, RESPONSE_INFO: STRING, SERVER_REFERENCE: STRING,
    REASON_STRING: STRING, RECEIVE_MAXIMUM: TWO, TOPIC_ALIAS_MAXIMUM: TWO, TOPIC_ALIAS: TWO, MAXIMUM_QOS: BYTE,
    RETAIN_AVAILABLE: BYTE, USER_PROPERTY: PAIR, MAXIMUM_PACKET_SIZE: FOUR, WILDCARD_AVAILABLE: BYTE,
    SUBSCRIPTION_IDS_AVAILABLE: BYTE, SHARED_AVAILABLE: BYTE,
}
REPEATABLE = (USER_PROPERTY, SUBSCRIPTION_ID)
# what a subscriber gets as the publisher sent it (the message expiry is rewritten, the topic
# alias is per connection, the will delay is the broker's business)
FORWARDED = (PAYLOAD_FORMAT, CONTENT_TYPE, RESPONSE_TOPIC, CORRELATION_DATA, USER_PROPERTY)
# subscription options (3.8.3.1)
NO_LOCAL, RETAIN_AS_PUBLISHED = 0x04, 0x08
SEND_RETAINED, SEND_RETAINED_IF_NEW, NEVER_RETAINED = 0, 1, 2


class Refused(mqtt.ProtocolError):
    """A protocol error with the reason code to close the connection with."""

    def __init__(self, reason: int, text: str) -> None:
        super().__init__(text)
        self.reason = reason


def varint_at(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    for _ in range(4):
        if pos >= len(data):
            raise Refused(MALFORMED, "truncated variable byte integer")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise Refused(MALFORMED, "variable byte integer longer than four bytes")


@dataclass
class Props:
    """A packet's properties: `values` one per kind, `users` the user properties in order,
    `raw` each property's bytes as it came (id, bytes)."""
    values: dict[int, object] = field(default_factory=dict)
    users: list[tuple[str, str]] = field(default_factory=list)
    sub_ids: list[int] = field(default_factory=list)
    raw: list[tuple[int, bytes]] = field(default_factory=list)

    def get(self, pid: int, default: object = None):  # type: ignore[no-untyped-def]
        return self.values.get(pid, default)

    def forwarded(self) -> bytes:
        """The bytes of the properties a subscriber gets as the publisher sent them."""
        return b"".join(raw for pid, raw in self.raw if pid in FORWARDED)


def read_props(data: bytes, pos: int) -> tuple[Props, int]:
    """The properties block at `pos` (its length first) and the position after it."""
    length, pos = varint_at(data, pos)
    end = pos + length
    if end > len(data):
        raise Refused(MALFORMED, "properties longer than the packet")
    props = Props()
    while pos < end:
        start = pos
        pid, pos = varint_at(data, pos)
        kind = KIND.get(pid)
        if kind is None:
            raise Refused(MALFORMED, f"unknown property 0x{pid:02x}")
        value: object
        if kind == BYTE:
            if pos >= end:
                raise Refused(MALFORMED, "truncated property")
            value, pos = data[pos], pos + 1
        elif kind in (TWO, FOUR):
            size = 2 if kind == TWO else 4
            if pos + size > end:
                raise Refused(MALFORMED, "truncated property")
            value, pos = int.from_bytes(data[pos:pos + size], "big"), pos + size
        elif kind == VARINT:
            value, pos = varint_at(data, pos)
        elif kind == STRING:
            value, pos = mqtt.string_at(data, pos)
        elif kind == BINARY:
            value, pos = mqtt.binary_at(data, pos)
        else:
            key, pos = mqtt.string_at(data, pos)
            text, pos = mqtt.string_at(data, pos)
            value = (key, text)
        if pos > end:
            raise Refused(MALFORMED, "property past the properties block")
        if pid == USER_PROPERTY:
            props.users.append(value)                       # type: ignore[arg-type]
        elif pid == SUBSCRIPTION_ID:
            props.sub_ids.append(value)                     # type: ignore[arg-type]
        elif pid in props.values:
            raise Refused(PROTOCOL_ERROR, f"property 0x{pid:02x} given twice")
        else:
            props.values[pid] = value
        props.raw.append((pid, bytes(data[start:pos])))
    return props, end


def prop(pid: int, value: object) -> bytes:
    """One property's bytes."""
    kind = KIND[pid]
    head = varint(pid)
    if kind == BYTE:
        return head + bytes((int(value),))                 # type: ignore[call-overload]
    if kind == TWO:
        return head + struct.pack("!H", value)
    if kind == FOUR:
        return head + struct.pack("!I", value)
    if kind == VARINT:
        return head + varint(int(value))                   # type: ignore[call-overload]
    if kind == STRING:
        return head + mqtt.encode_string(str(value))
    if kind == BINARY:
        raw = bytes(value)                                  # type: ignore[call-overload]
        return head + struct.pack("!H", len(raw)) + raw
    pair: tuple[str, str] = value                           # type: ignore[assignment]
    return head + mqtt.encode_string(pair[0]) + mqtt.encode_string(pair[1])


def block(*parts: bytes) -> bytes:
    """A properties block: its length, then the properties."""
    body = b"".join(parts)
    return varint(len(body)) + body


# -- packets from clients ---------------------------------------------------------------------
@dataclass
class Connect5:
    """What a version 5 CONNECT adds to 3.1.1's fields (mqtt.Connect)."""
    session_expiry: int = 0
    receive_maximum: int = 65535
    maximum_packet: int = 0                 # 0: no limit
    topic_alias_maximum: int = 0            # aliases the client accepts from us (we send none)
    request_response_info: bool = False
    auth_method: str | None = None
    will_delay: int = 0
    will_props: bytes = b""                 # the will's forwarded properties
    will_expiry: int | None = None


def parse_connect(p: mqtt.Packet) -> tuple[mqtt.Connect, Connect5]:
    """A version 5 CONNECT (3.1): 3.1.1's fields, then what 5 adds."""
    body = p.body
    _, pos = mqtt.string_at(body, 0)
    if pos + 4 > len(body):
        raise Refused(MALFORMED, "CONNECT too short")
    flags, keepalive = body[pos + 1], struct.unpack_from("!H", body, pos + 2)[0]
    if flags & 0x01:
        raise Refused(MALFORMED, "CONNECT's reserved flag is set")
    props, pos = read_props(body, pos + 4)
    extra = Connect5(
        session_expiry=int(props.get(SESSION_EXPIRY, 0)),              # type: ignore[call-overload]
        receive_maximum=int(props.get(RECEIVE_MAXIMUM, 65535)),        # type: ignore[call-overload]
        maximum_packet=int(props.get(MAXIMUM_PACKET_SIZE, 0)),         # type: ignore[call-overload]
        topic_alias_maximum=int(props.get(TOPIC_ALIAS_MAXIMUM, 0)),    # type: ignore[call-overload]
        request_response_info=bool(props.get(REQUEST_RESPONSE_INFO, 0)),
        auth_method=props.get(AUTH_METHOD))                             # type: ignore[arg-type]
    if extra.receive_maximum == 0 or MAXIMUM_PACKET_SIZE in props.values and extra.maximum_packet == 0:
        raise Refused(PROTOCOL_ERROR, "receive maximum or maximum packet size of 0")
    client_id, pos = mqtt.string_at(body, pos)
    will = None
    if flags & 0x04:
        wprops, pos = read_props(body, pos)
        extra.will_delay = int(wprops.get(WILL_DELAY, 0))              # type: ignore[call-overload]
        extra.will_props = wprops.forwarded()
        expiry = wprops.get(MESSAGE_EXPIRY)
        extra.will_expiry = None if expiry is None else int(expiry)     # type: ignore[call-overload]
        topic, pos = mqtt.string_at(body, pos)
        message, pos = mqtt.binary_at(body, pos)
        qos = (flags >> 3) & 3
        if qos == 3:
            raise Refused(MALFORMED, "will QoS 3")
        if not topic or "+" in topic or "#" in topic:
            raise Refused(TOPIC_NAME_INVALID, f"will topic {topic!r} is empty or a wildcard")
        expiry_prop = b"" if extra.will_expiry is None else prop(MESSAGE_EXPIRY, extra.will_expiry)
        will = mqtt.Will(topic, message, qos, bool(flags & 0x20), expiry_prop + extra.will_props, extra.will_delay)
    elif flags & 0x38:
        raise Refused(MALFORMED, "will QoS or retain set without a will")
    username = password = None
    if flags & 0x80:
        username, pos = mqtt.string_at(body, pos)
    if flags & 0x40:
        password, pos = mqtt.binary_at(body, pos)     # (5 allows a password without a user name)
    return mqtt.Connect(client_id, keepalive, LEVEL, bool(flags & 0x02), will, username, password), extra


@dataclass(slots=True)
class Publish5:
    """A version 5 PUBLISH: 3.1.1's fields and its properties."""
    pub: mqtt.Publish
    alias: int | None = None                # a topic alias (0 is invalid, not absent)
    expiry: int | None = None               # message expiry interval, seconds
    forwarded: bytes = b""


def parse_publish(p: mqtt.Packet) -> Publish5:
    """PUBLISH (3.3): the topic may be empty when a topic alias stands for it (resolved by the
    connection, which knows its aliases)."""
    qos = (p.flags >> 1) & 3
    if qos == 3:
        raise Refused(MALFORMED, "PUBLISH with QoS 3")
    body = p.body
    topic, pos = mqtt.string_at(body, 0)
    packet_id = 0
    if qos:
        if pos + 2 > len(body):
            raise Refused(MALFORMED, "PUBLISH without its packet id")
        packet_id = struct.unpack_from("!H", body, pos)[0]
        pos += 2
    if body[pos:pos + 1] == b"\x00":              # the usual case: no properties
        return Publish5(mqtt.Publish(topic, body[pos + 1:], qos, bool(p.flags & 1), packet_id))
    props, pos = read_props(body, pos)
    if props.sub_ids:
        raise Refused(PROTOCOL_ERROR, "a PUBLISH from a client with a subscription identifier")
    expiry = props.get(MESSAGE_EXPIRY)
    alias = props.get(TOPIC_ALIAS)
    return Publish5(mqtt.Publish(topic, body[pos:], qos, bool(p.flags & 1), packet_id),
                    None if alias is None else int(alias), None if expiry is None else int(expiry),  # type: ignore
                    props.forwarded())


@dataclass
class Subscribe5:
    packet_id: int
    filters: list[tuple[str, int]] = field(default_factory=list)     # (filter, options byte)
    sub_id: int = 0


def parse_subscribe(p: mqtt.Packet, unsubscribe: bool = False) -> Subscribe5:
    """SUBSCRIBE (3.8) with each filter's options byte, or UNSUBSCRIBE (3.10)."""
    if p.flags != 0x2:
        raise Refused(MALFORMED, "SUBSCRIBE/UNSUBSCRIBE flags must be 0010")
    if len(p.body) < 2:
        raise Refused(MALFORMED, "SUBSCRIBE without its packet id")
    props, pos = read_props(p.body, 2)
    if len(props.sub_ids) > 1 or props.sub_ids and not 0 < props.sub_ids[0] <= 268_435_455:
        raise Refused(PROTOCOL_ERROR, f"subscription identifiers {props.sub_ids} (one, of 1 to 268,435,455)")
    out = Subscribe5(struct.unpack_from("!H", p.body, 0)[0], sub_id=props.sub_ids[0] if props.sub_ids else 0)
    while pos < len(p.body):
        flt, pos = mqtt.string_at(p.body, pos)
        options = 0
        if not unsubscribe:
            if pos >= len(p.body):
                raise Refused(MALFORMED, "SUBSCRIBE filter without its options byte")
            options, pos = p.body[pos], pos + 1
            if options & 0xC0 or options & 3 == 3 or (options >> 4) & 3 == 3:
                raise Refused(MALFORMED, f"subscription options 0x{options:02x} (reserved bits or values)")
        out.filters.append((flt, options))
    if not out.filters:
        raise Refused(PROTOCOL_ERROR, "SUBSCRIBE with no topic filter")
    return out


def ack_reason(p: mqtt.Packet) -> tuple[int, int]:
    """PUBACK, PUBREC, PUBREL or PUBCOMP: (packet id, reason code)."""
    if len(p.body) < 2:
        raise Refused(MALFORMED, "an acknowledgement without its packet id")
    return int.from_bytes(p.body[:2], "big"), p.body[2] if len(p.body) > 2 else SUCCESS


def disconnect_reason(p: mqtt.Packet) -> tuple[int, Props]:
    """A client's DISCONNECT: its reason code and properties (a session expiry it changes)."""
    if not p.body:
        return SUCCESS, Props()
    props, _ = read_props(p.body, 1) if len(p.body) > 1 else (Props(), 1)
    return p.body[0], props


# -- packets to clients -------------------------------------------------------------------------
def connack(reason: int, session_present: bool = False, props: bytes = b"") -> bytes:
    return mqtt.fixed_header(mqtt.CONNACK, 0, bytes((int(session_present and reason == 0), reason)) + block(props))


def publish_packet(topic: str, payload: bytes, retain: bool = False, qos: int = 0, packet_id: int = 0,
                   dup: bool = False, props: bytes = b"") -> bytes:
    head = mqtt.encode_string(topic) + (struct.pack("!H", packet_id) if qos else b"")
    return mqtt.fixed_header(mqtt.PUBLISH, int(retain) | qos << 1 | int(dup) << 3, head + block(props) + payload)


def publish_wire(topic: bytes, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH with no properties from the topic as an MQTT string: the delivery path."""
    return mqtt.publish_wire(topic + b"\x00", payload)


def ack(kind: int, packet_id: int, reason: int = SUCCESS, text: str | None = None) -> bytes:
    """PUBACK, PUBREC, PUBREL, PUBCOMP with a reason code (the short form when it is success)."""
    body = struct.pack("!H", packet_id)
    if reason != SUCCESS or text:
        body += bytes((reason,)) + (block(prop(REASON_STRING, text)) if text else b"")
    return mqtt.fixed_header(kind, 2 if kind == mqtt.PUBREL else 0, body)


def suback(packet_id: int, codes: list[int], kind: int = mqtt.SUBACK) -> bytes:
    """SUBACK or UNSUBACK: a reason code per filter."""
    return mqtt.fixed_header(kind, 0, struct.pack("!H", packet_id) + block() + bytes(codes))


def disconnect(reason: int, text: str | None = None) -> bytes:
    return mqtt.fixed_header(mqtt.DISCONNECT, 0, bytes((reason,)) + block(prop(REASON_STRING, text) if text else b""))


def take_expiry(props: bytes) -> tuple[int | None, bytes]:
    """Forwarded properties as stored with a message: (its message expiry interval, the rest)."""
    if not props:
        return None, props
    parsed, _ = read_props(block(props), 0)
    expiry = parsed.get(MESSAGE_EXPIRY)
    if expiry is None:
        return None, props
    return int(expiry), b"".join(raw for pid, raw in parsed.raw if pid != MESSAGE_EXPIRY)  # type: ignore
