"""Hierarchical topics: MQTT topic filters and NATS subjects over a fixed-width string field.

A spec declares a topic with `@pragma query_type(note.topic, topic)` (MQTT 3.1.1: `/`-separated
levels, `+` one level, `#` this level and every one below, wildcards never match a first level
starting with `$`) or `query_type(note.subject, subject)` (NATS: `.`-separated tokens, `*` one
token, `>` one or more tokens). The field holds the topic's bytes, padded with NUL bytes (MQTT
and NATS forbid NUL in topics, so the padding is unambiguous).

`query_type(dns.qname, dnsname)` is a DNS name in wire format (length-prefixed labels ending in
the root label 0), as a query carries it: the field is where the name starts and how long it may
be; what follows the name in the packet (qtype, qclass) is not part of it. Its levels are the
labels from the right (level 0 is the top-level domain), lower-cased (DNS names compare without
case), so `qname == "*.example.com"` (one or more labels left of example.com, RFC 4592) is a
depth and two levels, like `com.example.>` in NATS. A name that does not end inside the field
or has a label longer than 63 bytes (a compression pointer), and the root name, have depth 0 and
match no filter.

The compiler never matches strings with wildcards: the topic field becomes plain variables that
every stage, back end and interpreter already knows (`expand`):

    topic/depth   the number of levels (range)        topic/sys   1 if level 0 starts with '$'
    topic/0 .. topic/K-1  each level's bytes, left-aligned and NUL-padded to the field's width
                          (exact; 0 when the topic has fewer levels)

so `topic == "plant/+/temp"` is `depth == 3 and sys == 0 and topic/0 == "plant" and topic/2 ==
"temp"` (`filter_literals`). K is `@pragma topic_levels(note.topic, K)` (default 8); a filter
naming deeper levels is refused. The eBPF back end turns the wide level values into small label
ids (compiler/ir/labels.py). `matches` is the direct semantics, independent of all of this: the
filter evaluator and the edge broker use it, and the differential tests compare the two.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .spec import MatchKind, QueryField, Role, Spec

DEFAULT_LEVELS = 8
MAX_TOPIC_BITS = 1024           # 128 bytes: the XDP program walks the field byte by byte
DEPTH_WIDTH = 16
FLAVORS = {"topic": "mqtt", "subject": "nats", "dnsname": "dns"}
MAX_DNS_LABEL = 63


@dataclass(frozen=True)
class Topic:
    path: str
    instance: str
    name: str
    width: int                   # bits (a multiple of 8)
    offset: int                  # bits from the start of its header instance
    flavor: str                  # mqtt | nats
    levels: int                  # levels with a variable of their own

    @property
    def sep(self) -> bytes:
        return b"/" if self.flavor == "mqtt" else b"."

    @property
    def reversed(self) -> bool:
        """DNS names: level 0 is the rightmost label."""
        return self.flavor == "dns"

    @property
    def nbytes(self) -> int:
        return self.width // 8


class TopicError(ValueError):
    """A topic filter or topic that breaks its flavor's rules (the message says which)."""


def expand(spec: Spec, levels: dict[str, int]) -> list[str]:
    """Replace each topic-typed query field by its variables; returns problems found."""
    problems: list[str] = []
    out: list[QueryField] = []
    for q in spec.query_fields:
        flavor = FLAVORS.get(q.vtype)
        if flavor is None:
            out.append(q)
            continue
        if q.width % 8 or q.offset % 8 or not 8 <= q.width <= MAX_TOPIC_BITS:
            problems.append(f"topic field {q.path} must be whole bytes, byte-aligned and at most "
                            f"{MAX_TOPIC_BITS} bits (is bit<{q.width}> at bit {q.offset})")
            continue
        if flavor == "dns":
            inst = spec.instances[q.instance]
            if q.role is not Role.MESSAGE or q.offset + q.width != inst.type.width or spec.framing.kind != "none":
                problems.append(f"DNS name field {q.path} must be the last field of the message header, one "
                                "message per packet (the name's length varies; what follows it is not read)")
                continue
        k = levels.pop(q.path, DEFAULT_LEVELS)
        t = Topic(q.path, q.instance, q.name, q.width, q.offset, flavor, k)
        spec.topics[q.path] = t
        # the topic's instance, offset and role, under their own names, widths and kinds
        out.append(replace(q, name=f"{q.name}/depth", width=DEPTH_WIDTH, kind=MatchKind.RANGE, vtype="int",
                           topic=q.path, part="depth"))
        if flavor == "mqtt":
            out.append(replace(q, name=f"{q.name}/sys", width=1, kind=MatchKind.EXACT, vtype="int",
                               topic=q.path, part="sys"))
        out += [replace(q, name=f"{q.name}/{i}", kind=MatchKind.EXACT, vtype="string", topic=q.path,
                        part="level", level=i) for i in range(k)]
    problems += [f"topic_levels names {p}, which is not a topic field (query_type(..., topic))"
                 for p in levels]
    spec.query_fields[:] = out
    return problems


def dns_text(raw: bytes) -> bytes | None:
    """A wire-format name as the data plane sees it: its labels joined by dots, ASCII lower-cased,
    cut at a NUL byte (the XDP program turns length bytes into dots in place and scans to the first
    NUL); None if it does not end inside `raw` or has a label longer than 63 bytes."""
    labels: list[bytes] = []
    pos = 0
    while pos < len(raw):
        n = raw[pos]
        if n == 0:
            text = b".".join(labels).lower() if labels else b""
            return text.split(b"\0", 1)[0]
        if n > MAX_DNS_LABEL or pos + 1 + n >= len(raw):
            return None
        labels.append(raw[pos + 1:pos + 1 + n])
        pos += n + 1
    return None


def text(t: Topic, raw: bytes) -> bytes | None:
    """The topic as text (NUL padding cut off); a DNS name dotted, None when malformed."""
    return dns_text(raw) if t.flavor == "dns" else raw.split(b"\0", 1)[0]


def split(t: Topic, raw: bytes) -> list[bytes]:
    """The levels of a topic as it sits in the field (NUL padding cut off); a DNS name's from
    the right, none when malformed."""
    data = text(t, raw)
    if data is None or (t.reversed and not data):     # a malformed name, or the root: no levels
        return []
    levels = data.split(t.sep)
    return levels[::-1] if t.reversed else levels


def encode(t: Topic, topic: str) -> int:
    """The field's value for a topic (what a publisher writes; a DNS name in wire format, its
    case kept)."""
    if t.flavor == "dns":
        return int.from_bytes(dns_wire(topic, t.nbytes).ljust(t.nbytes, b"\0"), "big")
    data = topic.encode("utf-8")
    if b"\0" in data:
        raise TopicError("a topic cannot contain NUL")
    if len(data) > t.nbytes:
        raise TopicError(f"topic {topic!r} is {len(data)} bytes; {t.path} holds {t.nbytes}")
    return int.from_bytes(data.ljust(t.nbytes, b"\0"), "big")


def dns_labels(name: str) -> list[bytes]:
    """'www.example.com' (a trailing dot allowed; '' or '.' the root, no labels) -> its labels,
    left to right, as written."""
    try:
        labels = [lv.encode("ascii") for lv in name.rstrip(".").split(".")] if name.strip(".") else []
    except UnicodeEncodeError:
        raise TopicError(f"DNS name {name!r} is not ASCII (use its punycode form, xn--...)") from None
    for lv in labels:
        if not 1 <= len(lv) <= MAX_DNS_LABEL or b"\0" in lv:
            raise TopicError(f"DNS name {name!r}: labels are 1..{MAX_DNS_LABEL} bytes")
    return labels


def dns_wire(name: str, nbytes: int) -> bytes:
    """A name's wire format (length-prefixed labels, then the root label 0), at most `nbytes`."""
    wire = b"".join(bytes([len(lv)]) + lv for lv in dns_labels(name)) + b"\0"
    if len(wire) > nbytes:
        raise TopicError(f"DNS name {name!r} is {len(wire)} bytes in wire format; the field holds {nbytes}")
    return wire


def level_value(t: Topic, level: bytes) -> int:
    return int.from_bytes(level.ljust(t.nbytes, b"\0")[:t.nbytes], "big")


def derived_values(t: Topic, value: int) -> dict[str, int]:
    """The topic's variables for a field value (the reference every data plane mirrors)."""
    levels = split(t, value.to_bytes(t.nbytes, "big"))     # a malformed DNS name: depth 0, no levels
    head = f"{t.instance}.{t.name}"
    out = {f"{head}/depth": len(levels)}
    if t.flavor == "mqtt":
        out[f"{head}/sys"] = int(levels[0][:1] == b"$")
    for i in range(t.levels):
        out[f"{head}/{i}"] = level_value(t, levels[i]) if i < len(levels) else 0
    return out


def check_filter(t: Topic, flt: str) -> list[str]:
    """The filter's levels, after checking its syntax (MQTT 3.1.1 section 4.7, NATS subjects)."""
    if not flt:
        raise TopicError("an empty topic filter matches nothing")
    if "\0" in flt:
        raise TopicError("a topic filter cannot contain NUL")
    sep = t.sep.decode()
    levels = flt.split(sep)
    one, many = ("+", "#") if t.flavor == "mqtt" else ("*", ">")
    for i, lv in enumerate(levels):
        if many in lv and (lv != many or i != len(levels) - 1):
            raise TopicError(f"'{many}' must be a whole {_word(t)} and the last (level {i + 1})")
        if one in lv and lv != one:
            raise TopicError(f"'{one}' must be a whole {_word(t)} (level {i + 1}: {lv!r})")
        if t.flavor == "nats" and lv == "":
            raise TopicError(f"empty token {i + 1} in subject {flt!r}")
    if len(flt.encode("utf-8")) > t.nbytes:
        raise TopicError(f"filter {flt!r} is longer than {t.path} ({t.nbytes} bytes)")
    named = len(levels) - (levels[-1] == many)
    if any(lv not in (one, many) for lv in levels[t.levels:named]):
        raise TopicError(f"filter {flt!r} names level {named}, {t.path} has {t.levels} "
                         f"(@pragma topic_levels({t.path}, N) in the spec)")
    return levels


def _word(t: Topic) -> str:
    return "level" if t.flavor == "mqtt" else "token"


def check_dns_filter(t: Topic, flt: str) -> tuple[list[str], bool]:
    """A DNS name filter's labels from the right, lower-cased, and whether it starts with `*.`."""
    wild = flt == "*" or flt.startswith("*.")
    name = flt[2:] if flt.startswith("*.") else "" if wild else flt
    if "*" in name:
        raise TopicError(f"'*' stands only for the leftmost labels ('*.example.com'), not in {flt!r}")
    dns_wire(name, t.nbytes - 2 * wild)            # what '*' stands for takes 2 wire bytes at least
    labels = [lv.decode().lower() for lv in dns_labels(name)][::-1]
    if not labels and not wild:
        raise TopicError("the root name is no filter: name at least one label ('example.com', '*')")
    if len(labels) > t.levels:
        raise TopicError(f"name {flt!r} has {len(labels)} labels, {t.path} has {t.levels} "
                         f"(@pragma topic_levels({t.path}, N) in the spec)")
    return labels, wild


def _dns_literals(t: Topic, flt: str) -> list[tuple[str, tuple[int, int]]]:
    labels, wild = check_dns_filter(t, flt)
    head = f"{t.instance}.{t.name}"
    depth = (len(labels) + 1, (1 << DEPTH_WIDTH) - 1) if wild else (len(labels), len(labels))
    out = [(f"{head}/depth", depth)]
    for i, lv in enumerate(labels):
        v = level_value(t, lv.encode("ascii"))
        out.append((f"{head}/{i}", (v, v)))
    return out


def filter_literals(t: Topic, flt: str) -> list[tuple[str, tuple[int, int]]]:
    """The conjunction a filter means: (variable path, closed interval) pairs."""
    if t.flavor == "dns":
        return _dns_literals(t, flt)
    levels = check_filter(t, flt)
    head = f"{t.instance}.{t.name}"
    one, many = ("+", "#") if t.flavor == "mqtt" else ("*", ">")
    out: list[tuple[str, tuple[int, int]]] = []
    top = (1 << DEPTH_WIDTH) - 1
    if levels[-1] == many:
        # MQTT: "a/#" matches "a" too (the parent level); NATS: "a.>" needs a token after "a".
        least = len(levels) - 1 if t.flavor == "mqtt" else len(levels)
        out.append((f"{head}/depth", (max(least, 1), top)))
    else:
        out.append((f"{head}/depth", (len(levels), len(levels))))
    if t.flavor == "mqtt" and levels[0] in (one, many):
        out.append((f"{head}/sys", (0, 0)))           # wildcards skip $SYS-style topics
    for i, lv in enumerate(levels):
        if lv not in (one, many):
            v = level_value(t, lv.encode("utf-8"))
            out.append((f"{head}/{i}", (v, v)))
    return out


def matches(flavor: str, flt: str, topic: str) -> bool:
    """Does `topic` match filter `flt`? Straight from MQTT 3.1.1 4.7 / the NATS docs; DNS names
    without case, `*.` for one or more labels on the left (RFC 4592)."""
    if flavor == "dns":
        name, flt = topic.lower().rstrip("."), flt.lower().rstrip(".")
        if flt == "*":
            return name != ""
        if flt.startswith("*."):
            return name.endswith(flt[1:]) and len(name) > len(flt) - 1
        return name == flt
    if flavor == "mqtt":
        fl, tl = flt.split("/"), topic.split("/")
        if topic.startswith("$") and fl[0] in ("+", "#"):
            return False
        for i, f in enumerate(fl):
            if f == "#":
                return True                 # this level and below, the parent included
            if i >= len(tl) or (f != "+" and f != tl[i]):
                return False
        return len(fl) == len(tl)
    fl, tl = flt.split("."), topic.split(".")
    for i, f in enumerate(fl):
        if f == ">":
            return len(tl) > i
        if i >= len(tl) or (f != "*" and f != tl[i]):
            return False
    return len(fl) == len(tl)
