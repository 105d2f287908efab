"""The message-format spec: header layouts, the header stack, message framing and query fields.

A spec is read from a P4_16 header file with Camus pragmas (see `spec_parser`). Everything the
compiler, the interpreters and the back ends know about packet layout comes from here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class MatchKind(str, Enum):
    AUTO = "auto"    # `query_field`: exact if the rules only test equality, else range
    EXACT = "exact"
    RANGE = "range"
    LPM = "lpm"


class Role(str, Enum):
    """What a header instance is in the stack; decides how packets are parsed."""
    ETHERNET = "ethernet"
    VLAN = "vlan"
    IPV4 = "ipv4"
    IPV6 = "ipv6"
    UDP = "udp"
    FRAMING = "framing"   # the batch header before the messages (MoldUDP64)
    MESSAGE = "message"   # application header: one per message
    OTHER = "other"       # named by a pragma only (no byte layout here) or a header XDP does not parse
    METADATA = "metadata" # intrinsic metadata of a switch architecture: not in the packet


# The headers every data plane's parser finds by itself (Ethernet, then IPv4 or IPv6, then UDP):
# a spec may name them without declaring them or its header stack (builtin layout)
PARSED_ROLES = (Role.ETHERNET, Role.IPV4, Role.IPV6, Role.UDP)

KNOWN_ROLES = {
    "ethernet": Role.ETHERNET, "eth": Role.ETHERNET, "vlan": Role.VLAN, "vlan_tag": Role.VLAN,
    "ipv4": Role.IPV4, "ip": Role.IPV4, "ipv6": Role.IPV6, "udp": Role.UDP,
    "moldudp64": Role.FRAMING, "mold": Role.FRAMING, "moldudp": Role.FRAMING,
}


@dataclass(frozen=True)
class HeaderField:
    name: str
    width: int        # bits
    offset: int       # bits from the start of the header
    type_name: str = ""   # the typedef it was declared with, if any (hints the value type)


@dataclass(frozen=True)
class HeaderType:
    name: str
    fields: tuple[HeaderField, ...]

    @property
    def width(self) -> int:
        return sum(f.width for f in self.fields)

    def field(self, name: str) -> HeaderField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


@dataclass(frozen=True)
class HeaderInstance:
    name: str
    type: HeaderType
    role: Role
    # declared: by the spec (byte layout known); builtin: a well-known header's real layout;
    # pragma: fields only named by query_field pragmas, in pragma order (no byte layout)
    layout: str = "declared"


@dataclass(frozen=True)
class QueryField:
    instance: str
    name: str
    width: int
    offset: int          # bits from the start of its header instance
    kind: MatchKind
    role: Role           # MESSAGE fields are read per message, the others once per packet
    vtype: str = "int"   # int | string | ipv4 | ipv6 | mac: which constants make sense
    # A variable derived from a topic field (compiler/language/topics.py): the topic's path,
    # which part (depth | sys | level) and the level's index; offset and role are the topic's.
    topic: str = ""
    part: str = ""
    level: int = -1
    # A word of a field wider than 64 bits (compiler/language/wide_fields.py): the field's path;
    # part is "hi" or "lo", offset and width are the word's own.
    whole: str = ""
    # query_field_domain(h.f, bits): a switch matches this range field through a table that maps
    # its values to codes of `bits` bits (Camus's lower-resolution domain); 0: the raw value
    domain_bits: int = 0

    @property
    def path(self) -> str:
        return f"{self.instance}.{self.name}"


@dataclass(frozen=True)
class Counter:
    """`query_counter(name, window_us, size)`: a tumbling window for state functions."""
    name: str
    window_us: int       # 0: one endless window (every(n)'s usual counter)
    size: int            # how many state variables may use this window


@dataclass(frozen=True)
class Framing:
    """How several messages share one packet. MoldUDP64: 20-byte header (session 10, sequence
    8, message count 2), then for each message a 2-byte big-endian length and the message."""
    kind: str = "none"            # "none" | "moldudp64"
    header_bytes: int = 0
    count_offset: int = 0         # byte offset of the 16-bit message count in the header
    length_bytes: int = 0         # length prefix before each message


MOLDUDP64 = Framing("moldudp64", header_bytes=20, count_offset=18, length_bytes=2)
NO_FRAMING = Framing()


@dataclass
class Spec:
    name: str
    instances: dict[str, HeaderInstance]
    stack: list[str]                      # instance names in parse order
    query_fields: list[QueryField]        # in declaration order (= default field order)
    counters: list[Counter] = field(default_factory=list)
    framing: Framing = NO_FRAMING
    udp_ports: tuple[int, ...] = ()       # empty: any UDP port
    message_type: tuple[str, int] | None = None   # (field path, value): which messages count
    string_pad: int = 0x20                # ITCH pads stock symbols with spaces
    # query_default_action: what a message no rule delivers gets (the leaf table's default);
    # its action text and atoms (compiler/language/actions.py), empty without one
    default_action: str = ""
    default_atoms: frozenset[tuple[Any, ...]] = frozenset()
    actions: frozenset[str] = frozenset()    # custom actions the spec declares (query_action, P4 actions)
    actions_open: bool = False               # a Camus-style spec: any name may be the user's action
    camus_control_file: str = ""             # the program includes the Camus control by this name
                                             # (`#include "camus.p4"`, `Camus.apply(hdr, standard_metadata)`)

    @property
    def custom_actions(self) -> frozenset[str] | None:
        """The custom actions a rule may name (None: any)."""
        return None if self.actions_open else self.actions

    topics: dict[str, Any] = field(default_factory=dict)   # path -> topics.Topic (fields replaced
                                                           # by their variables in query_fields)
    wide: dict[str, QueryField] = field(default_factory=dict)   # path -> a field wider than 64 bits
                                                                 # (its two words in query_fields)

    def located(self, instance: str) -> bool:
        """Whether a packet parser knows where `instance` is: a header of the spec's stack, or a
        well-known header named without a declaration (compiler/language/builtin_headers.py)
        that the parsers find by themselves (PARSED_ROLES)."""
        inst = self.instances.get(instance)
        return instance in self.stack or (inst is not None and inst.layout == "builtin" and inst.role in PARSED_ROLES)

    def located_roles(self) -> dict[Role, str]:
        """Role -> the instance holding it, for every located header (the stack's and the
        well-known ones)."""
        return {inst.role: name for name, inst in self.instances.items() if self.located(name)}

    @property
    def message_instance(self) -> HeaderInstance | None:
        for name in self.stack:
            if self.instances[name].role is Role.MESSAGE:
                return self.instances[name]
        return None

    @property
    def message_bytes(self) -> int:
        inst = self.message_instance
        return inst.type.width // 8 if inst else 0

    @property
    def message_min_bytes(self) -> int:
        """The bytes a message must have: a DNS name, the header's last field, may be shorter than
        its field (compiler/language/topics.py)."""
        return min((t.offset // 8 for t in self.topics.values() if t.flavor == "dns"), default=self.message_bytes)

    def message_type_field(self) -> QueryField | None:
        """The field `message_type` names, readable like a query field (None without one)."""
        if self.message_type is None:
            return None
        found = self.header_field(self.message_type[0])
        if found is None:
            return None
        inst, hf = found
        return QueryField(inst.name, hf.name, hf.width, hf.offset, MatchKind.EXACT, inst.role)

    def query_field(self, path: str) -> QueryField | None:
        for q in self.query_fields:
            if q.path == path:
                return q
        return None

    def fields_named(self, name: str) -> list[QueryField]:
        """Query fields a bare or qualified name may mean (instance or header type prefix)."""
        fields = [*self.query_fields, *self.wide.values()]
        if "." in name:
            head, _, fname = name.rpartition(".")
            return [q for q in fields if q.name == fname and
                    (q.instance == head or self.instances[q.instance].type.name == head)]
        return [q for q in fields if q.name == name]

    def topics_named(self, name: str) -> list[Any]:
        """Topic fields (topics.Topic) a bare or qualified name may mean."""
        head, _, fname = name.rpartition(".")
        return [t for t in self.topics.values() if t.name == fname and
                (not head or t.instance == head or self.instances[t.instance].type.name == head)]

    def header_field(self, path: str) -> tuple[HeaderInstance, HeaderField] | None:
        head, _, fname = path.rpartition(".")
        inst = self.instances.get(head)
        if inst is None:
            return None
        hf = inst.type.field(fname)
        return (inst, hf) if hf else None

    def counter(self, name: str | None) -> Counter | None:
        if name is None:
            return self.counters[0] if len(self.counters) == 1 else None
        for c in self.counters:
            if c.name == name:
                return c
        return None
