"""Routing on subscriptions: which filters each device port carries.

Subscriptions are per host: a list of filters (rule bodies such as `stock == GOOGL and price >
50`). A routing policy turns them into per-device port filters; a port's filter set is a list
of filters (the port matches a message when any of them does) or MATCH_ALL.

* Hierarchical topologies (fat tree, leaf-spine; Algorithm 1 of the Camus paper): a down port
  carries the union of the subscriptions of the hosts below it; an up port carries everything
  (MR, memory reduction: no entries for it) or the union of the subscriptions of every host not
  below the device (TR, traffic reduction). Messages go up through one designated up port
  until no host outside the subtree wants them, then down.
* General topologies: a spanning tree, MST (unit weights: a BFS tree) or MST++ (weights
  deg(u)*deg(v), so the tree avoids links between hubs); each tree port carries the union of
  the subscriptions of the hosts beyond it.
* Partial deployment: plain switches carry no filters and flood along the tree; the next
  filtering device covers for them (its port filters are computed the same way).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from .topology import FILTERING, Topology, TopologyError

MATCH_ALL = ("true",)
LAYER_RANK = {"host": 0, "edge": 1, "leaf": 1, "aggregation": 2, "spine": 3, "core": 3}
POLICIES = ("mr", "tr", "mst", "mst++")


@dataclass
class Routing:
    """Port filters of every device, and how messages move (for simulation)."""
    topology: Topology
    policy: str
    tree: nx.Graph                                   # links messages may use
    filters: dict[str, dict[int, tuple[str, ...]]]   # device -> port -> filters (MATCH_ALL: everything)
    up_ports: dict[str, list[int]] = field(default_factory=dict)     # hierarchical: device -> up ports
    designated_up: dict[str, int] = field(default_factory=dict)

    @property
    def hierarchical(self) -> bool:
        return self.policy in ("mr", "tr")

    def device_rules(self, device: str) -> str:
        """The device's rule file: one rule per (filter, port); ports merge in the compiler."""
        lines = []
        for port, fs in sorted(self.filters.get(device, {}).items()):
            lines += [f"{f} : fwd({port})" for f in fs]
        return "\n".join(lines) + ("\n" if lines else "")


def _union(subs: dict[str, list[str]], hosts) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for h in sorted(hosts):
        for f in subs.get(h, ()):
            seen.setdefault(f.strip(), None)
    return tuple(seen)


def _rank(t: Topology, n: str) -> int:
    layer = t.layer(n)
    if layer not in LAYER_RANK:
        raise TopologyError(f"{n}: layer {layer!r} is not hierarchical (edge/leaf, aggregation, spine/core)")
    return LAYER_RANK[layer]


def hierarchical(t: Topology, subs: dict[str, list[str]], policy: str = "mr") -> Routing:
    """Algorithm 1 (Camus): down ports carry what the hosts below want; up ports MR or TR."""
    if policy not in ("mr", "tr"):
        raise ValueError("hierarchical policies: mr, tr")
    below: dict[str, set[str]] = {}
    for n in sorted(t.g, key=lambda x: _rank(t, x)):        # hosts first, then upwards
        if t.kind(n) == "host":
            below[n] = {n}
        else:
            below[n] = set().union(*(below[m] for m in t.g[n] if _rank(t, m) < _rank(t, n)))
    hosts = set(t.hosts)
    filters: dict[str, dict[int, tuple[str, ...]]] = {}
    up_ports: dict[str, list[int]] = {}
    designated: dict[str, int] = {}
    for d in t.devices:
        ports: dict[int, tuple[str, ...]] = {}
        ups = []
        for m in sorted(t.g[d], key=lambda x: t.port(d, x)):
            p = t.port(d, m)
            if _rank(t, m) < _rank(t, d):
                ports[p] = _union(subs, below[m])
            else:
                ups.append(p)
                outside = hosts - below[d]
                ports[p] = MATCH_ALL if policy == "mr" else _union(subs, outside)
        if t.kind(d) in FILTERING:
            filters[d] = {p: fs for p, fs in ports.items() if fs}
        up_ports[d] = ups
        if ups:
            designated[d] = ups[0]
    tree = nx.Graph()
    tree.add_nodes_from(t.g)
    for d, p in designated.items():                           # the routes messages take upwards
        tree.add_edge(d, t.neighbour(d, p))
    for d in t.devices:                                       # and every downward link
        for m in t.g[d]:
            if _rank(t, m) < _rank(t, d):
                tree.add_edge(d, m)
    return Routing(t, policy, tree, filters, up_ports, designated)


def spanning_tree(t: Topology, weighted: bool) -> nx.Graph:
    """MST (unit weights) or MST++ (deg(u)*deg(v)) over the whole topology."""
    g = nx.Graph()
    for a, b in t.g.edges():
        w = t.g.degree(a) * t.g.degree(b) if weighted else 1
        g.add_edge(a, b, weight=w)
    if not nx.is_connected(g):
        raise TopologyError(f"{t.name}: the topology is not connected")
    return nx.minimum_spanning_tree(g, weight="weight", algorithm="kruskal")


def tree_routing(t: Topology, subs: dict[str, list[str]], policy: str = "mst") -> Routing:
    """General topologies: each tree port carries the union of the subscriptions beyond it."""
    if policy not in ("mst", "mst++"):
        raise ValueError("tree policies: mst, mst++")
    tree = spanning_tree(t, policy == "mst++")
    hosts = set(t.hosts)
    # hosts beyond each directed tree edge: root the tree anywhere and count subtrees once
    root = t.devices[0]
    parent = {root: None}
    order = [root]
    for u, v in nx.bfs_edges(tree, root):
        parent[v] = u
        order.append(v)
    inside: dict[str, set[str]] = {}
    for n in reversed(order):
        inside[n] = ({n} & hosts).union(*(inside[c] for c in tree[n] if parent.get(c) == n))
    filters: dict[str, dict[int, tuple[str, ...]]] = {}
    for d in t.devices:
        if t.kind(d) not in FILTERING:
            continue
        ports = {}
        for m in tree[d]:
            beyond = inside[m] if parent.get(m) == d else hosts - inside[d]
            fs = _union(subs, beyond)
            if fs:
                ports[t.port(d, m)] = fs
        filters[d] = ports
    return Routing(t, policy, tree, filters)


def route(t: Topology, subs: dict[str, list[str]], policy: str) -> Routing:
    if policy in ("mr", "tr"):
        return hierarchical(t, subs, policy)
    if policy in ("mst", "mst++"):
        return tree_routing(t, subs, policy)
    raise ValueError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
