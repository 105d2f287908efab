"""Shared subscriptions (MQTT 5.0 4.8.2): `$share/GROUP/FILTER` — the sessions subscribed with
one group name and filter share its publications, each publication going to one of them.

The XDP broker sees FILTER (this edge's port wants what it matches); the edge picks the member
for each publication that arrives, in turn among the connected members (one that is away, with
a session kept, when none is connected). Groups are per edge broker: members of one group on
two edge brokers each get a share of the publications both edges receive.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

PREFIX = "$share/"


def shared_parts(flt: str) -> tuple[str, str] | None:
    """(group, filter) of a shared subscription's filter; None for an ordinary one. Raises
    ValueError for a malformed one (4.8.2: a group name without wildcards, then a filter)."""
    if not flt.startswith(PREFIX):
        return None
    group, sep, rest = flt[len(PREFIX):].partition("/")
    if not group or not sep or not rest or "+" in group or "#" in group:
        raise ValueError(f"{flt!r}: a shared subscription is $share/GROUP/FILTER, a group name without "
                         "wildcards and a filter")
    return group, rest


def is_plain(flt: str) -> bool:
    """An ordinary subscription (not a shared one)."""
    return not flt.startswith(PREFIX)


@dataclass
class SharedGroup:
    gid: int                                   # its id in the topic trie (negative: not a session's)
    filter: str
    members: dict[int, int] = field(default_factory=dict)     # session id -> granted QoS | options
    turn: int = 0

    def next(self, eligible: Callable[[int], bool]) -> int | None:
        """The next member in turn that is `eligible`; None when none is."""
        order = list(self.members)
        for i in range(len(order)):
            sid = order[(self.turn + i) % len(order)]
            if eligible(sid):
                self.turn = (self.turn + i + 1) % len(order)
                return sid
        return None
