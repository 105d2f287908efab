"""Human renderings of field values and messages (for explain, demo and reports)."""
from __future__ import annotations

import ipaddress

from ..language.spec import QueryField, Spec


def format_value(spec: Spec, q: QueryField, value: int) -> str:
    if q.whole and q.vtype != "string":      # a word of an address: its bits in hex
        return f"{value:#x}"
    if q.vtype == "string":
        raw = value.to_bytes(q.width // 8, "big").rstrip(bytes([spec.string_pad])).rstrip(b"\0")
        if all(32 <= b < 127 for b in raw):
            return raw.decode("ascii")
    if q.vtype == "ipv4" and q.width == 32:
        return str(ipaddress.IPv4Address(value))
    if q.vtype == "ipv6" and q.width == 128:
        return str(ipaddress.IPv6Address(value))
    if q.vtype == "mac" and q.width == 48:
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    if q.width == 8 and 65 <= value <= 90:     # one-letter codes such as ITCH's side 'B'/'S'
        return f"'{chr(value)}'"
    return str(value)


def format_message(spec: Spec, values: dict[str, int]) -> str:
    parts = []
    for q in spec.query_fields:
        if q.whole:                          # a wide field: the whole value once, not its words
            whole = spec.wide[q.whole]
            if q.part == "hi" and whole.path in values:
                parts.append(f"{whole.name}={format_value(spec, whole, values[whole.path])}")
        elif q.path in values:
            parts.append(f"{q.name}={format_value(spec, q, values[q.path])}")
    return " ".join(parts)
