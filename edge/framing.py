"""Publications <-> the spec's datagrams, for the edge broker (edge/broker.py).

A publication becomes one message of the spec: its topic written into the topic field, the
payload after the header. With MoldUDP64 framing in the spec (apps/topics/topics.p4) the
publications that arrive together go out together, up to `batch` per datagram and one MTU: the
XDP broker classifies each message, and the copy each edge broker gets keeps only the messages it
subscribed to (TC pruning), so a burst costs a datagram per batch, not per publication, at both
ends. Without framing, one publication per datagram.
"""
from __future__ import annotations


from camus.compiler.codec.packets import MOLD_HEADER_BYTES, encode_message, read_bits
from camus.compiler.language import topics
from camus.compiler.language.spec import Spec

SESSION = b"CAMUS-EDGE"           # the MoldUDP64 session (10 bytes) of edge-broker datagrams
MAX_DATAGRAM = 1472               # an Ethernet MTU less IPv4 and UDP headers: never fragmented
DEFAULT_BATCH = 12                # the messages per packet an XDP program classifies by default
KNOWN_TOPICS = 1 << 16            # topics whose encoded header is kept (all forgotten when full)


# A publication as the edge broker hands it on: (topic, payload, flags, extra): flags as
# TRAILER_* say (its QoS in the low two bits), extra what an MQTT 5 publication carries (ORIGIN_BYTES
# naming the publisher, then its properties).
Message = tuple[str, bytes, int, bytes]
TRAILER_RETAIN = 0x04             # published with the retain flag (for retain-as-published)
TRAILER_EXTRA = 0x08              # the origin and the properties follow the flags
ORIGIN_BYTES = 8                  # the publishing edge's tag (4 bytes) and session (4 bytes)


class Framing:
    """A publication <-> the spec's message: the topic in its field, the payload after the
    header; a field named `length` gets the payload's length, one named `value` the payload
    read as a decimal number (0 if it is not one), so rules can test it."""

    def __init__(self, spec: Spec, topic_path: str | None = None, batch: int = DEFAULT_BATCH) -> None:
        if not spec.topics:
            raise ValueError(f"spec '{spec.name}' has no topic field (@pragma query_type(h.f, topic))")
        if topic_path is None and len(spec.topics) > 1:
            raise ValueError(f"spec '{spec.name}' has several topic fields; name one: {', '.join(spec.topics)}")
        if not 1 <= batch <= 16:
            raise ValueError(f"batch {batch}: an XDP program classifies 1 to 16 messages per packet")
        self.spec, self.topic = spec, spec.topics[topic_path or next(iter(spec.topics))]
        self.mold = spec.framing.kind == "moldudp64"
        self.batch = batch if self.mold else 1
        self._sequence = 1
        inst = spec.instances[self.topic.instance]
        self.header = inst.type.width // 8
        self.length = inst.type.field("length")
        self.value = inst.type.field("value")
        aligned = all(f is None or (f.offset % 8 == 0 and f.width % 8 == 0) for f in (self.length, self.value))
        # byte-aligned fields: encode by filling a template and decode by slicing (many
        # publications per second); otherwise the generic encoder (and the message type, if any)
        self._fast = encode_message(spec, {}) if aligned and spec.message_type is None else None
        self._heads: dict[str, bytearray] = {}        # topic -> its header, the topic written
        self._names: dict[bytes, str] = {}            # a topic field's bytes -> the topic
        # (from, to, largest value) in bytes of the length and value fields, when present
        self._lcut, self._vcut = ((f.offset // 8, (f.offset + f.width) // 8, (1 << f.width) - 1) if f else None
                                  for f in (self.length, self.value))
        self._slice = aligned and self.topic.offset % 8 == 0 and self.topic.width % 8 == 0
        # (topic from, to, length from, to (0: no length field), payload from), in bytes
        self._cuts = None if not self._slice else (
            self.topic.offset // 8, (self.topic.offset + self.topic.width) // 8,
            *((self.length.offset // 8, (self.length.offset + self.length.width) // 8) if self.length else (0, 0)),
            self.header)

    def encode(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, extra: bytes = b"") -> bytes:
        """One message (no framing); raises topics.TopicError for a topic the field cannot hold.
        A QoS 1 or 2 publication carries its QoS in one byte after the payload when the header
        has a `length` field (the payload ends where it says; readers that do not know the byte
        never see it), so the edge that delivers it grants the QoS the publisher asked for; the
        same byte says whether it was retained and whether `extra` (the origin and MQTT 5
        properties) follows it."""
        trailer = b""
        if self.length is not None and (qos or retain or extra):
            flags = qos | (TRAILER_RETAIN if retain else 0) | (TRAILER_EXTRA if extra else 0)
            trailer = bytes((flags,)) + extra
        if self._fast is None:
            return encode_message(self.spec, self._values(topic, payload)) + payload + trailer
        header = self._heads.get(topic)
        if header is None:                           # checked and written once per topic
            topics.encode(self.topic, topic)
            if len(self._heads) >= KNOWN_TOPICS:
                self._heads.clear()
            header = self._heads[topic] = bytearray(self._fast)
            raw, at = topic.encode("utf-8"), self.topic.offset // 8
            header[at:at + len(raw)] = raw
        if self._lcut is None and self._vcut is None:
            return bytes(header) + payload + trailer
        h = bytearray(header)                        # the other fields by byte offset
        if self._lcut is not None:
            a, b, cap = self._lcut
            h[a:b] = min(len(payload), cap).to_bytes(b - a, "big")
        if self._vcut is not None:
            a, b, cap = self._vcut
            text = payload.strip()
            h[a:b] = (min(int(text), cap) if text.isdigit() else 0).to_bytes(b - a, "big")
        h += payload
        h += trailer
        return bytes(h)

    def _values(self, topic: str, payload: bytes) -> dict[str, int]:
        t = self.topic
        values = {t.path: topics.encode(t, topic)}
        if self.length is not None:
            values[f"{t.instance}.length"] = min(len(payload), (1 << self.length.width) - 1)
        if self.value is not None:
            text = payload.strip()
            number = int(text) if text.isdigit() else 0
            values[f"{t.instance}.value"] = min(number, (1 << self.value.width) - 1)
        return values

    def datagrams(self, messages: list[bytes]) -> list[bytes]:
        """Encoded messages, in order, as the datagrams to send: MoldUDP64 batches of up to
        `batch` messages within one MTU (a message too big for that goes alone), else one each."""
        if not self.mold:
            return messages
        out: list[bytes] = []
        chunk: list[bytes] = []
        size = MOLD_HEADER_BYTES
        for m in messages:
            if chunk and (len(chunk) == self.batch or size + 2 + len(m) > MAX_DATAGRAM):
                out.append(self._mold(chunk))
                chunk, size = [], MOLD_HEADER_BYTES
            chunk.append(m)
            size += 2 + len(m)
        if chunk:
            out.append(self._mold(chunk))
        return out

    @property
    def largest(self) -> int:
        """The largest message a datagram can carry (a UDP datagram's 65,507 bytes, less the
        framing; MoldUDP64 counts a message's length in 16 bits)."""
        return 65_507 - (MOLD_HEADER_BYTES + 2 if self.mold else 0)

    def count(self, datagram: bytes) -> int:
        """Publications in a datagram `datagrams` made."""
        return int.from_bytes(datagram[MOLD_HEADER_BYTES - 2:MOLD_HEADER_BYTES], "big") if self.mold else 1

    def _mold(self, chunk: list[bytes]) -> bytes:
        head = SESSION + self._sequence.to_bytes(8, "big") + len(chunk).to_bytes(2, "big")
        self._sequence += len(chunk)
        return head + b"".join(len(m).to_bytes(2, "big") + m for m in chunk)

    def decode(self, data: bytes) -> list[Message]:
        """The publications in a datagram from the XDP broker (malformed ones left out)."""
        if not self.mold:
            msg = self._message(data, 0, len(data))
            return [msg] if msg is not None else []
        out: list[Message] = []
        end, pos = len(data), MOLD_HEADER_BYTES
        count = int.from_bytes(data[18:20], "big") if end >= MOLD_HEADER_BYTES else 0
        fast = self._cuts                  # byte-aligned fields: the loop below inlines _message
        for _ in range(count):
            if pos + 2 > end:
                break
            start = pos + 2
            pos = start + ((data[pos] << 8) | data[pos + 1])
            if pos > end:
                break
            if fast is None or pos - start < self.header:
                msg = self._message(data, start, pos)
                if msg is not None:
                    out.append(msg)
                continue
            ta, tb, la, lb, body = fast
            raw = data[start + ta:start + tb]
            name = self._names.get(raw) or self._name(raw)
            stop = min(pos, start + body + int.from_bytes(data[start + la:start + lb], "big")) if lb else pos
            if stop < pos:
                flags = data[stop]
                out.append((name, data[start + body:stop], flags, data[stop + 1:pos] if flags & TRAILER_EXTRA else b""))
            else:
                out.append((name, data[start + body:stop], 0, b""))
        return out

    def _message(self, data: bytes, start: int, stop: int) -> Message | None:
        """The message in data[start:stop] (sliced in place: a copy's messages are not copied)."""
        if stop - start < self.header:
            return None
        t = self.topic
        if self._slice:
            raw = data[start + t.offset // 8:start + (t.offset + t.width) // 8]
        else:
            raw = read_bits(data[start:stop], t.offset, t.width).to_bytes(t.nbytes, "big")
        name = self._names.get(raw) or self._name(raw)
        flags, extra = 0, b""
        if self.length is not None:
            end = start + self.header + read_bits(data[start:start + self.header], self.length.offset,
                                                  self.length.width)
            if end < stop:
                flags = data[end]
                extra = data[end + 1:stop] if flags & TRAILER_EXTRA else b""
            stop = min(stop, end)
        return name, data[start + self.header:stop], flags, extra

    def _name(self, raw: bytes) -> str:
        """A topic field's bytes as the topic (NUL padding cut off), remembered."""
        if len(self._names) >= KNOWN_TOPICS:
            self._names.clear()
        name = self._names[raw] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        return name


def mismatch(edge: Spec, attached: Spec) -> str | None:
    """Why the XDP broker, attached with `attached`, would misread datagrams this edge frames
    with `edge` (None: it reads them as they are meant)."""
    if edge.framing.kind != attached.framing.kind:
        return f"the edge frames messages as {edge.framing.kind}, the XDP broker reads {attached.framing.kind}"
    if edge.message_bytes != attached.message_bytes:
        return f"the message header is {edge.message_bytes} bytes here and {attached.message_bytes} there"
    here = {p: (t.offset, t.width, t.flavor) for p, t in edge.topics.items()}
    there = {p: (t.offset, t.width, t.flavor) for p, t in attached.topics.items()}
    if here != there:
        return f"the topic fields differ ({here} here, {there} there)"
    return None
