"""Pushes in time proportional to the change, not to the tables a switch holds.

A compile that reuses its diagram builder (the controller's IncrementalCompiler does) keeps
node ids: in one builder an id always names the same sub-diagram (nodes are hash-consed and
never change, ids are never reused). So what a switch holds can be kept by IR state: the
switch's id for each IR state, the entries written for it, the multicast group of each port
set. In the next compile, the states the map knows are on the switch already and unchanged;
the new ones get their entries (p4_tables of those states alone) under fresh switch ids; the
ones that are gone are deleted after the flip. The phases are delta.plan's (groups in, new
states' entries, the flip of t_root, old states' entries out, groups out), without reading,
signing or renumbering the whole table set: a one-subscription change at 10K ITCH filters is a
few hundred entries planned from a few hundred states.

It applies when the pipeline has the shape the map was made for: the same builder, the same
tables in the same order with the same match kinds and widths, the same default action, and
nothing whose entries are not per state (compressed fields, lower-resolution domains, state
variables, custom actions).
Otherwise the caller plans the whole set (delta.plan) and makes the map again from that plan
(`LiveHeld.from_plan`).
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import Any

from ...compiled import Compiled
from ...ir.pipeline import Pipeline
from ...language.spec import Spec
from .delta import STATE_KEY, Change, Plan
from .entries import Match, P4Entry, P4Tables, declared_kind, p4_tables


def _shape(c: Compiled, spec: Spec) -> tuple[Any, ...] | None:
    """What must not change for the map to stay valid (None: never valid for this pipeline)."""
    p = c.pipeline
    if p.state_vars or p.bitvector is not None or any(t.compression is not None for t in p.tables):
        return None
    if any(q.domain_bits for q in spec.query_fields):     # the root's codes are not per state
        return None
    if p.port_filters is not None:        # the egress filters' states are renumbered by delta.plan
        return None
    d = p.default_action
    if d is not None and d.calls:
        return None
    return (tuple((t.name, t.kind, declared_kind(spec, t), t.field_width) for t in p.tables),
            None if d is None else (d.ports, d.drop))


def _entry_states(p: Pipeline) -> set[int]:
    out: set[int] = set(p.leaves)
    for t in p.tables:
        out.update(t.states)
    return out


@dataclass
class LiveHeld:
    """What a switch holds, by the IR states of one builder."""
    builder: Any
    shape: tuple[Any, ...]
    template: P4Tables                                   # order, widths, defaults; no entries
    root: int                                            # the switch's root state
    ir_to_sw: dict[int, int]                             # IR state -> switch state
    ir_with_entries: set[int]                            # IR states whose entries are written
    users: dict[int, int]                                # switch state -> IR states mapped to it
    entries_of: dict[int, list[P4Entry]]                 # switch state -> its entries
    groups: dict[int, tuple[Any, ...]]                   # switch group id -> ports
    group_of: dict[tuple[Any, ...], int]                 # ports -> switch group id
    group_users: dict[int, int]                          # group id -> t_leaf entries (and the default)
    free: list[int] = field(default_factory=list)        # switch state ids to reuse (a heap)
    next_id: int = 1

    @classmethod
    def from_plan(cls, c: Compiled, spec: Spec, step: Plan) -> "LiveHeld | None":
        """The map of a whole-set plan's result (None: the pipeline does not qualify)."""
        shape = _shape(c, spec)
        if shape is None or not step.state_ids or step.tables.calls:
            return None
        t = step.tables
        entries_of: dict[int, list[P4Entry]] = {}
        for e in t.entries:
            if not (e.matches and e.matches[0].field == STATE_KEY):
                return None                              # an entry not keyed by state
            entries_of.setdefault(e.matches[0].value, []).append(e)
        users: dict[int, int] = {}
        for sw in step.state_ids.values():
            users[sw] = users.get(sw, 0) + 1
        group_users: dict[int, int] = {g: 0 for g in t.groups}
        for e in t.entries:
            if e.action == "set_mgid":
                group_users[int(e.params[0])] += 1
        for a, v in t.defaults.values():
            if a == "set_mgid":
                group_users[int(v[0])] += 1
        used = set(users) | set(entries_of) | {t.root}
        top = max(used, default=0)
        template = dataclasses.replace(t, entries=[], groups={})
        return cls(c.builder, shape, template, t.root, dict(step.state_ids),
                   _entry_states(c.pipeline), users, entries_of, dict(t.groups),
                   {tuple(ps): g for g, ps in t.groups.items()}, group_users,
                   [s for s in range(1, top) if s not in used], top + 1)

    def tables(self) -> P4Tables:
        """The whole table set (for a full plan or a repair later)."""
        return dataclasses.replace(self.template, root=self.root, groups=dict(self.groups),
                                   entries=[e for es in self.entries_of.values() for e in es])

    def _fresh_state(self) -> int:
        if self.free:
            return heapq.heappop(self.free)
        self.next_id += 1
        return self.next_id - 1

    def _fresh_group(self) -> int:
        g = len(self.groups) + 1
        while g in self.groups:
            g += 1
        return g


def live_plan(held: LiveHeld | None, c: Compiled, spec: Spec) -> Plan | None:
    """The make-before-break update from what `held` says the switch holds to the compile `c`,
    with `held` brought up to date; None when the map does not apply (plan the whole set)."""
    if held is None or held.builder is not c.builder or _shape(c, spec) != held.shape:
        return None
    p = c.pipeline
    now = _entry_states(p)
    added, removed = now - held.ir_with_entries, held.ir_with_entries - now
    sub = dataclasses.replace(
        p, tables=[dataclasses.replace(t, states=[s for s in t.states if s in added],
                                       entries=[e for e in t.entries if e.state in added]) for t in p.tables],
        leaves={s: a for s, a in p.leaves.items() if s in added})
    fresh = p4_tables(sub, spec)
    if fresh.calls:
        return None
    # switch ids for the new states (their entries first), then for what they lead to
    sw = held.ir_to_sw
    for s in sorted(added):
        sw[s] = held._fresh_state()
        held.users[sw[s]] = held.users.get(sw[s], 0) + 1

    def state(s: int) -> int:
        if s not in sw:                      # a state without entries (a leaf with no action)
            sw[s] = held._fresh_state()
            held.users[sw[s]] = held.users.get(sw[s], 0) + 1
        return sw[s]

    groups_in: list[Change] = []
    inserts: list[Change] = []
    rank = {t: i for i, t in enumerate(held.template.order)}
    for e in fresh.entries:
        matches = tuple(Match(m.field, m.kind, state(m.value), m.arg) if m.field == STATE_KEY else m
                        for m in e.matches)
        params = e.params
        if e.action == "set_state":
            params = (state(int(e.params[0])),)
        elif e.action == "set_mgid":
            ports = tuple(p.groups[int(e.params[0])])
            g = held.group_of.get(ports)
            if g is None:
                g = held.group_of[ports] = held._fresh_group()
                held.groups[g] = ports
                held.group_users[g] = 0
                groups_in.append(Change("insert", "group", group=g, ports=ports))
            held.group_users[g] += 1
            params = (g,)
        entry = P4Entry(e.table, matches, e.action, params, e.priority)
        held.entries_of.setdefault(matches[0].value, []).append(entry)
        inserts.append(Change("insert", "entry", entry))
    inserts.sort(key=lambda ch: -rank.get(ch.entry.table, -1) if ch.entry else 0)   # deepest first
    root = state(p.root)
    flip = [Change("modify", "default", table="t_root", action="set_state", params=(root,))] if root != held.root else []
    deletes: list[Change] = []
    freed: list[int] = []
    for s in sorted(removed):
        old = sw.pop(s)
        held.users[old] -= 1
        if held.users[old]:
            continue                         # another IR state still stands for it (merged by signature)
        del held.users[old]
        freed.append(old)
        for e in held.entries_of.pop(old, ()):
            deletes.append(Change("delete", "entry", e))
            if e.action == "set_mgid":
                held.group_users[int(e.params[0])] -= 1
    groups_out = []
    for g in sorted({int(ch.entry.params[0]) for ch in deletes if ch.entry and ch.entry.action == "set_mgid"}):
        if held.group_users.get(g) == 0:
            groups_out.append(Change("delete", "group", group=g, ports=held.groups.pop(g)))
            del held.group_of[groups_out[-1].ports]
            del held.group_users[g]
    held.ir_with_entries = now
    held.root = root
    for s in freed:                          # reusable once this plan's deletes are through
        heapq.heappush(held.free, s)
    return Plan(held.tables(), [ph for ph in (groups_in, inserts, flip, deletes, groups_out) if ph])
