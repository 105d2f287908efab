"""Scapy layers for the generic attribute encodings (EtherType 0x9001, compiler/codec/attrs.py)
and feeds of attribute frames.

The layers are built from a spec's attribute dictionary, so a new attribute is a new spec line:

    Pairs, Bitmask = attribute_layers(spec)
    frame = Ether(dst=..., src=...) / Bitmask(temperature=3500, alarm=1)
    frame = Ether(...) / Pairs(pairs=[(3, 3500), (5, 1)])

`Bitmask` computes its mask from the attributes given (others are absent); `Pairs` carries
the (id, value) pairs in the order given and ends them with id 0. Both dissect frames too
(`Ether(raw)` -> the attribute layer), so captures read back.
"""
from __future__ import annotations

import random
import struct
from typing import Any

from scapy.fields import ByteField, ConditionalField, Field, IntField, LongField, ShortField
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers, split_layers

from camus.compiler.codec.attrs import ETHERTYPE_ATTRS, Attribute, dictionary
from camus.compiler.language.spec import Spec

_bound: type[Packet] | None = None
_FIELD = {8: ByteField, 16: ShortField, 32: IntField, 64: LongField}


class _PairsField(Field):
    """(id, value) pairs, each value as wide as its attribute, then id 0."""
    __slots__ = ["widths"]
    islist = 1                    # a list is one value here, not one packet per element

    def __init__(self, name: str, widths: dict[int, int]) -> None:
        super().__init__(name, [])
        self.widths = widths

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        out = bytearray(s)
        for aid, value in val or []:
            out += bytes([aid]) + int(value).to_bytes(self.widths[aid] // 8, "big")
        return bytes(out) + b"\0"

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, list[tuple[int, int]]]:
        pairs, pos = [], 0
        while pos < len(s) and s[pos] != 0 and s[pos] in self.widths:
            n = self.widths[s[pos]] // 8
            pairs.append((s[pos], int.from_bytes(s[pos + 1:pos + 1 + n], "big")))
            pos += 1 + n
        return s[pos + 1:], pairs


def attribute_layers(spec: Spec) -> tuple[type[Packet], type[Packet]]:
    """(Pairs, Bitmask) scapy layers for `spec`'s attribute dictionary, bound to 0x9001."""
    attrs = dictionary(spec)
    names = [a.path.split(".")[-1] for a in attrs]

    class Bitmask(Packet):
        name = f"camus attributes (bitmask, {spec.name})"
        fields_desc = [IntField("mask", None)] + [
            ConditionalField(_FIELD[a.width](n, 0), lambda p, i=a.id: bool((p.mask or 0) >> (i - 1) & 1))
            for a, n in zip(attrs, names)]

        def post_build(self, pkt: bytes, pay: bytes) -> bytes:
            if self.mask is None:              # the attributes given are the ones present
                mask = sum(1 << (a.id - 1) for a, n in zip(attrs, names) if n in self.fields)
                body = b"".join(int(self.fields[n]).to_bytes(a.width // 8, "big")
                                for a, n in zip(attrs, names) if n in self.fields)
                return struct.pack("!I", mask) + body + pay
            return pkt + pay

    class Pairs(Packet):
        name = f"camus attributes (pairs, {spec.name})"
        fields_desc = [_PairsField("pairs", {a.id: a.width for a in attrs})]

    global _bound
    if _bound is not None:                       # 0x9001 dissects with the latest dictionary
        split_layers(Ether, _bound, type=ETHERTYPE_ATTRS)
    _bound = Bitmask if spec.framing.kind == "attrs_bitmask" else Pairs
    bind_layers(Ether, _bound, type=ETHERTYPE_ATTRS)
    return Pairs, Bitmask


def attribute_frames(spec: Spec, n: int, seed: int = 1, present: float = 0.6,
                     src: str = "02:00:00:00:00:01", dst: str = "02:00:00:00:00:02") -> list[bytes]:
    """`n` frames in the spec's encoding, each attribute present with probability `present`,
    values drawn around the rules' constants (bench/workloads style)."""
    pairs_t, mask_t = attribute_layers(spec)
    rng = random.Random(seed)
    attrs: list[Attribute] = dictionary(spec)
    out = []
    for _ in range(n):
        carried = {a.path.split(".")[-1]: rng.choice([0, 3, 4, 17, 500, 900, 3500, rng.getrandbits(a.width)]) % (1 << a.width)
                   for a in attrs if rng.random() < present}
        if spec.framing.kind == "attrs_bitmask":
            layer = mask_t(**carried)
        else:
            ids = {a.path.split(".")[-1]: a.id for a in attrs}
            layer = pairs_t(pairs=[(ids[k], v) for k, v in carried.items()])
        out.append(bytes(Ether(src=src, dst=dst, type=ETHERTYPE_ATTRS) / layer))
    return out

