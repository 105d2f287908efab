"""Packet bytes <-> messages, following the spec's header stack and framing.

`decode_packet` is the reference parser every data plane is compared with: Ethernet, up to two
VLAN tags, IPv4 (options allowed, fragments refused) or IPv6, UDP on the spec's port(s), then
either one application header or a MoldUDP64 batch. Malformed packets never raise: the result
says what was wrong and carries only the messages that were whole.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any

from ..language import topics, wide_fields
from . import attrs
from .attrs import ATTRS_FRAMINGS, ETHERTYPE_ATTRS
from ..language.spec import QueryField, Role, Spec

ETH_IPV4, ETH_IPV6, ETH_VLAN, ETH_QINQ = 0x0800, 0x86DD, 0x8100, 0x88A8
IPPROTO_UDP = 17


@dataclass
class Message:
    index: int
    values: dict[str, int]        # query-field path -> value
    offset: int = 0               # byte offset of the message in the packet
    length: int = 0
    subscribable: bool = True     # False when message_type says this kind is not filtered


@dataclass
class DecodedPacket:
    messages: list[Message] = field(default_factory=list)
    error: str | None = None      # why the packet (or its tail) is not a subscription packet
    offsets: dict[str, int] = field(default_factory=dict)   # header instance -> byte offset
    feed: bool = False            # it is addressed to the feed: errors past this are malformations
    count: int = 0                # messages the framing announced
    impossible_count: bool = False   # more messages announced than the payload has bytes for


def read_bits(data: bytes, bit_offset: int, width: int) -> int:
    first = bit_offset // 8
    last = (bit_offset + width + 7) // 8
    chunk = int.from_bytes(data[first:last], "big")
    spare = last * 8 - (bit_offset + width)
    return (chunk >> spare) & ((1 << width) - 1)


def _read_field(data: bytes, base: int, q: QueryField) -> int:
    return read_bits(data, base * 8 + q.offset, q.width)


def read_fields(spec: Spec, data: bytes, base: int, fields: list[QueryField]) -> dict[str, int]:
    """The fields' values from a header at byte `base`; a topic's variables come from its bytes
    (compiler/language/topics.py), and the topic's own value is kept under its path too."""
    out: dict[str, int] = {}
    for q in fields:
        if q.whole:              # a word of a wide field: the whole value too (the filters compare it)
            out[q.path] = _read_field(data, base, q)
            whole = spec.wide[q.whole]
            out[whole.path] = _read_field(data, base, whole)
        elif not q.topic:
            out[q.path] = _read_field(data, base, q)
        elif q.topic not in out:
            t = spec.topics[q.topic]
            out[t.path] = read_bits(data, base * 8 + t.offset, t.width)
            out.update(topics.derived_values(t, out[t.path]))
    return out


def decode_packet(spec: Spec, data: bytes) -> DecodedPacket:
    out = DecodedPacket()
    roles = spec.located_roles()
    l2 = _link_layer(data, roles, out)
    if l2 is None:
        return out
    etype, off = l2
    if spec.framing.kind in ATTRS_FRAMINGS:     # EtherType 0x9001: attributes, no IP/UDP
        return _attrs_frame(spec, data, etype, off, out)
    datagram = _ip_udp(spec, data, etype, off, roles, out)
    if datagram is None:
        return out
    payload, limit = datagram
    pkt_values = _packet_values(spec, data, out)
    if pkt_values is not None:
        _messages(spec, data, payload, limit, pkt_values, out)
    return out


def _link_layer(data: bytes, roles: dict[Role, str], out: DecodedPacket) -> tuple[int, int] | None:
    """Ethernet and up to two VLAN tags: (EtherType, where the next header starts), or None
    with out.error said."""
    if len(data) < 14:
        out.error = "truncated Ethernet header"
        return None
    if Role.ETHERNET in roles:
        out.offsets[roles[Role.ETHERNET]] = 0
    etype = struct.unpack_from("!H", data, 12)[0]
    off = 14
    for _ in range(2):
        if etype in (ETH_VLAN, ETH_QINQ):
            if len(data) < off + 4:
                out.error = "truncated VLAN tag"
                return None
            if Role.VLAN in roles:
                out.offsets[roles[Role.VLAN]] = off
            etype = struct.unpack_from("!H", data, off + 2)[0]
            off += 4
    return etype, off


def _ip_udp(spec: Spec, data: bytes, etype: int, off: int, roles: dict[Role, str],
            out: DecodedPacket) -> tuple[int, int] | None:
    """IPv4 or IPv6, then UDP on the feed's port: (where the UDP payload starts, where it ends),
    or None with out.error said (out.feed tells whether the packet was the feed's)."""
    if etype == ETH_IPV4:
        if len(data) < off + 20:
            out.error = "truncated IPv4 header"
            return None
        ihl = (data[off] & 0x0F) * 4
        if data[off] >> 4 != 4 or ihl < 20 or len(data) < off + ihl:
            out.error = "bad IPv4 header"
            return None
        frag = struct.unpack_from("!H", data, off + 6)[0]
        if frag & 0x3FFF:
            out.error = "IPv4 fragment"
            return None
        if data[off + 9] != IPPROTO_UDP:
            out.error = "not UDP"
            return None
        if Role.IPV4 in roles:
            out.offsets[roles[Role.IPV4]] = off
        ip_end = off + struct.unpack_from("!H", data, off + 2)[0]     # IPv4 total length
        off += ihl
    elif etype == ETH_IPV6:
        if len(data) < off + 40:
            out.error = "truncated IPv6 header"
            return None
        if data[off + 6] != IPPROTO_UDP:
            out.error = "not UDP (IPv6 extension headers are not parsed)"
            return None
        if Role.IPV6 in roles:
            out.offsets[roles[Role.IPV6]] = off
        ip_end = off + 40 + struct.unpack_from("!H", data, off + 4)[0]   # IPv6 payload length
        off += 40
    else:
        out.error = f"not IP (EtherType 0x{etype:04x})"
        return None
    if len(data) < off + 8:
        out.error = "truncated UDP header"
        return None
    dport = struct.unpack_from("!H", data, off + 2)[0]
    if spec.udp_ports and dport not in spec.udp_ports:
        out.error = f"UDP port {dport} is not the feed's"
        return None
    if Role.UDP in roles:
        out.offsets[roles[Role.UDP]] = off
    out.feed = True
    # The lengths must agree with the frame (the data plane checks the same): the messages end
    # where the UDP datagram does, not at the end of the frame (Ethernet pads short frames).
    udp_len = struct.unpack_from("!H", data, off + 4)[0]
    if udp_len < 8 or off + udp_len > ip_end or ip_end > len(data):
        out.error = f"lengths disagree: UDP {udp_len} bytes at {off}, IP ends at {ip_end}, frame {len(data)} bytes"
        return None
    return off + 8, off + udp_len


def _packet_values(spec: Spec, data: bytes, out: DecodedPacket) -> dict[str, int] | None:
    """The query fields outside the messages (addresses, ports), read once per packet."""
    values: dict[str, int] = {}
    for q in spec.query_fields:
        if q.role is Role.MESSAGE:
            continue
        base = out.offsets.get(q.instance)
        if base is None:
            out.error = f"packet has no {q.instance} header"
            out.feed = False
            return None
        values.update(read_fields(spec, data, base, [q]))
    return values


def _messages(spec: Spec, data: bytes, off: int, limit: int, pkt_values: dict[str, int], out: DecodedPacket) -> None:
    """The messages of the UDP payload [off, limit): one application header, or a MoldUDP64
    batch whose count and lengths must agree with the payload (what is whole is kept)."""
    msg_fields = [q for q in spec.query_fields if q.role is Role.MESSAGE]
    msg_inst = spec.message_instance
    msg_len = spec.message_bytes
    mtype = spec.message_type
    mtype_field = spec.message_type_field()

    def message_at(index: int, start: int, length: int, src: bytes = data) -> Message:
        values = dict(pkt_values)
        values.update(read_fields(spec, src, start, msg_fields))
        ok = mtype_field is None or _read_field(src, start, mtype_field) == mtype[1]  # type: ignore[index]
        return Message(index, values, start, length, ok)

    if spec.framing.kind == "none":
        out.count = 1
        if msg_inst is None:
            out.messages.append(Message(0, pkt_values, off, 0))
        elif limit < off + spec.message_min_bytes:
            out.error = "truncated message"
        elif limit < off + msg_len:        # a DNS name shorter than its field: the rest reads as 0
            out.messages.append(message_at(0, off, limit - off, data[:limit] + bytes(off + msg_len - limit)))
        else:
            out.messages.append(message_at(0, off, msg_len))
        return
    fr = spec.framing
    if limit < off + fr.header_bytes:
        out.error = "truncated MoldUDP64 header"
        return
    if msg_inst is not None:
        out.offsets[spec.stack[spec.stack.index(msg_inst.name) - 1]] = off
    count = struct.unpack_from("!H", data, off + fr.count_offset)[0]
    out.count = count
    pos = off + fr.header_bytes
    if count * fr.length_bytes > limit - pos:   # cannot hold that many length prefixes
        out.error = f"message count says {count}; {limit - pos} bytes cannot hold them"
        out.impossible_count = True
        return
    for i in range(count):
        if limit < pos + fr.length_bytes:
            out.error = f"message count says {count}, packet holds {i}"
            return
        length = int.from_bytes(data[pos:pos + fr.length_bytes], "big")
        start = pos + fr.length_bytes
        if limit < start + length:
            out.error = f"message {i} length {length} runs past the packet"
            return
        if length >= msg_len:
            out.messages.append(message_at(i, start, length))
        # shorter messages (other ITCH message types) are framed correctly but not filtered
        pos = start + length


def _attrs_frame(spec: Spec, data: bytes, etype: int, off: int, out: DecodedPacket) -> DecodedPacket:
    if etype != ETHERTYPE_ATTRS:
        out.error = f"not an attribute frame (EtherType 0x{etype:04x})"
        return out
    out.feed, out.count = True, 1
    try:
        values = attrs.decode(spec, data[off:])
    except attrs.AttrsError as exc:
        out.error = str(exc)
        return out
    out.messages.append(Message(0, values, off, len(data) - off))
    return out


# -- building packets (tests, examples, workloads) ------------------------------------------

def _put_bits(buf: bytearray, bit_offset: int, width: int, value: int) -> None:
    first = bit_offset // 8
    last = (bit_offset + width + 7) // 8
    spare = last * 8 - (bit_offset + width)
    chunk = int.from_bytes(buf[first:last], "big")
    mask = ((1 << width) - 1) << spare
    chunk = (chunk & ~mask) | ((value << spare) & mask)
    buf[first:last] = chunk.to_bytes(last - first, "big")


def encode_message(spec: Spec, values: dict[str, int]) -> bytes:
    inst = spec.message_instance
    if inst is None:
        return b""
    buf = bytearray(inst.type.width // 8)
    if spec.message_type is not None:
        path, v = spec.message_type
        _, hf = spec.header_field(path)  # type: ignore[misc]
        _put_bits(buf, hf.offset, hf.width, v)
    for path, v in values.items():
        found = spec.header_field(path)
        if found and found[0].name == inst.name:
            _put_bits(buf, found[1].offset, found[1].width, v)
    return bytes(buf)


def packet_addresses(spec: Spec, values: dict[str, int]) -> dict[str, str]:
    """build_packet's address arguments for the packet-level query fields a message's values
    give (ipv4.dst = 10.1.0.1 -> dst_ip="10.1.0.1"), so one message becomes the packet it means."""
    out: dict[str, str] = {}
    where = {(Role.IPV4, 96, 32): "src_ip", (Role.IPV4, 128, 32): "dst_ip",
             (Role.IPV6, 64, 128): "src_ip", (Role.IPV6, 192, 128): "dst_ip"}
    for q in [*spec.query_fields, *spec.wide.values()]:
        arg = where.get((q.role, q.offset, q.width))
        if arg is not None and q.path in values:
            out[arg] = str(ipaddress.ip_address(values[q.path]) if q.width == 32 else
                           ipaddress.IPv6Address(values[q.path]))
    return out


def build_packet(spec: Spec, messages: list[dict[str, int]], *, src_ip: str = "10.0.0.1",
                 dst_ip: str = "10.0.0.2", dst_port: int | None = None, sequence: int = 1,
                 src_mac: bytes = b"\x02\x00\x00\x00\x00\x01",
                 dst_mac: bytes = b"\x02\x00\x00\x00\x00\x02") -> bytes:
    """An Ethernet/IPv4/UDP packet (IPv6 when `dst_ip` is an IPv6 address) carrying `messages`
    in the spec's framing. Packet-level query fields (e.g. ipv4.dst) come from the addresses.
    Attribute framings: an Ethernet frame (EtherType 0x9001) with the first message's nonzero
    attributes (attrs.encode chooses others)."""
    if spec.framing.kind in ATTRS_FRAMINGS:
        return dst_mac + src_mac + struct.pack("!H", ETHERTYPE_ATTRS) + attrs.encode(spec, messages[0] if messages else {})
    if spec.framing.kind == "moldudp64":
        payload = bytearray(b"CAMUSXDP00" + sequence.to_bytes(8, "big") + len(messages).to_bytes(2, "big"))
        for m in messages:
            body = encode_message(spec, m)
            payload += len(body).to_bytes(2, "big") + body
    else:
        payload = bytearray(encode_message(spec, messages[0] if messages else {}))
    port = dst_port if dst_port is not None else (spec.udp_ports[0] if spec.udp_ports else 9999)
    return udp_frame(bytes(payload), port, src_ip=src_ip, dst_ip=dst_ip, src_mac=src_mac, dst_mac=dst_mac)


# Bits of the parsed headers that say how the frame is parsed (EtherType, IP version and header
# length, lengths, fragment, next protocol) or that are derived (checksums): message_frame never
# writes a message's value there, or the frame would stop being the feed's
STRUCTURAL_BITS = {Role.ETHERNET: ((96, 16),), Role.IPV4: ((0, 8), (16, 16), (48, 16), (72, 8), (80, 16)),
                   Role.IPV6: ((0, 4), (32, 16), (48, 8)), Role.UDP: ((32, 16), (48, 16))}


def message_frame(spec: Spec, values: dict[str, int], **kw: Any) -> bytes:
    """The packet one message means: build_packet's frame with the message's packet-level fields
    (addresses, ports, TTL, traffic class, MACs ...) written into the headers that hold them,
    checksums recomputed. Fields that decide the parse (STRUCTURAL_BITS) keep the frame's own
    values. `kw`: build_packet's options (addresses given win over the message's)."""
    frame = bytearray(build_packet(spec, [values], **{**packet_addresses(spec, values), **kw}))
    fields = [q for q in [*spec.query_fields, *spec.wide.values()]
              if q.role in STRUCTURAL_BITS and q.path in values and not q.part]
    if not fields:
        return bytes(frame)
    offsets = decode_packet(spec, bytes(frame)).offsets
    for q in fields:
        base = offsets.get(q.instance)
        if base is None or any(q.offset < s + w and s < q.offset + q.width for s, w in STRUCTURAL_BITS[q.role]):
            continue
        header = bytearray(frame[base:base + (q.offset + q.width + 7) // 8])
        _put_bits(header, q.offset, q.width, values[q.path])
        frame[base:base + len(header)] = header
    l3 = 14                                           # build_packet's frames carry no VLAN tag
    if frame[12:14] == ETH_IPV4.to_bytes(2, "big"):
        ihl = (frame[l3] & 0x0F) * 4
        frame[l3 + 10:l3 + 12] = b"\0\0"
        frame[l3 + 10:l3 + 12] = _ip_checksum(bytes(frame[l3:l3 + ihl])).to_bytes(2, "big")
    elif frame[12:14] == ETH_IPV6.to_bytes(2, "big"):     # the UDP checksum covers the ports
        udp = l3 + 40
        length = struct.unpack_from("!H", frame, udp + 4)[0]
        csum = udp_checksum_v6(bytes(frame[l3 + 8:l3 + 24]), bytes(frame[l3 + 24:l3 + 40]),
                               bytes(frame[udp:udp + length]))
        frame[udp + 6:udp + 8] = csum.to_bytes(2, "big")
    return bytes(frame)


def udp_frame(payload: bytes, port: int, *, src_ip: str = "10.0.0.1", dst_ip: str = "10.0.0.2",
              src_mac: bytes = b"\x02\x00\x00\x00\x00\x01", dst_mac: bytes = b"\x02\x00\x00\x00\x00\x02",
              src_port: int = 40000) -> bytes:
    """Ethernet + IPv4 (or IPv6) + UDP around a payload; IPv4 UDP checksum left 0 (optional)."""
    udp = struct.pack("!HHHH", src_port, port, 8 + len(payload), 0) + payload
    if (":" in src_ip) != (":" in dst_ip):            # one address given as IPv6: both are
        src_ip, dst_ip = (src_ip if ":" in src_ip else "fd00::1"), (dst_ip if ":" in dst_ip else "fd00::2")
    if ":" in dst_ip:                                   # IPv6: the UDP checksum is mandatory
        src6, dst6 = ipaddress.IPv6Address(src_ip).packed, ipaddress.IPv6Address(dst_ip).packed
        csum = udp_checksum_v6(src6, dst6, udp)
        udp = udp[:6] + csum.to_bytes(2, "big") + udp[8:]
        ip6 = struct.pack("!IHBB16s16s", 6 << 28, len(udp), IPPROTO_UDP, 64, src6, dst6)
        return dst_mac + src_mac + ETH_IPV6.to_bytes(2, "big") + ip6 + udp
    total = 20 + len(udp)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, IPPROTO_UDP, 0,
                               ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed))
    csum = _ip_checksum(bytes(ip))
    ip[10:12] = csum.to_bytes(2, "big")
    return dst_mac + src_mac + ETH_IPV4.to_bytes(2, "big") + bytes(ip) + udp


def _ones_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def udp_checksum_v6(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 8200 UDP checksum over the pseudo-header and the datagram (checksum field zeroed)."""
    body = udp[:6] + b"\0\0" + udp[8:]
    pseudo = src + dst + len(udp).to_bytes(4, "big") + b"\0\0\0" + bytes([IPPROTO_UDP])
    c = ~_ones_sum(pseudo + body) & 0xFFFF
    return c or 0xFFFF


def _ip_checksum(header: bytes) -> int:
    s: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def message_from_text(spec: Spec, text: str) -> dict[str, int]:
    """'stock=GOOGL price=60' -> {'add_order.stock': ..., 'add_order.price': 60}. Fields not
    given are 0. Values: numbers (decimal, 0x hex), 'c' characters, IPv4/IPv6, MACs, strings."""
    values = {q.path: 0 for q in spec.query_fields}
    values.update({path: 0 for path in spec.wide})
    for t in spec.topics.values():
        values[t.path] = 0
        values.update(topics.derived_values(t, 0))
    for item in text.replace(",", " ").split():
        if "=" not in item:
            raise ValueError(f"expected field=value, got {item!r}")
        name, _, raw = item.partition("=")
        named = spec.topics_named(name) if spec.topics else []
        if len(named) == 1:          # topic=plant/7/temp: the topic and its variables
            t = named[0]
            values[t.path] = topics.encode(t, raw.strip('"'))
            values.update(topics.derived_values(t, values[t.path]))
            continue
        found = spec.fields_named(name)
        if len(found) != 1:
            raise ValueError(f"unknown or ambiguous field {name!r}"
                             f" (query fields: {', '.join(dict.fromkeys(q.whole or q.path for q in spec.query_fields))})")
        q = found[0]
        values[q.path] = _parse_value(spec, q, raw)
        if q.path in spec.wide:
            values.update(wide_fields.derived_values(q, values[q.path]))
    return values


def _parse_value(spec: Spec, q: QueryField, raw: str) -> int:
    if len(raw) == 3 and raw[0] == raw[2] == "'":
        return ord(raw[1])
    try:
        value = int(raw, 0)
    except ValueError:
        value = None
    if value is None:
        for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
            try:
                value = int(cls(raw))
                break
            except ValueError:
                pass
    if value is None and len(raw) == 17 and raw.count(":") == 5:
        value = int(raw.replace(":", ""), 16)
    if value is None and q.vtype == "int":      # as the rules: numbers, 'c' characters, addresses
        if len(raw) != 1:
            raise ValueError(f"{q.path} holds numbers (bit<{q.width}>), not {raw!r} (a number, a 'c' "
                             f"character, or declare @pragma query_type({q.path}, string))")
        value = ord(raw)                    # a bare character, as ITCH's buy_sell_indicator=S
    if value is None:
        try:
            data = raw.strip('"').encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"{raw!r} has a character outside Latin-1: {q.path} holds one byte per character") \
                from None
        nbytes = q.width // 8
        if len(data) > nbytes:
            raise ValueError(f"{raw!r} is longer than {q.path} ({nbytes} bytes)")
        value = int.from_bytes(data + bytes([spec.string_pad]) * (nbytes - len(data)), "big")
    if not 0 <= value < 1 << q.width:
        raise ValueError(f"{raw} does not fit {q.path} (bit<{q.width}>: 0 to {(1 << q.width) - 1})")
    return value


MOLD_HEADER_BYTES = 20


def mold_messages(payload: bytes, with_prefix: bool = False) -> list[bytes]:
    """The messages of a MoldUDP64 payload (20-byte header, then length-prefixed messages),
    each with its 2-byte length prefix when asked; stops at the first length that does not fit."""
    if len(payload) < MOLD_HEADER_BYTES:
        return []
    count = int.from_bytes(payload[18:20], "big")
    pos, out = MOLD_HEADER_BYTES, []
    for _ in range(count):
        if pos + 2 > len(payload):
            break
        n = int.from_bytes(payload[pos:pos + 2], "big")
        if pos + 2 + n > len(payload):
            break
        out.append(payload[pos:pos + 2 + n] if with_prefix else payload[pos + 2:pos + 2 + n])
        pos += 2 + n
    return out
