"""A subscription change checked before anything is changed: the host, the TTL, the filter
(one valid filter of the spec, with the position of a mistake), the id's form."""
from __future__ import annotations

import asyncio
import re

from camus.compiler.compile import check_rules
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.language.spec import Spec

from .shared_store import ADD, Change
from .topology import Topology

SLICE = 8          # changes of a list checked between two turns of the event loop


class SubscriptionError(ValueError):
    """A request the controller refuses (bad filter, unknown id, not yours)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_subscription(topology: Topology, spec: Spec, max_ttl: float, host: str, filter_text: str,
                       ttl: float) -> str:
    """A new subscription's filter as it will be kept, or SubscriptionError: an unknown host, a
    TTL out of range, a filter that is not one valid filter of the spec (with its position)."""
    if host not in topology.hosts:
        raise SubscriptionError(f"unknown host {host!r}", 403)
    if not 0 < ttl <= max_ttl:
        raise SubscriptionError(f"ttl must be in (0, {max_ttl:g}] seconds")
    text = filter_text.strip()
    # an action part (": fwd(2)", ": drop") is the controller's to add; IPv6 literals keep their colons
    if not text or "\n" in text or re.search(r":\s*(drop\b|[A-Za-z_]\w*\s*\()", text):
        raise SubscriptionError("a subscription is one filter, without an action (e.g. "
                                "'stock == GOOGL and price > 50')")
    try:
        check_rules(spec, f"{text} : fwd(1)", "<filter>")
    except (CompileErrors, CompileError) as exc:
        raise SubscriptionError(str(exc)) from None
    return text


def sub_id_number(host: str, sub_id: str) -> int:
    """The number in a subscription id ("s12"); anything else is no subscription of the host."""
    if not (sub_id.startswith("s") and sub_id[1:].isdigit()):
        raise SubscriptionError(f"no subscription {sub_id!r} for {host}", 404)
    return int(sub_id[1:])


def numbered(exc: SubscriptionError, index: int, count: int) -> SubscriptionError:
    """A change's refusal, naming the change when it came in a batch (counted from 1)."""
    return exc if count == 1 else SubscriptionError(f"change {index + 1}: {exc}", exc.status)


async def check_changes(topology: Topology, spec: Spec, max_ttl: float, host: str,
                        changes: list[Change]) -> list[Change]:
    """A host's list of changes with each new filter as it will be kept and each TTL in range;
    SubscriptionError naming the first bad one (its ids are the store's to find). Checked SLICE
    at a time, the event loop answering other requests between: a thousand filters are tens of
    milliseconds of checking, which a single subscribe call should not wait behind."""
    out = []
    for i, ch in enumerate(changes):
        if i and i % SLICE == 0:
            await asyncio.sleep(0)
        try:
            if ch.op == ADD:
                ch = Change(ADD, host, filter=check_subscription(topology, spec, max_ttl, host, ch.filter,
                                                                 float(ch.ttl or 0.0)), ttl=ch.ttl)
            elif ch.ttl is not None and not 0 < ch.ttl <= max_ttl:
                raise SubscriptionError(f"ttl must be in (0, {max_ttl:g}] seconds")
        except SubscriptionError as exc:
            raise numbered(exc, i, len(changes)) from None
        out.append(ch)
    return out
