"""Routing kept up to date one subscription at a time: the same port filters as `route()` on
the whole subscription set, without recomputing it.

What a port carries for a host depends only on the topology and the policy (the port plans
of routing.py): whether the host is beyond the port, and whether the port is its last
filtering hop (the filter exact) or an earlier one (its stateless cover). So a subscription
added or removed touches only the ports of the hosts it belongs to; each such port counts,
per filter it carries, the subscriptions that want it exactly and those that want its cover.
A filter appears on a port when its first subscription arrives and leaves with its last one:
those are the device's rule lines added and removed, which is all a device needs to hear
(agents take line deltas, switches compile incrementally).

A device's digest is a sum of per-line hashes (a multiset hash), so it follows each line
change in O(1) and does not depend on the order the lines arrived in: a controller that
restarts and rebuilds the set from its database computes the same digests as the one
before it, and finds a device that already holds its tables.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from .routing import MATCH_ALL, PortPlan, Routing, plan_routes, stateless_filter
from .topology import Topology

_MASK = (1 << 64) - 1


def line_hash(line: str, exact: bool = False) -> int:
    """One rule line's share of its device's digest (an exact line counts differently when
    exactness matters: alpha > 1 compiles it differently)."""
    data = (line + "\x00exact" if exact else line).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def rules_digest(lines: Iterable[str], exact: Iterable[int] = ()) -> str:
    """The digest of a rule set: the lines (stripped, in any order) and which of them are exact."""
    keep = set(exact)
    total = 0
    for i, ln in enumerate(lines):
        total = (total + line_hash(ln, i in keep)) & _MASK
    return f"{total:016x}"


@dataclass
class LineChanges:
    """A device's rule lines added and removed since the changes were last taken."""
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass
class _Reach:
    device: str
    port: int
    last_hop: bool       # the port is the host's last filtering hop: its filters exact
    windowed: bool       # ... and windows are counted there (a single border reaches it)


class LiveRouting:
    """Port filters and per-device rule lines, changed by `change(host, filter, ±1)`."""

    def __init__(self, topology: Topology, policy: str, track_exact: bool = False) -> None:
        self.topology, self.policy, self.track_exact = topology, policy, track_exact
        self.skeleton, self.plans = plan_routes(topology, policy)
        windowed = self.skeleton.window_hosts()
        self.reach: dict[str, list[_Reach]] = {h: [] for h in topology.hosts}
        for d, ports in self.plans.items():
            for p, plan in sorted(ports.items()):
                if plan is not None:
                    for h in sorted(plan.beyond):
                        hop = h in plan.last_hop
                        self.reach[h].append(_Reach(d, p, hop, hop and h in windowed))
        # (device, port) -> filter -> [subscriptions wanting it exactly, wanting its cover]
        self.counts: dict[tuple[str, int], dict[str, list[int]]] = {}
        # device -> rule line -> exact; in the order the lines arrived (MATCH_ALL ports first)
        self.lines: dict[str, dict[str, bool]] = {d: {} for d in self.plans}
        self.sums: dict[str, int] = {d: 0 for d in self.plans}
        self.pending: dict[str, Counter[str]] = {}
        for d, ports in self.plans.items():
            for p, plan in sorted(ports.items()):
                if plan is None:
                    self._set(d, f"{MATCH_ALL[0]} : fwd({p})", None, False)

    @property
    def devices(self) -> list[str]:
        return sorted(self.plans)

    def change(self, host: str, filter_text: str, delta: int) -> None:
        """One subscription of `host` to `filter_text` added (+1) or removed (-1); removing one
        the host does not hold raises KeyError and changes nothing."""
        f = filter_text.strip()
        wants = [(r, f if r.windowed else stateless_filter(f), 0 if r.last_hop else 1) for r in self.reach.get(host, ())]
        if delta < 0 and any(self.counts.get((r.device, r.port), {}).get(v, [0, 0])[k] <= 0 for r, v, k in wants):
            raise KeyError(f"{host} does not subscribe to {f!r}")
        for r, variant, k in wants:
            slot = self.counts.setdefault((r.device, r.port), {})
            n = slot.setdefault(variant, [0, 0])
            before = n[0] > 0 if n[0] + n[1] else None
            n[k] += delta
            after = n[0] > 0 if n[0] + n[1] else None
            if after is None:
                del slot[variant]
            self._set(r.device, f"{variant} : fwd({r.port})", before, after)

    def _set(self, d: str, line: str, before: bool | None, after: bool | None) -> None:
        """A line's state from `before` to `after`: None when absent, else whether it is exact."""
        if before == after:
            return
        ex = self.track_exact
        if before is not None:
            self.sums[d] = (self.sums[d] - line_hash(line, before and ex)) & _MASK
        if after is not None:
            self.sums[d] = (self.sums[d] + line_hash(line, after and ex)) & _MASK
            self.lines[d][line] = after
        else:
            del self.lines[d][line]
        if (before is None) != (after is None):
            self.pending.setdefault(d, Counter())[line] += 1 if after is not None else -1
        elif ex:
            self.pending.setdefault(d, Counter())      # only its exactness changed: the device recompiles

    def take_changes(self) -> dict[str, LineChanges]:
        """Per device, the lines added and removed since the last call (net; a device whose
        only change was a line's exactness appears with none)."""
        out = {}
        for d, c in self.pending.items():
            out[d] = LineChanges([ln for ln, k in c.items() if k > 0], [ln for ln, k in c.items() if k < 0])
        self.pending = {}
        return out

    def digest(self, device: str) -> str:
        return f"{self.sums[device]:016x}"

    def rule_count(self, device: str) -> int:
        return len(self.lines[device])

    def rules(self, device: str) -> str:
        held = self.lines[device]
        return "".join(ln + "\n" for ln in held)

    def exact_indices(self, device: str) -> frozenset[int]:
        return frozenset(i for i, e in enumerate(self.lines[device].values()) if e)

    def view(self) -> Routing:
        """The routing as `route()` describes it (port filters and their exact parts)."""
        s = self.skeleton
        r = Routing(s.topology, s.policy, s.tree, {}, s.up_ports, s.designated_up, {}, s._window_hosts)
        for d, ports in self.plans.items():
            r.filters[d] = {}
            for p, plan in ports.items():
                if plan is None:
                    r.filters[d][p] = MATCH_ALL
                    continue
                slot = self.counts.get((d, p))
                if slot:
                    r.filters[d][p] = tuple(slot)
                    r.exact.setdefault(d, {})[p] = frozenset(f for f, n in slot.items() if n[0] > 0)
        return r


__all__ = ["LiveRouting", "LineChanges", "PortPlan", "line_hash", "rules_digest"]
