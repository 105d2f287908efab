"""The live routing (one subscription at a time) against `route()` on the whole set, after
every step of random add/remove sequences, on every policy, with partial deployment and
stateful filters (covers upstream, exact at the last hop); the device digests do not depend
on the order subscriptions arrived in; the controller pushes line deltas an agent applies."""
from __future__ import annotations

import random
from collections import Counter

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.compile import CompileOptions
from camus.controller.core import Controller
from camus.controller.devices import DeviceCompiler
from camus.controller.live_routing import LiveRouting, rules_digest
from camus.controller.routing import route
from camus.controller.topology import Topology, fat_tree, from_edge_list, leaf_spine
from tests.controller.test_routing import POOL, SPEC, STATEFUL


def _topology(kind: str, seed: int) -> Topology:
    if kind == "fat":
        return fat_tree(4)
    if kind == "leafspine":
        return leaf_spine(leaves=3, spines=2, hosts_per_leaf=2)
    rng = random.Random(seed)
    n = rng.randint(3, 12)
    g = nx.random_labeled_tree(n, seed=seed) if hasattr(nx, "random_labeled_tree") else nx.random_tree(n, seed=seed)
    t = from_edge_list([f"{a} {b}" for a, b in g.edges()], hosts_per_leaf=2)
    for d in t.devices:
        if rng.random() < 0.3:
            t.g.nodes[d]["kind"] = "plain"            # partial deployment
    return t


def _same(live: LiveRouting, subs: dict[str, list[str]], t: Topology, policy: str, alpha: int) -> None:
    scratch = route(t, subs, policy)
    view = live.view()
    for d in scratch.filters:
        assert {p: set(fs) for p, fs in view.filters[d].items()} == \
               {p: set(fs) for p, fs in scratch.filters[d].items()}, d
        assert {p: e for p, e in view.exact.get(d, {}).items() if e} == \
               {p: e for p, e in scratch.exact.get(d, {}).items() if e}, d
        rules, exact = scratch.device_rule_set(d)
        assert Counter(live.rules(d).splitlines()) == Counter(rules.splitlines()), d
        assert live.digest(d) == rules_digest(rules.splitlines(), exact if alpha > 1 else ()), d


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(["fat", "leafspine", "tree"]),
       policy=st.sampled_from(["mr", "tr", "mst", "mst++"]), alpha=st.sampled_from([1, 100]))
def test_live_routing_equals_route_after_every_change(seed: int, shape: str, policy: str, alpha: int) -> None:
    if shape == "tree" and policy in ("mr", "tr"):
        policy = "mst"                                 # edge lists have no layers
    t = _topology(shape, seed)
    rng = random.Random(seed)
    live = LiveRouting(t, policy, track_exact=alpha > 1)
    subs: dict[str, list[str]] = {h: [] for h in t.hosts}
    pool = POOL + STATEFUL
    for _ in range(30):
        h = rng.choice(t.hosts)
        if subs[h] and rng.random() < 0.45:
            f = subs[h].pop(rng.randrange(len(subs[h])))
            live.change(h, f, -1)
        else:
            f = rng.choice(pool)                       # repeats too: a filter wanted twice
            subs[h].append(f)
            live.change(h, f, +1)
        _same(live, subs, t, policy, alpha)


def test_line_changes_are_net_and_digests_ignore_arrival_order() -> None:
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    a, b = LiveRouting(t, "mr"), LiveRouting(t, "mr")
    a.take_changes()
    a.change("h0_0", "stock == GOOGL", +1)
    a.change("h0_0", "price > 5", +1)
    a.change("h0_0", "price > 5", +1)                  # wanted twice: still one line
    a.change("h0_0", "price > 5", -1)
    got = a.take_changes()
    assert sorted(got["leaf0"].added) == ["price > 5 : fwd(1)", "stock == GOOGL : fwd(1)"] and not got["leaf0"].removed
    b.change("h0_0", "price > 5", +1)
    b.change("h0_0", "stock == GOOGL", +1)
    assert a.digest("leaf0") == b.digest("leaf0") and a.rules("leaf0") != b.rules("leaf0")
    a.change("h0_0", "stock == GOOGL", -1)
    a.change("h0_0", "stock == GOOGL", +1)
    assert all(not c.added and not c.removed for c in a.take_changes().values())     # net nothing
    before = ({d: a.digest(d) for d in a.devices}, a.view().filters)
    try:
        a.change("h1_0", "stock == GOOGL", -1)
        raise AssertionError("removing what nobody wanted must raise")
    except KeyError:
        pass
    assert ({d: a.digest(d) for d in a.devices}, a.view().filters) == before       # and changes nothing


def test_device_compiler_and_live_routing_agree_on_digests() -> None:
    t = fat_tree(4)
    rng = random.Random(3)
    subs = {h: rng.sample(POOL, 2) for h in t.hosts}
    live = LiveRouting(t, "mr")
    for h, fs in reversed(list(subs.items())):
        for f in fs:
            live.change(h, f, +1)
    tables = DeviceCompiler(SPEC, CompileOptions()).compile(route(t, subs, "mr"))
    assert {d: tb.digest for d, tb in tables.items()} == {d: live.digest(d) for d in tables}


class Agentish:
    """A push target that keeps rule lines as an agent does: a delta applies only on the base
    it was made for, else the whole set is sent (as AgentTarget falls back on 409)."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, Counter[str]]] = {}
        self.deltas = self.wholes = 0

    def push(self, device, tables) -> str:
        got = self.held.get(device)
        d = tables.delta
        if d is not None and got is not None and got[0] == d.base:
            lines = Counter(got[1])
            lines.update(d.added)
            lines.subtract(d.removed)
            self.held[device] = (tables.digest, +lines)
            self.deltas += 1
        else:
            self.held[device] = (tables.digest, Counter(tables.rules.splitlines()))
            self.wholes += 1
        return "ok"


def test_controller_pushes_deltas_that_rebuild_the_whole_set() -> None:
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, kind="xdp")
    agent = Agentish()
    ctl = Controller(t, SPEC, "tr", targets={d: agent for d in t.devices})
    ctl.push_pending()
    rng = random.Random(7)
    mine: list[tuple[str, str]] = []
    for step in range(40):
        if mine and rng.random() < 0.4:
            host, sid = mine.pop(rng.randrange(len(mine)))
            ctl.remove(host, sid)
        else:
            host = rng.choice(t.hosts)
            mine.append((host, ctl.add(host, rng.choice(POOL), 60).id))
        if step % 3 == 0:
            ctl.push_pending()
    ctl.push_pending()
    assert agent.deltas > 0 and agent.wholes == len(ctl.tables)          # whole sets only at first
    for d, tb in ctl.tables.items():
        assert agent.held[d][0] == tb.digest == ctl.devices[d].applied
        assert agent.held[d][1] == Counter(tb.rules.splitlines())
