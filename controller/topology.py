"""Network topology: devices (P4 switches, XDP host brokers, plain non-filtering switches),
end hosts, and links with a port number at each end. A thin layer over a networkx graph.

Builders: k-ary fat trees (k=4: the Camus paper's 20 switches and 16 hosts), leaf-spine, and
general graphs from an edge list (SNAP format: "u v" per line, '#' comments), plus a YAML/JSON
file format:

    devices:
      - {name: s1, kind: p4, layer: edge}
      - {name: h1, kind: host}
    links:
      - {a: s1, a_port: 1, b: h1, b_port: 1}      # ports optional: numbered in order
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import networkx as nx

KINDS = ("p4", "xdp", "plain", "host")
FILTERING = ("p4", "xdp")


class TopologyError(ValueError):
    pass


@dataclass(frozen=True)
class Port:
    device: str
    number: int
    peer: str
    peer_port: int


class Topology:
    def __init__(self, name: str = "topology") -> None:
        self.name = name
        self.g = nx.Graph()

    # -- building -------------------------------------------------------------------------
    def add_device(self, name: str, kind: str, layer: str | None = None, **attrs: str) -> None:
        """`attrs`: deployment facts, e.g. `agent` (an XDP host's agent URL) or `out` (where a P4
        switch's entries go)."""
        if kind not in KINDS:
            raise TopologyError(f"device {name!r}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        if name in self.g:
            raise TopologyError(f"device {name!r} declared twice")
        self.g.add_node(name, kind=kind, layer=layer or ("host" if kind == "host" else ""), next_port=1,
                        attrs=dict(attrs))

    def attr(self, n: str, key: str, default: str | None = None) -> str | None:
        return self.g.nodes[n]["attrs"].get(key, default)

    def add_link(self, a: str, b: str, a_port: int | None = None, b_port: int | None = None) -> None:
        for n in (a, b):
            if n not in self.g:
                raise TopologyError(f"link {a}-{b}: unknown device {n!r}")
        if self.g.has_edge(a, b):
            raise TopologyError(f"link {a}-{b} declared twice")
        ports = {}
        for n, p in ((a, a_port), (b, b_port)):
            used = {d["ports"][n] for _, _, d in self.g.edges(n, data=True)}
            p = p if p is not None else self.g.nodes[n]["next_port"]
            if p in used:
                raise TopologyError(f"{n}: port {p} used twice")
            self.g.nodes[n]["next_port"] = max(self.g.nodes[n]["next_port"], p + 1)
            ports[n] = p
        self.g.add_edge(a, b, ports=ports)

    # -- reading --------------------------------------------------------------------------
    def kind(self, n: str) -> str:
        return self.g.nodes[n]["kind"]

    def layer(self, n: str) -> str:
        return self.g.nodes[n]["layer"]

    @property
    def hosts(self) -> list[str]:
        return sorted(n for n in self.g if self.kind(n) == "host")

    @property
    def devices(self) -> list[str]:
        return sorted(n for n in self.g if self.kind(n) != "host")

    def port(self, a: str, b: str) -> int:
        """a's port towards neighbour b."""
        return self.g.edges[a, b]["ports"][a]

    def neighbour(self, a: str, port: int) -> str:
        for b in self.g[a]:
            if self.g.edges[a, b]["ports"][a] == port:
                return b
        raise TopologyError(f"{a} has no port {port}")

    def ports(self, a: str) -> list[Port]:
        return sorted((Port(a, d["ports"][a], b, d["ports"][b]) for b, d in self.g[a].items()),
                      key=lambda p: p.number)

    # -- files ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": self.name,
                "devices": [{"name": n, "kind": self.kind(n), **({"layer": self.layer(n)} if self.layer(n) else {}),
                             **self.g.nodes[n]["attrs"]} for n in sorted(self.g)],
                "links": [{"a": a, "a_port": d["ports"][a], "b": b, "b_port": d["ports"][b]}
                          for a, b, d in sorted((min(u, v), max(u, v), d) for u, v, d in self.g.edges(data=True))]}

    def save(self, path: str | Path) -> None:
        import yaml
        path = Path(path)                  # as load takes it
        text = json.dumps(self.to_dict(), indent=1) if path.suffix == ".json" else yaml.safe_dump(self.to_dict())
        path.write_text(text)

    @classmethod
    def from_dict(cls, data: dict) -> "Topology":
        t = cls(data.get("name", "topology"))
        for i, d in enumerate(data.get("devices", [])):
            if "name" not in d or "kind" not in d:
                raise TopologyError(f"devices[{i}]: needs name and kind")
            extra = {k: str(v) for k, v in d.items() if k not in ("name", "kind", "layer")}
            t.add_device(str(d["name"]), d["kind"], d.get("layer"), **extra)
        for i, link in enumerate(data.get("links", [])):
            if "a" not in link or "b" not in link:
                raise TopologyError(f"links[{i}]: needs a and b")
            t.add_link(str(link["a"]), str(link["b"]), link.get("a_port"), link.get("b_port"))
        return t

    @classmethod
    def load(cls, path: str | Path) -> "Topology":
        import yaml
        p = Path(path)
        try:
            data = json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise TopologyError(f"{p}: {exc}") from None
        try:
            return cls.from_dict(data or {})
        except TopologyError as exc:
            raise TopologyError(f"{p}: {exc}") from None


# -- builders ---------------------------------------------------------------------------------

def fat_tree(k: int = 4, kind: str = "p4") -> Topology:
    """k-ary fat tree: (k/2)^2 core, k pods of k/2 aggregation + k/2 edge switches, k^3/4 hosts."""
    if k < 2 or k % 2:
        raise TopologyError("a fat tree needs an even k >= 2")
    t, h = Topology(f"fat-tree-k{k}"), k // 2
    cores = [f"c{i}" for i in range(h * h)]
    for c in cores:
        t.add_device(c, kind, "core")
    for pod in range(k):
        aggs = [f"a{pod}_{i}" for i in range(h)]
        edges = [f"e{pod}_{i}" for i in range(h)]
        for a in aggs:
            t.add_device(a, kind, "aggregation")
        for e in edges:
            t.add_device(e, kind, "edge")
        for i, e in enumerate(edges):
            for j in range(h):
                host = f"h{pod}_{i}_{j}"
                t.add_device(host, "host")
                t.add_link(e, host)
        for e in edges:
            for a in aggs:
                t.add_link(e, a)
        for i, a in enumerate(aggs):
            for j in range(h):
                t.add_link(a, cores[i * h + j])
    return t


def leaf_spine(leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4, kind: str = "p4") -> Topology:
    t = Topology(f"leaf-spine-{leaves}x{spines}")
    for s in range(spines):
        t.add_device(f"spine{s}", kind, "spine")
    for lf in range(leaves):
        t.add_device(f"leaf{lf}", kind, "leaf")
        for j in range(hosts_per_leaf):
            t.add_device(f"h{lf}_{j}", "host")
            t.add_link(f"leaf{lf}", f"h{lf}_{j}")
        for s in range(spines):
            t.add_link(f"leaf{lf}", f"spine{s}")
    return t


def from_edge_list(lines: Iterable[str], kind: str = "p4", hosts_per_leaf: int = 1,
                   name: str = "graph") -> Topology:
    """A general graph (SNAP edge list): every node a device of `kind`; each degree-1 node gets
    `hosts_per_leaf` hosts attached (the graph's edge), so subscribers sit at the periphery."""
    g = nx.Graph()
    for ln in lines:
        ln = ln.strip()
        if not ln or ln.startswith("#"):
            continue
        parts = ln.split()
        if len(parts) < 2:
            raise TopologyError(f"edge list: bad line {ln!r}")
        if parts[0] != parts[1]:
            g.add_edge(parts[0], parts[1])
    if g.number_of_nodes() == 0:
        raise TopologyError("edge list: no edges")
    t = Topology(name)
    for n in sorted(g, key=_natural):
        t.add_device(f"n{n}", kind, "core")
    for a, b in sorted(g.edges(), key=lambda e: (_natural(e[0]), _natural(e[1]))):
        t.add_link(f"n{a}", f"n{b}")
    for n in sorted(g, key=_natural):
        if g.degree(n) == 1:
            t.g.nodes[f"n{n}"]["layer"] = "edge"
            for j in range(hosts_per_leaf):
                t.add_device(f"h{n}_{j}", "host")
                t.add_link(f"n{n}", f"h{n}_{j}")
    return t


def _natural(s: str) -> tuple:
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def random_graph(nodes: int, seed: int = 1, kind: str = "p4") -> Topology:
    """A scale-free graph like AS-level topologies (Barabasi-Albert, m=2), hosts at the degree-1
    nodes added to it (one pendant per 4 nodes) — for the MST comparisons."""
    import random
    g = nx.barabasi_albert_graph(nodes, 2, seed=seed)
    rng = random.Random(seed)
    lines = [f"{a} {b}" for a, b in g.edges()]
    for i in range(nodes // 4):
        lines.append(f"{rng.randrange(nodes)} {nodes + i}")      # pendant stubs: the graph's edge
    return from_edge_list(lines, kind, name=f"ba-{nodes}")
