"""Headers a Camus spec may name without declaring them: the well-known packet headers with their
real layouts, and the intrinsic metadata of v1model and TNA (not in the packet: a switch fills
them in). A pragma like `query_field(ipv4.dstAddr, 32)` in a spec with no header declarations
resolves here; field names match case-insensitively with or without underscores
(`dstAddr`, `dst_addr`), and the common short forms (`dst`, `src`, `len`, `proto`) too.
"""
from __future__ import annotations

from .spec import HeaderField, HeaderType, Role


def _type(name: str, *fields: tuple[str, int]) -> HeaderType:
    out, off = [], 0
    for fname, width in fields:
        out.append(HeaderField(fname, width, off))
        off += width
    return HeaderType(name, tuple(out))


ETHERNET = _type("ethernet_t", ("dstAddr", 48), ("srcAddr", 48), ("etherType", 16))
IPV4 = _type("ipv4_t", ("version", 4), ("ihl", 4), ("diffserv", 8), ("totalLen", 16), ("identification", 16),
             ("flags", 3), ("fragOffset", 13), ("ttl", 8), ("protocol", 8), ("hdrChecksum", 16),
             ("srcAddr", 32), ("dstAddr", 32))
IPV6 = _type("ipv6_t", ("version", 4), ("trafficClass", 8), ("flowLabel", 20), ("payloadLen", 16),
             ("nextHdr", 8), ("hopLimit", 8), ("srcAddr", 128), ("dstAddr", 128))
UDP = _type("udp_t", ("srcPort", 16), ("dstPort", 16), ("length", 16), ("checksum", 16))
TCP = _type("tcp_t", ("srcPort", 16), ("dstPort", 16), ("seqNo", 32), ("ackNo", 32), ("dataOffset", 4),
            ("res", 4), ("flags", 8), ("window", 16), ("checksum", 16), ("urgentPtr", 16))
V1MODEL_META = _type("standard_metadata_t", ("ingress_port", 9), ("egress_spec", 9), ("egress_port", 9),
                     ("instance_type", 32), ("packet_length", 32), ("enq_timestamp", 32),
                     ("enq_qdepth", 19), ("deq_timedelta", 32), ("deq_qdepth", 19),
                     ("ingress_global_timestamp", 48), ("egress_global_timestamp", 48), ("mcast_grp", 16),
                     ("egress_rid", 16), ("checksum_error", 1), ("priority", 3))
TNA_INGRESS_META = _type("ingress_intrinsic_metadata_t", ("resubmit_flag", 1), ("_pad1", 1),
                         ("packet_version", 2), ("_pad2", 3), ("ingress_port", 9), ("ingress_mac_tstamp", 48))

# instance name -> (layout, role): TCP is known but not parsed by the data planes; metadata is
# not in the packet at all
BUILTIN: dict[str, tuple[HeaderType, Role]] = {
    "ethernet": (ETHERNET, Role.ETHERNET), "eth": (ETHERNET, Role.ETHERNET),
    "ipv4": (IPV4, Role.IPV4), "ip": (IPV4, Role.IPV4), "ipv6": (IPV6, Role.IPV6),
    "udp": (UDP, Role.UDP), "tcp": (TCP, Role.OTHER),
    "standard_metadata": (V1MODEL_META, Role.METADATA), "ig_intr_md": (TNA_INGRESS_META, Role.METADATA),
}
METADATA = tuple(name for name, (_, role) in BUILTIN.items() if role is Role.METADATA)

# short forms -> the fields they may mean, first match in the header wins
_SHORT = {"dst": ("dstaddr",), "src": ("srcaddr",), "len": ("totallen", "length", "payloadlen"),
          "proto": ("protocol",), "tos": ("diffserv",), "id": ("identification",),
          "csum": ("hdrchecksum", "checksum"), "sport": ("srcport",), "dport": ("dstport",),
          "type": ("ethertype",)}


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def builtin_field(t: HeaderType, name: str) -> HeaderField | None:
    """The field of a built-in header a spec's name means (exact, then loose, then short form)."""
    exact = t.field(name)
    if exact is not None:
        return exact
    by_norm = {_norm(f.name): f for f in t.fields}
    for want in (_norm(name),) + _SHORT.get(_norm(name), ()):
        if want in by_norm:
            return by_norm[want]
    return None
