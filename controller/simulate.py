"""Hop-by-hop delivery of a message through a routed network, every filtering device running
its compiled tables in the reference interpreter (plain switches flood along the tree).

Checks the routing's correctness conditions on real messages: completeness (every host that
wants a message receives it) and soundness at host-facing ports (a host behind a filtering
device receives only what it wants, exact compilation), and counts the link transmissions
that carried a message nobody beyond wanted (false-positive traffic), per layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from camus.compiler.compile import Compiled, compile_rules
from camus.compiler.interpreter import PipelineInterpreter
from camus.compiler.spec import Spec

from .devices import DeviceTables
from .routing import LAYER_RANK, Routing
from .topology import FILTERING


@dataclass
class Delivery:
    received: set[str]
    wanted: set[str]
    transmissions: list[tuple[str, str, bool]] = field(default_factory=list)   # (from, to, useful)


class HostWants:
    """Whether a host's own subscriptions select a message (compiled exactly, per host)."""

    def __init__(self, spec: Spec, subs: dict[str, list[str]]) -> None:
        self.interp: dict[str, PipelineInterpreter] = {}
        for h, fs in subs.items():
            if fs:
                c: Compiled = compile_rules(spec, "\n".join(f"{f} : fwd(1)" for f in fs), f"<{h}>")
                self.interp[h] = PipelineInterpreter(c.pipeline)

    def __call__(self, host: str, values: dict[str, int]) -> bool:
        i = self.interp.get(host)
        return bool(i and i.run(values).actions.ports)


class Simulator:
    def __init__(self, routing: Routing, tables: dict[str, DeviceTables], wants: HostWants) -> None:
        self.r, self.wants = routing, wants
        self.t = routing.topology
        self.interp = {d: PipelineInterpreter(dt.compiled.pipeline) for d, dt in tables.items()}

    def _rank(self, n: str) -> int:
        return LAYER_RANK.get(self.t.layer(n), 0)

    def _next_hops(self, d: str, came_from: str, values: dict[str, int]) -> list[str]:
        cands = [m for m in self.r.tree[d] if m != came_from]
        if self.r.hierarchical:
            from_above = self._rank(came_from) > self._rank(d)
            up = self.r.designated_up.get(d)
            up_peer = self.t.neighbour(d, up) if up is not None else None
            cands = [m for m in cands if self._rank(m) < self._rank(d) or (m == up_peer and not from_above)]
        if self.t.kind(d) not in FILTERING:
            return cands                                  # plain switch: flood along the tree
        ports = set(self.interp[d].run(values).actions.ports) if d in self.interp else set()
        return [m for m in cands if self.t.port(d, m) in ports]

    def deliver(self, publisher: str, values: dict[str, int]) -> Delivery:
        wanted = {h for h in self.t.hosts if h != publisher and self.wants(h, values)}
        received: set[str] = set()
        children: dict[tuple[str, str], list[tuple[str, str]]] = {}
        edges: list[tuple[str, str]] = []
        first = next(iter(self.t.g[publisher]))
        stack = [(publisher, first)]
        while stack:
            src, dst = stack.pop()
            edges.append((src, dst))
            if self.t.kind(dst) == "host":
                received.add(dst)
                continue
            nxt = [(dst, m) for m in self._next_hops(dst, src, values)]
            children[(src, dst)] = nxt
            stack.extend(nxt)
        useful: dict[tuple[str, str], bool] = {}
        for e in reversed(edges):                         # children are visited after parents
            useful[e] = (self.t.kind(e[1]) == "host" and e[1] in wanted) or any(useful[c] for c in children.get(e, ()))
        return Delivery(received, wanted, [(a, b, useful[(a, b)]) for a, b in edges])


def check(sim: Simulator, publisher: str, values: dict[str, int], exact: bool = True) -> Delivery:
    """Deliver and assert the correctness conditions (AssertionError says which host)."""
    d = sim.deliver(publisher, values)
    missing = d.wanted - d.received
    assert not missing, f"incomplete: {sorted(missing)} want {values} from {publisher} but did not get it"
    if exact:
        t = sim.t
        for h in d.received - d.wanted:
            dev = next(iter(t.g[h]))
            assert t.kind(dev) not in FILTERING, f"unsound: {h} behind filtering {dev} got an unwanted {values}"
    return d
