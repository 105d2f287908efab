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
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.language.spec import Spec

from .devices import DeviceTables
from .routing import Routing
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

    def __call__(self, host: str, values: dict[str, int], now_us: int = 0) -> bool:
        i = self.interp.get(host)
        return bool(i and i.run(values, now_us).actions.ports)


class Simulator:
    def __init__(self, routing: Routing, tables: dict[str, DeviceTables], wants: HostWants) -> None:
        self.r, self.wants = routing, wants
        self.t = routing.topology
        self.interp = {d: PipelineInterpreter(dt.compiled.pipeline) for d, dt in tables.items()}

    def _next_hops(self, d: str, came_from: str, values: dict[str, int], now_us: int) -> list[str]:
        cands = self.r.flood_hops(d, came_from)
        if self.t.kind(d) not in FILTERING:
            return cands                                  # plain switch: flood along the tree
        ports = set(self.interp[d].run(values, now_us).actions.ports) if d in self.interp else set()
        return [m for m in cands if self.t.port(d, m) in ports]

    def deliver(self, publisher: str, values: dict[str, int], now_us: int = 0) -> Delivery:
        """One message hop by hop. Stateful filters: every host's own view is updated (the
        publisher's too, as its last-hop device sees the message), and `now_us` moves windows."""
        wanted = {h for h in self.t.hosts if self.wants(h, values, now_us) and h != publisher}
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
            nxt = [(dst, m) for m in self._next_hops(dst, src, values, now_us)]
            children[(src, dst)] = nxt
            stack.extend(nxt)
        useful: dict[tuple[str, str], bool] = {}
        for e in reversed(edges):                         # children are visited after parents
            useful[e] = (self.t.kind(e[1]) == "host" and e[1] in wanted) or any(useful[c] for c in children.get(e, ()))
        return Delivery(received, wanted, [(a, b, useful[(a, b)]) for a, b in edges])


def check(sim: Simulator, publisher: str, values: dict[str, int], exact: bool = True,
          now_us: int = 0) -> Delivery:
    """Deliver and assert the correctness conditions (AssertionError says which host)."""
    d = sim.deliver(publisher, values, now_us)
    missing = d.wanted - d.received
    assert not missing, f"incomplete: {sorted(missing)} want {values} from {publisher} but did not get it"
    if exact:
        t = sim.t
        for h in d.received - d.wanted:
            dev = next(iter(t.g[h]))
            assert t.kind(dev) not in FILTERING, f"unsound: {h} behind filtering {dev} got an unwanted {values}"
    return d
