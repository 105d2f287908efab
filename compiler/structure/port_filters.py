"""Egress port filters: a subscriber port's own rules, run on the copies replicated to it.

A switch cover (relaxed.py) joins states to stay within the switch's tables, so a port that wants
few messages shares leaves with ports that want many and receives nearly the whole feed (1,000
sensor filters over 200 ports: the 90th-percentile port got 7.6x what it asked for, the worst
133x). The ingress cannot do better within its width: one walk decides every port at once, and
the exact diagram of all ports multiplies out. After replication it is different: each copy is
for one port, and a port's own rules are a handful of terms whose exact diagram is small. So the
switch's egress runs, for a port listed here, that port's exact diagram on its copy and drops
the copy when it ends outside `accept`.

Which ports: those whose sampled copies (the cover's own message model) exceed what their rules
select, most extra copies first, while their diagrams fit the entry allowance. Their diagrams
share one node store, so ports with the same rules share states. Drop rules are left out, as
the cover leaves them out: a filter may pass a message a drop rule takes (the host behind the
switch filters exactly) but never stops one the port's rules select.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..ir.pipeline import PortFilters
from ..language.spec import Role, Spec
from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered
from .diagram import EMPTY_LEAF, Branch, DiagramBuilder, DiagramTooLarge, Leaf
from .relaxed import TermLevels, sampled_deliveries
from .slicing import field_tables, reachable

EGRESS_PORT_BITS = 9     # a copy's egress port: bit<9> in v1model's standard_metadata and TNA's
                         # PortId_t; a rule's port beyond it names no port egress can tell apart
KEEP: frozenset[Atom] = frozenset({("keep",)})    # a port filter's accepting leaf (shared by every port)
PORT_WORK = 200_000      # term visits one port's diagram may take: a port whose rules multiply out
                         # past this keeps the cover's copies


@dataclass(frozen=True)
class PortFigures:
    """Per-port over-delivery on sampled messages (ports the rules never reach left out):
    a port's copies over what its rules select, with the filters applied."""
    median: float = 1.0
    p90: float = 1.0
    worst: float = 1.0
    filtered: int = 0            # ports with a filter
    entries: int = 0             # their table entries


def egress_readable(spec: Spec) -> set[str]:
    """Query fields a switch's egress reads from the packet: header fields the egress parser
    extracts again (not intrinsic metadata, topic levels or attribute frames, which ingress keeps
    in metadata that egress does not receive on Tofino). None when the user's program owns
    egress (it includes Camus's control, or the spec lacks the headers a whole program parses)."""
    if spec.framing.kind.startswith("attrs") or spec.camus_control_file or spec.topics:
        return set()
    roles = {spec.instances[name].role for name in spec.stack}
    if not {Role.ETHERNET, Role.UDP} <= roles or not roles & {Role.IPV4, Role.IPV6} \
            or (spec.framing.kind != "none" and Role.MESSAGE not in roles):
        return set()            # no whole program (the user's own parser and egress)
    return {q.path for q in spec.query_fields if q.role not in (Role.METADATA, Role.OTHER) and not q.topic}


def build_port_filters(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
                       cover: DiagramBuilder, root: int, allowance: int, samples: int = 500,
                       seed: int = 1) -> tuple[PortFilters | None, PortFigures]:
    """Filters for the ports the cover at `root` over-delivers to most, within `allowance` table
    entries, and the per-port figures with them (None: no port gets one)."""
    widths = [v.width for v in lowered.variables]
    sampled = sampled_deliveries(TermLevels(terms, order, widths), cover, root, samples, seed)
    wanted: dict[Any, int] = {}
    kept: dict[Any, int] = {}
    copies: dict[Any, int] = {}
    for want, fwd, got in sampled:
        for tally, ports in ((wanted, want), (kept, fwd), (copies, got)):
            for p in ports:
                tally[p] = tally.get(p, 0) + 1
    readable = egress_readable(lowered.spec)
    blocked = {v.index for v in lowered.variables if v.field is None or v.field.path not in readable}
    always = {a[1] for cons, atoms in terms if not cons for a in atoms if a[0] == "fwd"}   # every message anyway
    always |= {a[1] for a in lowered.spec.default_atoms if a[0] == "fwd"}  # what no rule delivers
    by_port: dict[Any, list[Term]] = {}
    for cons, atoms in terms:
        if ("drop",) in atoms:
            continue
        for a in atoms:
            if a[0] == "fwd":
                by_port.setdefault(a[1], []).append(cons)
    candidates = sorted((p for p in copies if type(p) is int and 0 <= p < 1 << EGRESS_PORT_BITS
                         and p not in always and p in by_port
                         and copies[p] > kept.get(p, 0)
                         and not any(v in blocked for cons in by_port[p] for v in cons)),
                        key=lambda p: (-(copies[p] - kept.get(p, 0)), p))
    builder = DiagramBuilder(widths)
    roots: dict[int, int] = {}
    counted: set[int] = set()
    spent = 0
    for p in candidates:
        builder.work, builder.max_work = 0, PORT_WORK
        try:
            r = builder.build([(cons, KEEP) for cons in by_port[p]], order)
        except DiagramTooLarge:
            continue
        new = [n for n in reachable(builder, r) if n not in counted]
        cost = 1 + sum(len(node.edges) if isinstance(node, Branch) else 1
                       for node in (builder.nodes[n] for n in new))
        if spent + cost > allowance:
            continue
        spent += cost
        counted.update(new)
        roots[p] = r
    figures = _figures(wanted, kept, copies, set(roots), spent)
    if not roots:
        return None, figures
    tables, leaves = field_tables(lowered, builder, sorted(counted), order)
    accept = sorted(n for n in leaves if n != EMPTY_LEAF and isinstance(builder.nodes[n], Leaf)
                    and builder.nodes[n].atoms)      # type: ignore[union-attr]
    return PortFilters(roots, tables, accept), figures


def _figures(wanted: dict[Any, int], kept: dict[Any, int], copies: dict[Any, int], filtered: set[Any],
             entries: int) -> PortFigures:
    ratios = sorted((kept.get(p, 0) if p in filtered else copies.get(p, 0)) / n for p, n in wanted.items())
    if not ratios:
        return PortFigures(filtered=len(filtered), entries=entries)
    return PortFigures(round(statistics.median(ratios), 2), round(ratios[int(0.9 * (len(ratios) - 1))], 2),
                       round(ratios[-1], 2), len(filtered), entries)
