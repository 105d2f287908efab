"""The switch cover: a decision diagram of bounded width (a relaxed decision diagram).

A switch runs the decision diagram as one table per field. Filters that constrain several fields
with wildcards between them multiply the exact diagram out: 1,000 sensor filters over 8 fields
were still growing after 11 minutes. Leaving whole fields out (the earlier cover) bounded it but
kept nothing selective: every message went to every port.

This cover is built level by level, one field per level in the compile's order. A node stands for
the terms still possible on its path (`pending`, a bitmask over the terms) and the actions of the
terms its path already satisfies (`acc`, a bitmask over the actions). Two bounds keep it small,
and both only ever widen what a node accepts:

  * a node whose field cuts its terms into more than `fanout` intervals has adjacent intervals
    joined (the joined interval holds the terms of both);
  * a level with more than `width` nodes has nodes joined (the joined node holds both term sets
    and both action sets).

A joined node still reaches every action either part reached, so the cover over-delivers and
never under-delivers; the XDP host (or the subscriber) behind the switch filters exactly. What is
joined is what costs least: the share of messages expected on each side (`FieldMass`, measured
on the rules' own constants) times the terms the other side adds. The cost of the build is one
sweep per node over its terms constrained at that level plus big-int mask operations: at most
levels x width x fanout edges, whatever the rules.
"""
from __future__ import annotations

import bisect
import re
import random
from dataclasses import dataclass
from typing import Any

from ..logic.dnf import Term
from ..ir.pipeline import CoverInfo
from ..logic.lowering import Atom
from .diagram import DiagramBuilder, Leaf

OUTSIDE_SHARE = 0.02     # the share of messages a field's model puts outside the rules' constants
ACC_WEIGHT = 2           # an action already certain costs more to add than a term still pending

_BYTE_BITS = [tuple(i for i in range(8) if b >> i & 1) for b in range(256)]


_NONZERO = re.compile(b"[^\\x00]")


def bits_of(x: int) -> list[int]:
    """The positions of the set bits of x, lowest first (the regex skips zero bytes in C: a
    sparse 10K-bit mask in a few microseconds)."""
    out: list[int] = []
    for m in _NONZERO.finditer(x.to_bytes((x.bit_length() + 7) // 8, "little")):
        i = m.start()
        base = i * 8
        out.extend([base + j for j in _BYTE_BITS[m.group()[0]]])
    return out


@dataclass(frozen=True)
class CoverShape:
    width: int = 1024        # nodes per level at most
    fanout: int = 32         # edges per node: a level's nodes share width x fanout edges, each
                             # node at least this many (the first levels, with few nodes, more)

    def narrower(self) -> "CoverShape | None":
        """The next, smaller shape the fitting driver tries (None: nothing smaller is useful)."""
        if self.width <= 1:
            return None
        return CoverShape(max(1, self.width // 4), max(2, self.fanout // 2))


class FieldMass:
    """The share of messages expected in an interval of one field, from the rules' constants.

    A field the rules mostly test for single values (symbols, sites, kinds) is modelled as
    carrying those values, each equally often; any other field as uniform between its smallest
    and largest boundary. OUTSIDE_SHARE of the messages is spread over the whole domain, so no
    interval is free to join."""

    def __init__(self, intervals: list[tuple[int, int]], width: int) -> None:
        self.size = 1 << width
        top = self.size - 1
        points = sorted({lo for lo, hi in intervals if lo == hi})
        self.points = points if points and 2 * len(points) >= len({iv for iv in intervals}) else []
        bounds = [b for lo, hi in intervals for b in (lo, hi) if 0 < b < top] or [0, top]
        self.lo, self.hi = min(bounds), max(bounds)

    def mass(self, lo: int, hi: int) -> float:
        anywhere = OUTSIDE_SHARE * (hi - lo + 1) / self.size
        if self.points:
            inside = (bisect.bisect_right(self.points, hi) - bisect.bisect_left(self.points, lo)) / len(self.points)
        else:
            inside = max(0, min(hi, self.hi) - max(lo, self.lo) + 1) / (self.hi - self.lo + 1)
        return (1 - OUTSIDE_SHARE) * inside + anywhere

    def masses(self, ivs: list[tuple[int, int, int, int, float]]) -> list[float]:
        """mass() of each of consecutive intervals, in one pass."""
        size, share = self.size, OUTSIDE_SHARE
        if not self.points:
            lo_s, hi_s = self.lo, self.hi
            span = hi_s - lo_s + 1
            return [(1 - share) * max(0, min(hi, hi_s) - max(lo, lo_s) + 1) / span + share * (hi - lo + 1) / size
                    for lo, hi, *_ in ivs]
        points, k, out = self.points, bisect.bisect_left(self.points, ivs[0][0]), []
        for lo, hi, *_ in ivs:
            start = k
            while k < len(points) and points[k] <= hi:
                k += 1
            out.append((1 - share) * (k - start) / len(points) + share * (hi - lo + 1) / size)
        return out

    def sample(self, rng: random.Random) -> int:
        if rng.random() < OUTSIDE_SHARE:
            return rng.randrange(self.size)
        if self.points:
            return rng.choice(self.points)
        return rng.randint(self.lo, self.hi)


class TermLevels:
    """The terms as masks per level: who is constrained where, who completes where, and the
    actions as bitmasks."""

    def __init__(self, terms: list[tuple[Term, frozenset[Atom]]], order: list[int], widths: list[int]) -> None:
        level_of = {v: i for i, v in enumerate(order)}
        n = len(order)
        self.order = order
        self.tops = [(1 << widths[v]) - 1 for v in order]
        self.cons: list[dict[int, tuple[tuple[int, int], ...]]] = [{} for _ in range(n)]
        self.constrained = [0] * n
        self.completes = [0] * n
        self.atom_ids: dict[Atom, int] = {}
        self.term_acts: list[int] = []
        self.term_act_ids: list[list[int]] = []
        self.free_acts = 0                   # actions of terms that constrain nothing
        self.pending0 = 0
        for t, (cons, atoms) in enumerate(terms):
            acts = 0
            for a in atoms:
                acts |= 1 << self.atom_ids.setdefault(a, len(self.atom_ids))
            self.term_acts.append(acts)
            self.term_act_ids.append(bits_of(acts))
            if not cons:
                self.free_acts |= acts
                continue
            last = -1
            for v, iset in cons.items():
                lv = level_of[v]
                self.cons[lv][t] = tuple(iset)
                self.constrained[lv] |= 1 << t
                last = max(last, lv)
            self.completes[last] |= 1 << t
            self.pending0 |= 1 << t
        self.atoms = list(self.atom_ids)
        self.events: list[dict[int, list[tuple[int, int]]]] = [
            {t: [(b, t) for lo, hi in iset for b in ((lo, hi + 1) if hi < top else (lo,))]
             for t, iset in cons.items()} for cons, top in zip(self.cons, self.tops)]
        self.masses = [FieldMass([iv for iset in self.cons[lv].values() for iv in iset], widths[v])
                       for lv, v in enumerate(order)]

    def atoms_of(self, acts: int) -> frozenset[Atom]:
        return frozenset(self.atoms[i] for i in bits_of(acts))


def _join_cost(m_a: float, pend_a: int, acts_a: int, m_b: float, pend_b: int, acts_b: int) -> float:
    """Extra deliveries (roughly) when a and b become one: each side's messages meet the terms and
    actions only the other side had."""
    return (m_a * ((pend_b & ~pend_a).bit_count() + ACC_WEIGHT * (acts_b & ~acts_a).bit_count())
            + m_b * ((pend_a & ~pend_b).bit_count() + ACC_WEIGHT * (acts_a & ~acts_b).bit_count()))


def _keep_costliest(costs: list[float], keep: int) -> list[bool]:
    """Which boundaries between neighbours stay (the `keep` whose joining would cost most)."""
    cut = [False] * len(costs)
    for j in sorted(range(len(costs)), key=costs.__getitem__)[len(costs) - keep:] if keep > 0 else ():
        cut[j] = True
    return cut


@dataclass
class _Node:
    pending: int
    acts: int
    mass: float


def _intervals(lv: TermLevels, level: int, pending: int) -> list[tuple[int, int, int, int, float]]:
    """The node's field cut into maximal intervals: (lo, hi, terms constrained here that hold and
    go on below, actions of those that hold and end here, what joining it to the interval before
    would cost per unit of mass: the terms entering or leaving at its start)."""
    here = pending & lv.constrained[level]
    top = lv.tops[level]
    events = [e for t in bits_of(here) for e in lv.events[level][t]]
    events.sort()
    ends = lv.completes[level]
    act_ids = lv.term_act_ids
    out: list[tuple[int, int, int, int, float]] = []
    counts: dict[int, int] = {}            # action bit -> terms ending here that hold and carry it
    holding: set[int] = set()              # terms ending here that hold
    active = acts = pos = i = 0
    n = len(events)
    while pos <= top:
        change = 0.0
        while i < n and events[i][0] == pos:
            t = events[i][1]
            i += 1
            bit = 1 << t
            if not ends & bit:
                active ^= bit
                change += 1
                continue
            change += ACC_WEIGHT
            on = t not in holding
            if on:
                holding.add(t)
            else:
                holding.discard(t)
            for a in act_ids[t]:
                c = counts.get(a, 0) + (1 if on else -1)
                counts[a] = c
                if c == 0:
                    acts &= ~(1 << a)
                elif on and c == 1:
                    acts |= 1 << a
        end = events[i][0] - 1 if i < n else top
        if out and out[-1][2] == active and out[-1][3] == acts:
            out[-1] = (out[-1][0], end, active, acts, out[-1][4])
        else:
            out.append((pos, end, active, acts, change))
        pos = end + 1
    return out


def _coarsen(lv: TermLevels, level: int, ivs: list[tuple[int, int, int, int, float]],
             fanout: int) -> list[tuple[int, int, int, int, float]]:
    """At most `fanout` intervals: the cheapest neighbours joined (their terms and actions united).
    Joining costs the terms that change at the boundary times the smaller side's mass."""
    if len(ivs) <= fanout:
        return ivs
    m = lv.masses[level].masses(ivs)
    costs = [min(m[j], m[j + 1]) * ivs[j + 1][4] for j in range(len(ivs) - 1)]
    cut = _keep_costliest(costs, fanout - 1)
    out: list[tuple[int, int, int, int, float]] = []
    lo, active, acts = ivs[0][0], ivs[0][2], ivs[0][3]
    for j in range(len(ivs) - 1):
        if cut[j]:
            out.append((lo, ivs[j][1], active, acts, 0.0))
            lo, active, acts = ivs[j + 1][0], ivs[j + 1][2], ivs[j + 1][3]
        else:
            active |= ivs[j + 1][2]
            acts |= ivs[j + 1][3]
    out.append((lo, ivs[-1][1], active, acts, 0.0))
    return out


def _join_level(nodes: list[_Node], width: int) -> list[int]:
    """Group of each node (nodes in the order they were made: siblings side by side) so that at
    most `width` groups remain, the cheapest neighbours joined."""
    if len(nodes) <= width:
        return list(range(len(nodes)))
    costs = [_join_cost(a.mass, a.pending, a.acts, b.mass, b.pending, b.acts) for a, b in zip(nodes, nodes[1:])]
    cut = _keep_costliest(costs, width - 1)
    group, g = [0], 0
    for j in range(len(nodes) - 1):
        g += cut[j]
        group.append(g)
    return group


@dataclass
class CoverStats:
    width: int
    fanout: int
    joined_nodes: int = 0        # nodes given up by joining, over all levels
    joined_intervals: int = 0
    over_delivery: float = 1.0   # deliveries of the cover / of the exact rules, on sampled messages
    samples: int = 0

    def info(self) -> CoverInfo:
        return CoverInfo(self.width, self.fanout, self.over_delivery, self.samples)


def build_relaxed(builder: DiagramBuilder, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                  shape: CoverShape, samples: int = 500) -> tuple[int, CoverStats]:
    """Root id (in `builder`) of a cover of `terms` at most shape.width nodes wide per field and
    shape.fanout edges per node, with its over-delivery measured on `samples` messages drawn
    from the fields' models. Terms with an explicit drop are left out: a drop joined into a node
    would take messages from ports they belong to."""
    kept = [(c, a) for c, a in terms if ("drop",) not in a]
    lv = TermLevels(kept, order, builder.widths)
    stats = CoverStats(shape.width, shape.fanout)
    layer = [_Node(lv.pending0, lv.free_acts, 1.0)]
    levels: list[list[list[tuple[int, int, int]]]] = []      # per level, per node: (lo, hi, child)
    for level in range(len(order)):
        made: dict[tuple[int, int], int] = {}
        children: list[_Node] = []
        edges_of: list[list[tuple[int, int, int]]] = []

        def child(pending: int, acts: int, mass: float) -> int:
            k = made.get((pending, acts))
            if k is None:
                k = made[(pending, acts)] = len(children)
                children.append(_Node(pending, acts, 0.0))
            children[k].mass += mass
            return k

        fm = lv.masses[level]
        top = lv.tops[level]
        allowance = max(shape.fanout, shape.width * shape.fanout // len(layer))
        for node in layer:
            if not node.pending & lv.constrained[level]:          # nothing to test here
                edges_of.append([(0, top, child(node.pending, node.acts, node.mass))])
                continue
            ivs = _intervals(lv, level, node.pending)
            coarse = _coarsen(lv, level, ivs, allowance)
            stats.joined_intervals += len(ivs) - len(coarse)
            through = node.pending & ~lv.constrained[level]
            edges = [(lo, hi, child(through | active, node.acts | acts, node.mass * fm.mass(lo, hi)))
                     for lo, hi, active, acts, _ in coarse]
            edges_of.append(edges)
        group = _join_level(children, shape.width)
        stats.joined_nodes += len(children) - (group[-1] + 1 if group else 0)
        joined: list[_Node] = []
        for k, g in enumerate(group):
            c = children[k]
            if g == len(joined):
                joined.append(_Node(c.pending, c.acts, c.mass))
            else:
                j = joined[g]
                j.pending |= c.pending
                j.acts |= c.acts
                j.mass += c.mass
        levels.append([[(lo, hi, group[k]) for lo, hi, k in edges] for edges in edges_of])
        layer = joined
    # Bottom up: leaves from the actions, then each level's nodes as branches over the ids below.
    ids = [builder.leaf(lv.atoms_of(node.acts)) for node in layer]
    for level in range(len(order) - 1, -1, -1):
        var = order[level]
        below, ids = ids, []
        for edges in levels[level]:
            merged: list[tuple[int, int, int]] = []
            for lo, hi, g in edges:
                nid = below[g]
                if merged and merged[-1][2] == nid:
                    merged[-1] = (merged[-1][0], hi, nid)
                else:
                    merged.append((lo, hi, nid))
            ids.append(builder.branch(var, tuple(merged)))
    if samples:
        exact = lv if len(kept) == len(terms) else TermLevels(terms, order, builder.widths)
        stats.over_delivery = over_delivery(exact, builder, ids[0], samples)
        stats.samples = samples
    return ids[0], stats


def _matching(lv: TermLevels, messages: list[list[int]]) -> list[int]:
    """For each message (a value per level), the mask of the terms it satisfies: per level, one
    sweep over the terms' boundaries and the messages' values in order."""
    alive = [lv.pending0] * len(messages)
    for level, cons in enumerate(lv.cons):
        if not cons:
            continue
        events = sorted((b, t) for t, iset in cons.items() for lo, hi in iset
                        for b in ((lo, hi + 1) if hi < lv.tops[level] else (lo,)))
        others = ~lv.constrained[level]
        active, i = 0, 0
        for s in sorted(range(len(messages)), key=lambda k: messages[k][level]):
            value = messages[s][level]
            while i < len(events) and events[i][0] <= value:
                active ^= 1 << events[i][1]
                i += 1
            alive[s] &= active | others
    return alive


def over_delivery(lv: TermLevels, builder: DiagramBuilder, root: int, samples: int, seed: int = 1) -> float:
    """Deliveries (message, port) of the diagram at `root` over those of the terms in `lv`, on
    `samples` messages drawn from the fields' models."""
    exact = covered = 0
    for want, _, got in sampled_deliveries(lv, builder, root, samples, seed):
        exact += len(want)
        covered += len(got)
    return covered / exact if exact else (1.0 if not covered else float(covered))


def sampled_deliveries(lv: TermLevels, builder: DiagramBuilder, root: int, samples: int,
                       seed: int = 1) -> list[tuple[frozenset[Any], frozenset[Any], frozenset[Any]]]:
    """Per message drawn from the fields' models: the ports the terms in `lv` deliver it to
    (an explicit drop wins), the ports of its matching forwarding terms alone (drops left out,
    as the cover leaves them out) and the ports the diagram at `root` delivers it to."""
    rng = random.Random(seed)
    messages = [[fm.sample(rng) for fm in lv.masses] for _ in range(samples)]
    level_of = {v: i for i, v in enumerate(lv.order)}
    out = []
    for values, alive in zip(messages, _matching(lv, messages)):
        atoms = lv.atoms_of(lv.free_acts | _acts(lv, alive))
        fwd = frozenset(a[1] for a in atoms if a[0] == "fwd")
        node = builder.nodes[root]
        while not isinstance(node, Leaf):
            value = values[level_of[node.var]]
            node = builder.nodes[next(c for lo, hi, c in node.edges if lo <= value <= hi)]
        got = frozenset() if ("drop",) in node.atoms else frozenset(a[1] for a in node.atoms if a[0] == "fwd")
        out.append((frozenset() if ("drop",) in atoms else fwd, fwd, got))
    return out


def _acts(lv: TermLevels, terms: int) -> int:
    acts = 0
    for t in bits_of(terms):
        acts |= lv.term_acts[t]
    return acts
