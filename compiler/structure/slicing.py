"""Algorithm 2 of the Camus paper: slice the decision diagram per field into staged tables.

Every inner node is a state of the table of the variable it tests; its edges become entries
(state, match) -> child. Match kinds: exact where the table only tests equality (points plus
one default per state), LPM for longest-prefix fields, ranges otherwise. Edges to the empty
leaf are left out where a miss means the same thing. Leaves become the leaf table and port
sets of two or more ports become multicast groups.
"""
from __future__ import annotations

from typing import Any, Collection

import bisect
from dataclasses import replace
from collections import Counter

from .diagram import EMPTY_LEAF, Branch, DiagramBuilder, Leaf
from ..logic.lowering import Lowered
from ..ir.pipeline import ActionSet, Compression, Entry, FieldTable, Pipeline, StateVarInfo
from ..language.spec import MatchKind


def port_key(p: object) -> tuple[Any, ...]:
    return (isinstance(p, str), p)


def sort_ports(ports: Collection[Any]) -> tuple[Any, ...]:
    """Numbered ports first (numerically), then named ones (alphabetically)."""
    nums = [p for p in ports if type(p) is int]
    if len(nums) == len(ports):
        return tuple(sorted(nums))
    return tuple(sorted(nums) + sorted(p for p in ports if type(p) is not int))


def actions_of_atoms(atoms: Collection[tuple[Any, ...]]) -> ActionSet:
    """Ports, drop and custom calls of a set of action atoms (no multicast group)."""
    a = leaf_action(atoms)
    return replace(a, updates=(), rules=()) if a.updates or a.rules else a


def leaf_action(atoms: Collection[tuple[Any, ...]]) -> ActionSet:
    """A leaf's actions before multicast groups are numbered: ports, drop and custom calls, the
    state variables it updates and the counted rules it matched. One pass over the atoms: a leaf of
    100K ITCH rules holds up to a port atom per subscriber host, and there are 16K leaves."""
    ports: list[Any] = []
    calls: list[tuple[Any, Any]] = []
    updates: list[int] = []
    rules: list[int] = []
    drop = False
    for a in atoms:
        kind = a[0]
        if kind == "fwd":
            ports.append(a[1])
        elif kind == "rule":
            rules.append(a[1])
        elif kind == "update":
            updates.append(a[1])
        elif kind == "call":
            calls.append((a[1], a[2]))
        elif kind == "drop":
            drop = True
    return ActionSet(sort_ports(ports), None, drop, tuple(sorted(calls)), tuple(sorted(updates)), tuple(sorted(rules)))


def default_action(atoms: frozenset[tuple[Any, ...]]) -> ActionSet | None:
    """The spec's query_default_action as an action set (no group yet), None without one."""
    return actions_of_atoms(atoms) if atoms else None


def reachable(builder: DiagramBuilder, root: int) -> list[int]:
    seen = {root}
    stack = [root]
    while stack:
        node = builder.nodes[stack.pop()]
        if isinstance(node, Branch):
            for _, _, c in node.edges:
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
    return sorted(seen)


def exact_shape(edges: tuple[Any, ...]) -> int | None:
    """The default child if the edges are points plus one default, else None."""
    rest = {c for lo, hi, c in edges if lo != hi}
    if len(rest) > 1:
        return None
    if rest:
        only: int = rest.pop()
        return only
    common: int = Counter(c for _, _, c in edges).most_common(1)[0][0]
    return common


def _exact_entries(state: int, edges: tuple[Any, ...], default: int) -> list[Entry]:
    out = [Entry(state, ("exact", lo), c) for lo, hi, c in edges if lo == hi and c != default]
    if default != EMPTY_LEAF:
        out.append(Entry(state, ("any",), default))
    return out


def _lpm_entries(state: int, edges: tuple[Any, ...], width: int) -> list[Entry]:
    """Longest-prefix entries equivalent to the edges: each prefix node whose range is mostly
    one child takes that child, so only the exceptions need longer prefixes."""
    starts = [lo for lo, _, _ in edges]
    out: list[Entry] = []

    def walk(value: int, plen: int, inherited: int) -> None:
        lo = value
        hi = value | ((1 << (width - plen)) - 1)
        i = bisect.bisect_right(starts, lo) - 1
        if edges[i][1] >= hi:                       # one child covers the whole prefix
            child = edges[i][2]
            if child != inherited:
                out.append(Entry(state, ("lpm", value, plen), child))
            return
        cover: Counter[int] = Counter()
        j = i
        while j < len(edges) and edges[j][0] <= hi:
            cover[edges[j][2]] += min(hi, edges[j][1]) - max(lo, edges[j][0]) + 1
            j += 1
        child, size = cover.most_common(1)[0]
        if 2 * size > hi - lo + 1 and child != inherited:
            out.append(Entry(state, ("lpm", value, plen), child))
            inherited = child
        half = 1 << (width - plen - 1)
        walk(value, plen + 1, inherited)
        walk(value | half, plen + 1, inherited)

    walk(0, 0, EMPTY_LEAF)
    return out


def table_kind(kind: MatchKind, defaults: Collection[int | None]) -> str:
    """A field table's match kind: the spec's, or for AUTO fields exact only if every state
    tests equality alone (`exact_shape` gave each a default)."""
    got = {MatchKind.EXACT: "exact", MatchKind.RANGE: "range", MatchKind.LPM: "lpm"}.get(kind)
    if got is None:
        got = "exact" if all(d is not None for d in defaults) else "range"
    if got == "exact" and any(d is None for d in defaults):
        got = "range"    # unreachable for EXACT fields: the language only allows == and !=
    return got


def state_entries(kind: str, nid: int, edges: tuple[Any, ...], width: int, default: int | None) -> list[Entry]:
    """One state's entries in a table of `kind` (its edges; `default`: exact_shape's)."""
    if kind == "exact":
        return _exact_entries(nid, edges, default)  # type: ignore[arg-type]
    if kind == "lpm":
        return _lpm_entries(nid, edges, width)
    return [Entry(nid, ("range", lo, hi), c) for lo, hi, c in edges if c != EMPTY_LEAF]


def _compress(table: FieldTable, branches: dict[int, Branch], max_codes: int) -> None:
    """Replace raw values by small codes when the field has few distinct boundaries."""
    if table.kind == "exact":
        values = sorted({e.match[1] for e in table.entries if e.match[0] == "exact"})
        if not values or len(values) + 1 > max_codes:
            return
        width = max(1, len(values).bit_length())
        if width >= table.field_width:
            return
        code = {v: i + 1 for i, v in enumerate(values)}   # 0: any other value
        table.compression = Compression("exact", width, [(("exact", v), code[v]) for v in values])
        table.entries = [Entry(e.state, ("exact", code[e.match[1]]), e.next)
                         if e.match[0] == "exact" else e for e in table.entries]
        return
    if table.kind != "range":
        return
    bounds = sorted({lo for b in branches.values() for lo, _, _ in b.edges})
    if len(bounds) > max_codes:
        return
    width = max(1, (len(bounds) - 1).bit_length())
    if width >= table.field_width:
        return
    top = (1 << table.field_width) - 1
    spans = [(lo, (bounds[i + 1] - 1) if i + 1 < len(bounds) else top) for i, lo in enumerate(bounds)]
    table.compression = Compression("range", width, [(("range", lo, hi), i) for i, (lo, hi) in enumerate(spans)])
    table.entries = [Entry(e.state, ("range", bisect.bisect_right(bounds, e.match[1]) - 1,
                                     bisect.bisect_right(bounds, e.match[2]) - 1), e.next)
                     for e in table.entries]


def field_tables(lowered: Lowered, builder: DiagramBuilder, nodes: Collection[int], order: list[int],
                 compress_max: int = 0) -> tuple[list[FieldTable], list[int]]:
    """The branch nodes among `nodes` as one table per variable (in `order`), and the leaves."""
    by_var: dict[int, dict[int, Branch]] = {}
    leaf_ids: list[int] = []
    for nid in nodes:
        node = builder.nodes[nid]
        if isinstance(node, Branch):
            by_var.setdefault(node.var, {})[nid] = node
        else:
            leaf_ids.append(nid)
    tables: list[FieldTable] = []
    for var in order:
        branches = by_var.get(var)
        if not branches:
            continue
        v = lowered.variables[var]
        defaults = {nid: exact_shape(b.edges) for nid, b in branches.items()}
        kind = table_kind(v.kind, defaults.values())
        entries: list[Entry] = []
        for nid in sorted(branches):
            entries += state_entries(kind, nid, branches[nid].edges, v.width, defaults[nid])
        table = FieldTable(v.name, var, kind, v.width, sorted(branches), entries,
                           field=v.field.path if v.field else None,
                           state_var=(var - len(lowered.spec.query_fields)) if v.state else None)
        if compress_max and v.field is not None:
            _compress(table, branches, compress_max)
        tables.append(table)
    return tables, leaf_ids


def slice_pipeline(lowered: Lowered, builder: DiagramBuilder, root: int, order: list[int],
                   compress_max: int = 0) -> Pipeline:
    nodes = reachable(builder, root)
    tables, leaf_ids = field_tables(lowered, builder, nodes, order, compress_max)

    # Leaves and multicast groups.
    port_sets: set[tuple[Any, ...]] = set()
    parts = builder.leaf_parts           # a node never changes: a builder kept across compiles keeps these
    for nid in leaf_ids:
        got = parts.get(nid)
        if got is None:
            got = parts[nid] = leaf_action(builder.nodes[nid].atoms)   # type: ignore[union-attr]
        if len(got.ports) > 1:
            port_sets.add(got.ports)
    default = default_action(lowered.spec.default_atoms)
    if default is not None and len(default.ports) > 1:
        port_sets.add(default.ports)
    try:            # numbered ports compare directly; names need a mixed-type key
        ordered = sorted(port_sets, key=lambda ps: (len(ps), ps))
    except TypeError:
        ordered = sorted(port_sets, key=lambda ps: (len(ps), [port_key(p) for p in ps]))
    groups = {i + 1: ps for i, ps in enumerate(ordered)}
    group_of = {ps: g for g, ps in groups.items()}
    leaves: dict[int, ActionSet] = {}
    for nid in leaf_ids:
        a = parts[nid]
        if a.ports or a.drop or a.calls or a.updates or a.rules:
            leaves[nid] = replace(a, group=group_of.get(a.ports)) if len(a.ports) > 1 else a

    state_vars = [StateVarInfo(k, sv.fn, sv.field.path if sv.field else "", sv.counter.name, sv.counter.window_us,
                               sv.modulus)
                  for k, sv in enumerate(lowered.state_vars)]
    updates = _state_updates(builder, nodes, len(lowered.spec.query_fields)) if state_vars else {}
    if default is not None and len(default.ports) > 1:
        default = replace(default, group=group_of[default.ports])
    return Pipeline(lowered.spec.name, root, tables, leaves, groups, state_vars, updates,
                    lowered.user_rule_count, default_action=default)


def _state_updates(builder: DiagramBuilder, nodes: list[int], first_state_var: int) -> dict[int, tuple[int, ...]]:
    """For every state reachable after the header tables (a state-variable test or a leaf),
    the state variables whose guard held: the update atoms shared by every leaf below it."""
    memo: dict[int, tuple[int, ...]] = {}

    def below(nid: int) -> tuple[int, ...]:
        if nid in memo:
            return memo[nid]
        node = builder.nodes[nid]
        if isinstance(node, Leaf):
            memo[nid] = tuple(sorted(a[1] for a in node.atoms if a[0] == "update"))
        else:
            memo[nid] = below(node.edges[0][2])
        return memo[nid]

    out: dict[int, tuple[int, ...]] = {}
    for nid in nodes:
        node = builder.nodes[nid]
        if isinstance(node, Leaf) or node.var >= first_state_var:
            ups = below(nid)
            if ups:
                out[nid] = ups
    return out
