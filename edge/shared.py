"""Shared subscriptions (MQTT 5.0 4.8.2): `$share/GROUP/FILTER` — the sessions subscribed with
one group name and filter share its publications, each publication going to one of them.

Each publication of a group goes to exactly one edge broker, its home: the edge brokers that
hold members declare the group beside their rules (`# share [GROUP, FILTER]`, edge/rules_sink.py),
and the XDP broker's rule for FILTER forwards to the lowest such port only. The home edge picks
the member for each publication, in turn among its connected members (one that is away, with a
session kept, when none is connected); another edge with members of the group delivers none of
its publications (it may receive them for its ordinary subscriptions) until it is the home:
when the home's last member leaves, the rule moves to the next port. An edge learns that it
became or stopped being the home when it next reads the declarations (after each of its own
updates and every HOMES_REFRESH_S): for that long after a move, a publication may reach two
members or none.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

PREFIX = "$share/"
DECLARATION = "# share "        # a rules file's line naming a group its port holds members of
HOMES_REFRESH_S = 0.5


def declaration(group: str, flt: str) -> str:
    return DECLARATION + json.dumps([group, flt])        # (names and filters may hold spaces)


def declared(line: str) -> tuple[str, str] | None:
    """(group, filter) of a declaration line; None for any other line."""
    if not line.startswith(DECLARATION):
        return None
    try:
        group, flt = json.loads(line[len(DECLARATION):])
    except ValueError:
        return None
    return (group, flt) if isinstance(group, str) and isinstance(flt, str) else None


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
    name: str
    filter: str
    members: dict[int, int] = field(default_factory=dict)     # session id -> granted QoS | options
    turn: int = 0
    away: bool = False                         # another edge broker is its home: none delivered here

    def next(self, eligible: Callable[[int], bool]) -> int | None:
        """The next member in turn that is `eligible`; None when none is."""
        order = list(self.members)
        for i in range(len(order)):
            sid = order[(self.turn + i) % len(order)]
            if eligible(sid):
                self.turn = (self.turn + i + 1) % len(order)
                return sid
        return None
