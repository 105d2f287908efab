"""P4 back end: the v1model program for attribute frames (EtherType 0x9001, p4bsub encodings).

The spec's message header is the attribute dictionary (compiler/codec/attrs.py): attribute i is
its i-th field. The parser reads what a frame carries into `meta.camus_attrs` (0 for what it does
not carry, as the reference decoder says) and keeps the frame's bytes in headers in arrival order,
so the deparser sends a delivered frame out unchanged:

  attrs_pairs    (id, value) pairs ended by id 0, in any order, an id possibly repeated (the last
                 one counts): the pairs' bytes, one at a time, into one stack of byte headers (so
                 they are emitted as they came), each value built up in its metadata field; an id
                 the dictionary lacks, more pairs than it has attributes (counted) or a frame
                 ending early: not classified
  attrs_bitmask  a 32-bit mask, then the present values in id order: the mask, then one header
                 per attribute (emitted in id order too); a mask bit past the dictionary: not
                 classified

The tables are the schema's, keyed on the metadata (p4_schema.field_expr). Tofino's parser cannot
shift and or values into metadata byte by byte, so TNA gets the control block only (with the
reason).
"""
from __future__ import annotations

from ...codec.attrs import Attribute, dictionary
from ...language.spec import Spec
from ..emit import BackendError, Emitter, fill_template
from .schema import ATTRS_META as META
from .schema import P4Options


def check_attrs_layout(spec: Spec, arch: str) -> None:
    """Raise BackendError when the program for attribute frames cannot be made."""
    ethernet_of(spec)
    if arch != "v1model":
        raise BackendError(f"spec '{spec.name}' frames attributes ({spec.framing.kind}): the switch program keeps "
                           "a frame's attributes byte by byte into metadata (shift and or), which Tofino's parser "
                           "cannot do; "
                           "use --arch v1model (bmv2), or camus_control.p4 with your own parser")


def ethernet_of(spec: Spec) -> tuple[str, str, str]:
    """(instance, destination field, EtherType field) of the spec's Ethernet header."""
    inst = spec.instances[spec.stack[0]] if spec.stack else None
    fields = inst.type.fields if inst is not None else ()
    if inst is None or len(fields) != 3 or [f.width for f in fields] != [48, 48, 16]:
        raise BackendError("an attribute-frame spec must start with an Ethernet header "
                           "(bit<48> dst; bit<48> src; bit<16> ether_type;)")
    return inst.name, fields[0].name, fields[2].name


def _types(attrs: list[Attribute], pairs: bool) -> str:
    e = Emitter()
    widths = sorted({a.width for a in attrs})
    if pairs:
        with e.block("header camus_byte_t"):
            e("bit<8> b;           // one byte of the pairs, in the order they came")
    else:
        with e.block("header camus_mask_t"):
            e("bit<32> mask;       // bit i-1: attribute i present")
        for w in widths:
            with e.block(f"header camus_value{w}_t"):
                e(f"bit<{w}> value;")
    return e.text().rstrip("\n")


def attrs_meta_type(spec: Spec) -> str:
    """The struct of a frame's attribute values (metadata; the control block's camus.attrs)."""
    return _meta(dictionary(spec))


def _meta(attrs: list[Attribute]) -> str:
    e = Emitter()
    with e.block(f"struct {META}_t"):
        for a in attrs:
            e(f"bit<{a.width}> {a.path.rpartition('.')[2]};     // attribute {a.id}")
    return e.text().rstrip("\n")


def pair_bytes(attrs: list[Attribute]) -> int:
    """The most bytes valid pairs take: one pair per attribute of the widest kind, then the 0."""
    return len(attrs) * (1 + max(a.width for a in attrs) // 8) + 1


def _members(eth_type: str, eth: str, attrs: list[Attribute], pairs: bool) -> list[tuple[str, str]]:
    """(type, instance) in parse and emit order."""
    out = [(eth_type, eth)]
    if pairs:
        out += [(f"camus_byte_t[{pair_bytes(attrs)}]", "camus_pairs")]
    else:
        out += [("camus_mask_t", "camus_mask")]
        out += [(f"camus_value{a.width}_t", f"camus_a{a.id}") for a in attrs]
    return out


def _parser(eth: str, etype: str, attrs: list[Attribute], pairs: bool) -> str:
    e = Emitter()
    e.depth = 1
    with e.block("state start"):
        e(f"transition parse_{eth};")
    with e.block(f"state parse_{eth}"):
        e(f"packet.extract(hdr.{eth});")
        with e.block(f"transition select(hdr.{eth}.{etype})"):
            e("CAMUS_ETHERTYPE_ATTRS: camus_attrs;")
            e("default: accept;")
    with e.block("state camus_attrs"):
        e("meta.camus.feed = 1;")
        for a in attrs:                      # not carried reads as 0 (on any target)
            e(f"meta.{META}.{a.path.rpartition('.')[2]} = 0;")
        if pairs:
            e("meta.camus.npairs = 0;")
            e("transition camus_pair;")
        else:
            e("packet.extract(hdr.camus_mask);")
            if len(attrs) < 32:
                with e.block(f"transition select(hdr.camus_mask.mask[31:{len(attrs)}])"):
                    e("0: camus_has1;")
                    e("default: accept;            // names attributes the dictionary lacks")
            else:
                e("transition camus_has1;")
    if pairs:
        with e.block("state camus_pair"):
            with e.block("transition select(meta.camus.npairs, packet.lookahead<bit<8>>())"):
                e("(_, 0): camus_pairs_end;")
                e(f"({len(attrs)}, _): accept;          // more pairs than attributes: not classified")
                for a in attrs:
                    e(f"(_, {a.id}): camus_a{a.id};")
                e("default: accept;            // an id the dictionary lacks: not classified")
        for a in attrs:
            name, n = a.path.rpartition(".")[2], a.width // 8
            with e.block(f"state camus_a{a.id}"):
                e("packet.extract(hdr.camus_pairs.next);     // the id")
                e("meta.camus.npairs = meta.camus.npairs + 1;")
                e(f"transition camus_a{a.id}_0;")
            for k in range(n):
                with e.block(f"state camus_a{a.id}_{k}"):
                    e("packet.extract(hdr.camus_pairs.next);")
                    byte = "hdr.camus_pairs.last.b" if a.width == 8 else f"(bit<{a.width}>)hdr.camus_pairs.last.b"
                    if k == 0:         # a repeated id starts over: the last one counts
                        e(f"meta.{META}.{name} = {byte};")
                    else:
                        e(f"meta.{META}.{name} = (meta.{META}.{name} << 8) | {byte};")
                    e(f"transition {f'camus_a{a.id}_{k + 1}' if k + 1 < n else 'camus_pair'};")
        with e.block("state camus_pairs_end"):
            e("packet.extract(hdr.camus_pairs.next);     // the closing 0")
            e("meta.camus.classify = 1;")
            e("transition accept;")
        return e.text().rstrip("\n")
    for a in attrs:
        name = a.path.rpartition(".")[2]
        nxt = f"camus_has{a.id + 1}" if a.id < len(attrs) else "camus_attrs_done"
        with e.block(f"state camus_has{a.id}"):
            with e.block(f"transition select(hdr.camus_mask.mask[{a.id - 1}:{a.id - 1}])"):
                e(f"1: camus_a{a.id};")
                e(f"default: {nxt};")
        with e.block(f"state camus_a{a.id}"):
            e(f"packet.extract(hdr.camus_a{a.id});")
            e(f"meta.{META}.{name} = hdr.camus_a{a.id}.value;")
            e(f"transition {nxt};")
    with e.block("state camus_attrs_done"):
        e("meta.camus.classify = 1;")
        e("transition accept;")
    return e.text().rstrip("\n")


def attrs_program_text(spec: Spec, opts: P4Options, tables: tuple[str, str], header_types: str,
                       meta: dict[str, str]) -> str:
    """The whole v1model program for an attribute-frame spec; `tables` are the declarations and
    the apply sequence (p4_program._tables), `header_types` the spec's Ethernet header type."""
    check_attrs_layout(spec, opts.arch)
    eth, dst, etype = ethernet_of(spec)
    attrs = dictionary(spec)
    pairs = spec.framing.kind == "attrs_pairs"
    members = _members(spec.instances[eth].type.name, eth, attrs, pairs)
    encoding = ("(id: 8 bits, value) pairs ended by id 0." if pairs else
                "a 32-bit presence mask, then the present values in id order.")
    slots = {
        "SPEC": spec.name,
        **meta,
        "ENCODING": encoding,
        "HEADER_TYPES": header_types,
        "ATTR_TYPES": _types(attrs, pairs),
        "ATTR_META": _meta(attrs),
        "HEADER_MEMBERS": "\n".join(f"    {t} {n};" for t, n in members),
        "PARSER_STATES": _parser(eth, etype, attrs, pairs),
        "TABLES": tables[0],
        "APPLY": tables[1],
        "EMITS": "\n".join(f"        packet.emit(hdr.{n});" for _, n in members),
        "ETH": eth,
        "ETH_DST": dst,
    }
    return fill_template("v1model_attrs.p4", slots)


def parser_walk(spec: Spec, data: bytes) -> dict[str, int] | None:
    """The generated states run in Python on the bytes after the EtherType: the attribute values
    they leave in metadata, or None when the frame is not classified (the tests compare this with
    the reference decoder, codec.attrs.decode; no p4c runs here to check the P4 text itself)."""
    attrs = dictionary(spec)
    values = {a.path: 0 for a in attrs}                     # state camus_attrs
    if spec.framing.kind == "attrs_pairs":
        pos, npairs, room = 0, 0, pair_bytes(attrs)
        while True:                                         # state camus_pair
            if pos >= len(data):
                return None                                 # lookahead past the frame: an error
            aid = data[pos]
            if aid == 0:
                return values if pos + 1 <= room else None   # camus_pairs_end (the stack holds it?)
            if npairs == len(attrs) or aid > len(attrs):
                return None
            a = attrs[aid - 1]
            n = a.width // 8
            if pos + 1 + n > len(data) or pos + 1 + n > room:
                return None                                 # extract past the frame or the stack
            npairs += 1
            values[a.path] = int.from_bytes(data[pos + 1:pos + 1 + n], "big")
            pos += 1 + n
    if len(data) < 4:
        return None
    mask, pos = int.from_bytes(data[:4], "big"), 4
    if len(attrs) < 32 and mask >> len(attrs):
        return None
    for a in attrs:                                         # states camus_has<i>, camus_a<i>
        if mask >> (a.id - 1) & 1:
            n = a.width // 8
            if pos + n > len(data):
                return None
            values[a.path] = int.from_bytes(data[pos:pos + n], "big")
            pos += n
    return values                                           # camus_attrs_done
