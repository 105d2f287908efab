"""Generic attribute encodings after EtherType 0x9001 (flexible pub/sub over P4, p4bsub): a new
attribute needs a new dictionary entry, not a new data plane.

The spec's message header is the attribute dictionary: its fields in declaration order are
attributes 1, 2, ... (at most 32; 8, 16, 32 or 64 bits each). `message_framing(attrs_pairs)`:
(id: 8 bits, value: the attribute's width) pairs, ended by id 0. `message_framing(attrs_bitmask)`:
a 32-bit mask (bit i-1 set: attribute i present), then the present attributes' values in id
order. Values are big-endian; an attribute a message does not carry reads as 0.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..language.spec import HeaderField, Spec

ETHERTYPE_ATTRS = 0x9001
ATTRS_FRAMINGS = ("attrs_pairs", "attrs_bitmask")
MAX_ATTRS = 32
WIDTHS = (8, 16, 32, 64)


class AttrsError(ValueError):
    pass


@dataclass(frozen=True)
class Attribute:
    id: int
    path: str
    width: int


def dictionary(spec: Spec) -> list[Attribute]:
    inst = spec.message_instance
    if inst is None:
        raise AttrsError("an attribute encoding needs the message header (the attribute dictionary)")
    return [Attribute(i + 1, f"{inst.name}.{f.name}", f.width) for i, f in enumerate(inst.type.fields)]


def check_dictionary(fields: tuple[HeaderField, ...]) -> list[str]:
    """Problems with a header as an attribute dictionary (the spec parser reports them)."""
    out = []
    if len(fields) > MAX_ATTRS:
        out.append(f"{len(fields)} attributes; the encodings carry at most {MAX_ATTRS}")
    out += [f"attribute {f.name} is bit<{f.width}>; attributes are 8, 16, 32 or 64 bits"
            for f in fields if f.width not in WIDTHS]
    return out


def encode(spec: Spec, values: dict[str, int], present: list[str] | None = None) -> bytes:
    """The bytes after the EtherType; `present`: the attributes carried (default: the nonzero)."""
    attrs = dictionary(spec)
    carried = [a for a in attrs if (a.path in present if present is not None else values.get(a.path, 0))]
    body = b"".join(values.get(a.path, 0).to_bytes(a.width // 8, "big") for a in carried)
    if spec.framing.kind == "attrs_bitmask":
        mask = sum(1 << (a.id - 1) for a in carried)
        return struct.pack("!I", mask) + body
    out = bytearray()
    for a in carried:
        out += bytes([a.id]) + values.get(a.path, 0).to_bytes(a.width // 8, "big")
    return bytes(out) + b"\0"


def decode(spec: Spec, data: bytes) -> dict[str, int]:
    """Attribute values from the bytes after the EtherType; AttrsError says what is wrong."""
    attrs = dictionary(spec)
    values = {a.path: 0 for a in attrs}
    if spec.framing.kind == "attrs_bitmask":
        if len(data) < 4:
            raise AttrsError("truncated attribute mask")
        mask, pos = struct.unpack_from("!I", data)[0], 4
        if mask >> len(attrs):
            raise AttrsError(f"mask 0x{mask:08x} names attributes past the {len(attrs)} the dictionary has")
        for a in attrs:
            if mask >> (a.id - 1) & 1:
                n = a.width // 8
                if pos + n > len(data):
                    raise AttrsError(f"attribute {a.id} runs past the frame")
                values[a.path] = int.from_bytes(data[pos:pos + n], "big")
                pos += n
        return values
    pos = 0
    for _ in range(len(attrs) + 1):
        if pos >= len(data):
            raise AttrsError("attribute pairs without their end (id 0)")
        aid = data[pos]
        if aid == 0:
            return values
        if aid > len(attrs):
            raise AttrsError(f"attribute id {aid}; the dictionary has {len(attrs)}")
        a = attrs[aid - 1]
        n = a.width // 8
        if pos + 1 + n > len(data):
            raise AttrsError(f"attribute {aid} runs past the frame")
        values[a.path] = int.from_bytes(data[pos + 1:pos + 1 + n], "big")
        pos += 1 + n
    raise AttrsError(f"more than {len(attrs)} attribute pairs (an id repeats)")
