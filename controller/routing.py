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
* Exactness at the last hop: a port's filters for the hosts it reaches without another
  filtering device on the way (its *last-hop hosts*) are kept exact: never widened by alpha,
  state functions kept. For every other host beyond the port, an earlier hop, the filter is
  its stateless cover (compiler/language/cover.py): windows are counted at the last hop only, as in
  Camus, and counting them upstream too would count only what earlier hops let through.
* A window needs one counter that sees every message: a host behind plain switches that
  several filtering devices reach as a last hop (a plain region with more than one filtering
  border) gets its windows from no single device, since each border counts only the messages
  entering the region through it. Its stateful filters are forwarded by their stateless cover
  at every border (over-delivery to a host behind a plain switch, never under-delivery); the
  host's own broker, if any, applies the windows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx

from camus.compiler.language.cover import stateless_cover

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
    # device -> port -> the filters of that port that are a last hop's: compiled exactly
    exact: dict[str, dict[int, frozenset[str]]] = field(default_factory=dict)
    _window_hosts: set[str] | None = field(default=None, repr=False)

    @property
    def hierarchical(self) -> bool:
        return self.policy in ("mr", "tr")

    def _rank(self, n: str) -> int:
        return LAYER_RANK.get(self.topology.layer(n), 0)

    def flood_hops(self, device: str, came_from: str) -> list[str]:
        """Where a message at `device` that came from `came_from` may go next along the routes
        (all of it for a plain switch; a filtering device picks among these by its tables)."""
        cands = [m for m in self.tree[device] if m != came_from]
        if self.hierarchical:
            from_above = self._rank(came_from) > self._rank(device)
            up = self.designated_up.get(device)
            up_peer = self.topology.neighbour(device, up) if up is not None else None
            cands = [m for m in cands
                     if self._rank(m) < self._rank(device) or (m == up_peer and not from_above)]
        return cands

    def last_hop_hosts(self, device: str, neighbour: str) -> set[str]:
        """Hosts a message sent from `device` to `neighbour` reaches with no other filtering
        device on the way (through plain switches flooding along the routes)."""
        out: set[str] = set()
        stack = [(device, neighbour)]
        while stack:
            src, dst = stack.pop()
            kind = self.topology.kind(dst)
            if kind == "host":
                out.add(dst)
            elif kind not in FILTERING:
                stack.extend((dst, m) for m in self.flood_hops(dst, src))
        return out

    def window_hosts(self) -> set[str]:
        """Hosts exactly one filtering device reaches as a last hop: the only hosts whose
        windows a device can count (it sees every message that may reach them)."""
        if self._window_hosts is None:
            borders: dict[str, int] = {}
            for d in self.topology.devices:
                if self.topology.kind(d) in FILTERING:
                    for h in set().union(*(self.last_hop_hosts(d, m) for m in self.tree[d])):
                        borders[h] = borders.get(h, 0) + 1
            self._window_hosts = {h for h, n in borders.items() if n == 1}
        return self._window_hosts

    def device_rule_set(self, device: str) -> tuple[str, frozenset[int]]:
        """The device's rule file (one rule per (filter, port); ports merge in the compiler)
        and the indices of the rules that must stay exact (last-hop filters)."""
        lines: list[str] = []
        exact: list[int] = []
        for port, fs in sorted(self.filters.get(device, {}).items()):
            keep = self.exact.get(device, {}).get(port, frozenset())
            for f in fs:
                if f in keep:
                    exact.append(len(lines))
                lines.append(f"{f} : fwd({port})")
        return "\n".join(lines) + ("\n" if lines else ""), frozenset(exact)

    def device_rules(self, device: str) -> str:
        return self.device_rule_set(device)[0]

    def set_port(self, device: str, port: int, subs: dict[str, list[str]], beyond: set[str],
                 last_hop: set[str]) -> None:
        """A port's filters: last-hop hosts' filters exact, everyone else's stateless cover."""
        fs, exact = _port_filters(subs, beyond, last_hop, self.window_hosts())
        if fs:
            self.filters.setdefault(device, {})[port] = fs
            self.exact.setdefault(device, {})[port] = exact


_STATE_CALL = re.compile(r"\b(count|sum|avg|every)\s*\(")


def stateless_filter(f: str) -> str:
    """The filter with its state functions (count, sum, avg, every) covered: what a switch
    upstream of the last hop forwards by (a filter without them is its own cover)."""
    return _stateless_cover(f) if _STATE_CALL.search(f) else f


@lru_cache(maxsize=4096)
def _stateless_cover(f: str) -> str:
    """Remembered for the stateful filters only: caching every filter ever seen held each
    churned-away filter's text (up to 65,536 of them, ~10 MB under churn)."""
    return stateless_cover(f)


def _port_filters(subs: dict[str, list[str]], beyond: set[str], last_hop: set[str],
                  windowed: set[str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """Filters of a port towards `beyond`: exact for its last-hop hosts (the stateless cover,
    still exact, for those whose windows no single device can count), covers for the rest."""
    seen: dict[str, bool] = {}                          # filter -> exact; exact wins a tie
    for h in sorted(beyond):
        for f in subs.get(h, ()):
            f = f.strip()
            if h in last_hop:
                seen[f if h in windowed else stateless_filter(f)] = True
            else:
                seen.setdefault(stateless_filter(f), False)
    return tuple(seen), frozenset(f for f, e in seen.items() if e)


def _rank(t: Topology, n: str) -> int:
    layer = t.layer(n)
    if layer not in LAYER_RANK:
        raise TopologyError(f"{n}: layer {layer!r} is not hierarchical (edge/leaf, aggregation, spine/core)")
    return LAYER_RANK[layer]


@dataclass(frozen=True)
class PortPlan:
    """Who a port carries filters for: the hosts beyond it, and those of them it is the last
    filtering hop to (their filters exact). Only the topology and the policy decide it."""
    beyond: frozenset[str]
    last_hop: frozenset[str]


# device -> port -> its plan, or None: the port carries everything (MR's up ports)
PortPlans = dict[str, dict[int, "PortPlan | None"]]


def hierarchical_plan(t: Topology, policy: str = "mr") -> tuple[Routing, PortPlans]:
    """Algorithm 1 (Camus): down ports carry what the hosts below want; up ports MR or TR."""
    if policy not in ("mr", "tr"):
        raise ValueError("hierarchical policies: mr, tr")
    below: dict[str, set[str]] = {}
    for n in sorted(t.g, key=lambda x: _rank(t, x)):        # hosts first, then upwards
        if t.kind(n) == "host":
            below[n] = {n}
        else:
            below[n] = set().union(*(below[m] for m in t.g[n] if _rank(t, m) < _rank(t, n)))
    up_ports: dict[str, list[int]] = {}
    designated: dict[str, int] = {}
    for d in t.devices:
        ups = [t.port(d, m) for m in sorted(t.g[d], key=lambda x: t.port(d, x)) if _rank(t, m) >= _rank(t, d)]
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
    r = Routing(t, policy, tree, {}, up_ports, designated)
    hosts = set(t.hosts)
    plans: PortPlans = {}
    for d in t.devices:
        if t.kind(d) not in FILTERING:
            continue
        plans[d] = {}
        for m in sorted(t.g[d], key=lambda x: t.port(d, x)):
            p = t.port(d, m)
            if _rank(t, m) < _rank(t, d):
                plans[d][p] = PortPlan(frozenset(below[m]), frozenset(r.last_hop_hosts(d, m)))
            elif policy == "mr":
                plans[d][p] = None
            else:
                plans[d][p] = PortPlan(frozenset(hosts - below[d]), frozenset(r.last_hop_hosts(d, m)))
    return r, plans


def spanning_tree(t: Topology, weighted: bool) -> nx.Graph:
    """MST (unit weights) or MST++ (deg(u)*deg(v)) over the whole topology."""
    g = nx.Graph()
    for a, b in t.g.edges():
        w = t.g.degree(a) * t.g.degree(b) if weighted else 1
        g.add_edge(a, b, weight=w)
    if not nx.is_connected(g):
        raise TopologyError(f"{t.name}: the topology is not connected")
    return nx.minimum_spanning_tree(g, weight="weight", algorithm="kruskal")


def tree_plan(t: Topology, policy: str = "mst") -> tuple[Routing, PortPlans]:
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
    r = Routing(t, policy, tree, {})
    plans: PortPlans = {}
    for d in t.devices:
        if t.kind(d) not in FILTERING:
            continue
        plans[d] = {}
        for m in tree[d]:
            beyond = inside[m] if parent.get(m) == d else hosts - inside[d]
            plans[d][t.port(d, m)] = PortPlan(frozenset(beyond), frozenset(r.last_hop_hosts(d, m)))
    return r, plans




def plan_routes(t: Topology, policy: str) -> tuple[Routing, PortPlans]:
    """The routing without filters yet, and what each port of each filtering device carries."""
    if policy in ("mr", "tr"):
        return hierarchical_plan(t, policy)
    if policy in ("mst", "mst++"):
        return tree_plan(t, policy)
    raise ValueError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")


def route(t: Topology, subs: dict[str, list[str]], policy: str) -> Routing:
    """Every port's filters for the hosts' subscriptions (controller/live_routing.py keeps
    the same answer up to date one subscription at a time)."""
    r, plans = plan_routes(t, policy)
    for d, ports in plans.items():
        r.filters[d] = {}
        for p, plan in ports.items():
            if plan is None:
                r.filters[d][p] = MATCH_ALL
            else:
                r.set_port(d, p, subs, set(plan.beyond), set(plan.last_hop))
    return r
