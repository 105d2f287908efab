"""Standard headers of a spec found by layout, not by name (the IPv4 TTL is the byte at offset 8
whatever the spec calls it), read through bit slices when a spec declares wider fields."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.pipeline import ident
from ...language.spec import HeaderInstance, Role, Spec
from ...language.topics import Topic
from ..emit import BackendError

DNS_HEADER_BITS = 96           # a DNS name starts right after the 12-byte DNS header


def field_slice(inst: HeaderInstance, bit_offset: int, width: int, what: str) -> str:
    """Expression for the bits [bit_offset, bit_offset + width) of a header instance."""
    for f in inst.type.fields:
        if f.offset <= bit_offset and bit_offset + width <= f.offset + f.width:
            ref = f"hdr.{inst.name}.{f.name}"
            if f.offset == bit_offset and f.width == width:
                return ref
            lo = (f.offset + f.width) - (bit_offset + width)
            return f"{ref}[{lo + width - 1}:{lo}]"
    raise BackendError(f"header {inst.name!r} has no field covering the {what} "
                       f"(bits {bit_offset}..{bit_offset + width - 1}); the P4 program reads it by layout")


def field_name(inst: HeaderInstance, bit_offset: int, width: int, what: str) -> str:
    expr = field_slice(inst, bit_offset, width, what)
    if "[" in expr:
        raise BackendError(f"the {what} of {inst.name!r} must be a field of its own "
                           f"({width} bits at bit {bit_offset}): the program assigns it")
    return expr.rsplit(".", 1)[1]


@dataclass
class Layout:
    eth: HeaderInstance
    vlan: HeaderInstance | None
    ip: HeaderInstance
    udp: HeaderInstance
    framing: HeaderInstance | None
    msg: HeaderInstance | None          # None: the packet is the message (ILA: ipv6.dst)

    @property
    def ipv6(self) -> bool:
        """An IPv6 feed (v1model, one message per packet: the batch pruning rewrites IPv4's lengths)."""
        return self.ip.role is Role.IPV6


def ip_route(lay: Layout) -> tuple[str, str, int]:
    """Plain forwarding of the feed's IP: (its prefix — table `<prefix>_lpm`, action
    `<prefix>_forward` —, the destination field, that field's bits)."""
    if lay.ipv6:
        return "ipv6", field_name(lay.ip, 192, 128, "IPv6 destination"), 128
    return "ipv4", field_name(lay.ip, 128, 32, "IPv4 destination"), 32


def refuse_dns_names(spec: Spec, arch: str = "v1model") -> None:
    """DNS names (length-prefixed labels, counted from the right) are read byte by byte by a
    parser loop (p4_dns), which v1model (bmv2) runs and Tofino's parser cannot: for TNA their
    entries and the control block are made, for a program whose parser fills the names' variables."""
    names = [path for path, t in spec.topics.items() if t.flavor == "dns"]
    if names and arch != "v1model":
        raise BackendError(f"spec '{spec.name}' has DNS name fields ({', '.join(names)}): reading a name label by "
                           "label takes a parser loop over its bytes, which Tofino's parser cannot do; use --arch "
                           "v1model (bmv2), camus_control.p4 with a parser that fills the names' variables, or "
                           "place DNS subscriptions on XDP hosts")


def refuse_topics(spec: Spec, arch: str = "v1model") -> None:
    """MQTT topics and NATS subjects are split into levels by a parser loop (p4_topics), which
    v1model (bmv2) runs and Tofino's parser cannot."""
    topics = [path for path, t in spec.topics.items() if t.flavor != "dns"]
    if topics and arch != "v1model":
        raise BackendError(f"spec '{spec.name}' has topic fields ({', '.join(topics)}): splitting a topic into "
                           "levels takes a parser loop that shifts the whole field byte by byte, which Tofino's parser "
                           "cannot do; use --arch v1model (bmv2) or place topic subscriptions on XDP hosts")


def layout_of(spec: Spec, arch: str = "v1model") -> Layout:
    refuse_dns_names(spec, arch)
    refuse_topics(spec, arch)
    by_role: dict[Role, HeaderInstance] = {}
    for name in spec.stack:
        inst = spec.instances[name]
        by_role.setdefault(inst.role, inst)
    if Role.IPV6 in by_role and Role.IPV4 not in by_role:
        if arch != "v1model":
            raise BackendError("the Tofino program parses IPv4 feeds; this spec's feed is IPv6: use --arch v1model "
                               "(bmv2), camus_control.p4 with your own parser, or XDP hosts")
        if spec.framing.kind != "none":
            raise BackendError("an IPv6 feed is parsed with one message per packet: recirculating and pruning a "
                               f"{spec.framing.kind} batch rewrites IPv4's lengths and checksum (XDP hosts take "
                               "batched IPv6 feeds)")
    if not spec.stack:
        raise BackendError("this spec declares no headers (only query_field pragmas, Camus style): a whole P4 "
                           "program needs the header declarations and `struct headers { ... }` in the spec; "
                           "`explain --via p4` runs its entries without them")
    ip = by_role.get(Role.IPV4) or by_role.get(Role.IPV6)       # the feed's, either family (Layout.ipv6)
    needed = (Role.ETHERNET, Role.IPV4, Role.UDP) + ((Role.MESSAGE,) if spec.framing.kind != "none" else ())
    missing = [r.value for r in needed if (ip if r is Role.IPV4 else by_role.get(r)) is None]
    if missing:
        raise BackendError(f"the P4 program needs ethernet, ipv4 (or ipv6), udp (and a message header when "
                           f"messages are batched) in the spec; missing: {', '.join(missing)}")
    assert ip is not None
    lay = Layout(by_role[Role.ETHERNET], by_role.get(Role.VLAN), ip, by_role[Role.UDP],
                 by_role.get(Role.FRAMING), by_role.get(Role.MESSAGE))
    check_dns_layout(spec, lay)
    return lay


def meta_name(path: str) -> str:
    """The metadata member holding a topic's variables: meta.camus_note_topic."""
    return f"camus_{ident(path)}"


# -- DNS names (p4/dns.py): where the message must have them ---------------------------------------

def dns_topic(spec: Spec) -> Topic | None:
    """The spec's DNS name field (the layout allows one: it ends the one message of a packet)."""
    return next((t for t in spec.topics.values() if t.flavor == "dns"), None)


def check_dns_layout(spec: Spec, lay: Layout) -> None:
    """Raise BackendError unless the message is a DNS header with the name right after it."""
    t = dns_topic(spec)
    if t is None:
        return
    if lay.ipv6:
        raise BackendError(f"DNS name field {t.path}: the switch answers queries over IPv4 (as XDP hosts do); this "
                           "spec's feed is IPv6")
    if lay.msg is None or t.instance != lay.msg.name or t.offset != DNS_HEADER_BITS:
        raise BackendError(f"DNS name field {t.path} must start right after a 12-byte DNS header (bit "
                           f"{DNS_HEADER_BITS} of the message header; it is at bit {t.offset} of {t.instance})")
    assert lay.msg is not None
    for offset, what in ((16, "DNS flags"), (32, "DNS question count"), (48, "DNS answer count"),
                         (64, "DNS authority count"), (80, "DNS additional count")):
        field_slice(lay.msg, offset, 16, what)
