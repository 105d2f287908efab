"""Custom actions an XDP host runs itself instead of handing the packet to its stack.

- `answerDNS(a.b.c.d)`: the query becomes its own answer, sent back with XDP_TX (bpf/camus_dns.h).
- `ila(L::)`: identifier-locator addressing (RFC 9386's ILA, Linux's `encap ila`): the packet's
  IPv6 destination gets locator L as its top 64 bits, the UDP checksum is adjusted, and the packet
  goes on as the rule says (its ports; the call also hands it to the host stack, which routes the
  new address) (bpf/camus_ila.h).

Each leaf carries one 64-bit value for them (leaf.value, in packet byte order as the kernel's
little-endian load sees it) and a flag saying which. Several rules on one leaf: the lowest value,
so the choice is the same every time and on every host.
"""
from __future__ import annotations

import ipaddress

from ...ir.pipeline import ActionSet
from ...language.actions import ANSWER_DNS, ILA
from ...language.spec import Role, Spec
from ..emit import BackendError

LEAF_ANSWER = 32       # bpf/camus_xdp.h CAMUS_LEAF_ANSWER
LEAF_ILA = 64          # bpf/camus_xdp.h CAMUS_LEAF_ILA


def dns_answers(spec: Spec) -> bool:
    """Can the program answer DNS queries itself (bpf/camus_dns.h)? When a DNS name field starts
    right after a 12-byte header: the message is a DNS query."""
    return any(t.flavor == "dns" and t.offset == 96 for t in spec.topics.values())


def ila_rewrites(spec: Spec) -> bool:
    """Can the program rewrite ILA locators (bpf/camus_ila.h)? An IPv6 feed, one message per packet
    (the rewrite is of the packet: every message in it would have to agree)."""
    return any(spec.instances[n].role is Role.IPV6 for n in spec.stack) and spec.framing.kind == "none"


def dns_answer(a: ActionSet) -> str:
    """The address an `answerDNS(a.b.c.d)` of the leaf answers with ('' without one)."""
    found = sorted((args[0] for name, args in a.calls if name == ANSWER_DNS and args), key=ipaddress.IPv4Address)
    return found[0] if found else ""


def ila_locator(a: ActionSet) -> int | None:
    """The locator (top 64 bits of the new destination) an `ila(L::)` of the leaf writes."""
    found = sorted(int(ipaddress.IPv6Address(args[0].split("/")[0])) >> 64
                   for name, args in a.calls if name == ILA and args)
    return found[0] if found else None


def custom_flags(a: ActionSet) -> int:
    return (LEAF_ANSWER if dns_answer(a) else 0) | (LEAF_ILA if ila_locator(a) is not None else 0)


def custom_value(a: ActionSet) -> int:
    """leaf.value: the answer's IPv4 address or the locator, bytes in packet order."""
    answer, locator = dns_answer(a), ila_locator(a)
    if answer:
        return int.from_bytes(ipaddress.IPv4Address(answer).packed, "little")
    return int.from_bytes(locator.to_bytes(8, "big"), "little") if locator is not None else 0


def check_custom(spec: Spec, a: ActionSet, *, diagram: bool) -> None:
    """Refuse, with the reason, a leaf whose custom actions this program cannot run."""
    answer, locator = dns_answer(a), ila_locator(a)
    if answer and locator is not None:
        raise BackendError(f"answerDNS({answer}) and ila() on the same messages: a packet is either answered or "
                           "rewritten")
    if (answer or locator is not None) and not diagram:
        what = "DNS answers" if answer else "ILA rewrites"
        raise BackendError(f"{what} from XDP need the decision-diagram stage; compile with --strategy bdd")
    if answer and not dns_answers(spec):
        raise BackendError(f"answerDNS({answer}): spec '{spec.name}' has no DNS query to answer (a "
                           "query_type(h.f, dnsname) field right after a 12-byte DNS header)")
    if locator is not None and not ila_rewrites(spec):
        raise BackendError(f"ila(): spec '{spec.name}' has no IPv6 header in its stack, or several messages per "
                           "packet; the locator is the IPv6 destination's top 64 bits")
