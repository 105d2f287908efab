"""Query fields wider than 64 bits (IPv6 addresses, 9..16-byte strings) as two 64-bit words.

Every data plane reads and compares variables of at most 64 bits (an XDP program's registers,
a switch's match keys are cheaper that way too), so the spec replaces such a field by its two
words, `ipv6.dst/hi` (the top width-64 bits) and `ipv6.dst/lo` (the low 64 bits), each a plain
query field with its own offset (`expand`). Rules keep naming the whole field: the lowering
turns the field's interval set into a formula over the two words (compiler/logic/words.py), so
`ipv6.dst == 2001:db8::/32` is one literal on hi, `ipv6.dst == 2001:db8::1` is hi == x and
lo == y, and a range becomes at most three terms. The filter evaluator still compares the whole
value (kept under the field's own path by the decoder): a second opinion on the split.
"""
from __future__ import annotations

from dataclasses import replace

from .spec import QueryField, Spec

WORD_BITS = 64
PARTS = ("hi", "lo")


def is_wide(q: QueryField) -> bool:
    return q.width > WORD_BITS and not q.topic


def words(q: QueryField) -> tuple[QueryField, QueryField]:
    """The field's two words, most significant first, at their own offsets."""
    top = q.width - WORD_BITS
    hi = replace(q, name=f"{q.name}/hi", width=top, whole=q.path, part="hi")
    lo = replace(q, name=f"{q.name}/lo", width=WORD_BITS, offset=q.offset + top, whole=q.path, part="lo")
    return hi, lo


def expand(spec: Spec) -> None:
    """Replace each wide query field by its words; the field itself is kept in spec.wide."""
    out: list[QueryField] = []
    for q in spec.query_fields:
        if is_wide(q):
            spec.wide[q.path] = q
            out += words(q)
        else:
            out.append(q)
    spec.query_fields[:] = out


def derived_values(q: QueryField, value: int) -> dict[str, int]:
    """The words' values for a value of the whole field (the reference every data plane mirrors)."""
    hi, lo = words(q)
    return {hi.path: value >> WORD_BITS, lo.path: value & ((1 << WORD_BITS) - 1)}
