from __future__ import annotations

import pytest

from camus.bench.workloads import itch_rules
from camus.compiler.compile import compile_rules
from camus.compiler.structure.diagram import EMPTY_LEAF, Branch, DiagramBuilder, DiagramTooLarge
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS

ITCH = load_spec(APPS / "itch" / "itch.p4")


def tables(c) -> dict[str, int]:
    return {t.name: len(t.states) for t in c.pipeline.tables}


def test_redundant_tests_disappear() -> None:
    c = compile_rules(ITCH, "price > 5 or price <= 5 : fwd(1)\nstock == A and not stock == A : fwd(2)\n")
    assert c.pipeline.tables == []                       # no test left: every message -> fwd(1)
    assert c.pipeline.leaves[c.root].ports == (1,)


def test_isomorphic_subdiagrams_are_one_state() -> None:
    c = compile_rules(ITCH, "stock == A and price > 5 : fwd(1)\nstock == B and price > 5 : fwd(1)\n"
                            "stock == C and price > 9 : fwd(1)\n")
    assert tables(c) == {"add_order.stock": 1, "add_order.price": 2}


def test_each_field_is_tested_once_per_path() -> None:
    c = compile_rules(ITCH, "stock == A and price > 5 and price < 100 and price != 50 : fwd(1)\n")
    price = next(t for t in c.pipeline.tables if t.name == "add_order.price")
    assert len(price.states) == 1
    assert sorted((e.match[1], e.match[2]) for e in price.entries) == [(6, 49), (51, 99)]


def test_itch_workload_shape() -> None:
    c = compile_rules(ITCH, "\n".join(itch_rules(2000, seed=3)))
    assert tables(c)["add_order.stock"] == 1
    assert tables(c)["add_order.price"] == 100           # one price ladder per symbol
    stock = next(t for t in c.pipeline.tables if t.name == "add_order.stock")
    assert stock.kind == "exact" and len(stock.entries) == 100
    # price > P only: ranges run to the top of the domain and nothing maps to "nobody" twice
    price = next(t for t in c.pipeline.tables if t.name == "add_order.price")
    assert price.kind == "range" and all(e.next != EMPTY_LEAF for e in price.entries)


def test_node_ids_are_stable_across_compilations_with_one_builder() -> None:
    first = "stock == A and price > 5 : fwd(1)\nstock == B and price > 7 : fwd(2)\n"
    c1 = compile_rules(ITCH, first)
    builder = c1.builder
    nodes_before = dict(builder.nodes)
    c2 = compile_rules(ITCH, first + "stock == C and price > 9 : fwd(3)\n", builder=builder)
    assert {n: builder.nodes[n] for n in nodes_before} == nodes_before     # nothing renumbered
    old_price = {s for t in c1.pipeline.tables if t.name == "add_order.price" for s in t.states}
    new_price = {s for t in c2.pipeline.tables if t.name == "add_order.price" for s in t.states}
    assert old_price < new_price                                  # old states reused, one added


def test_builder_hash_conses_leaves() -> None:
    b = DiagramBuilder([8])
    assert b.leaf(frozenset({("fwd", 1)})) == b.leaf(frozenset({("fwd", 1)}))
    assert b.leaf(frozenset({("fwd", 1), ("drop",)})) == b.leaf(frozenset({("drop",)}))
    assert b.leaf(frozenset()) == EMPTY_LEAF
    root = b.build([({0: ((3, 3),)}, frozenset({("fwd", 1)}))], [0])
    assert isinstance(b.nodes[root], Branch) and b.nodes[root].edges[1] == (3, 3, 1)


def test_a_memo_bound_gives_up_a_build_whose_nodes_stay_few() -> None:
    """Sub-diagrams that collapse into nodes already made cost work but no nodes: a trial build
    (the switch cover's) is bounded by its memo too."""
    terms = [({0: ((i, i),), 1: ((j, j),)}, frozenset({("fwd", 1)})) for i in range(30) for j in range(0, 60, 2)]
    free = DiagramBuilder([8, 8], max_memo=1000)
    free.build(terms, [0, 1])
    assert len(free.nodes) < 10                                   # few nodes,
    with pytest.raises(DiagramTooLarge):                          # more work: 30 sub-diagrams of 30 terms
        DiagramBuilder([8, 8], max_memo=25).build(terms, [0, 1])
    assert free.memo_size() == 0           # a one-off build lets its memo go (the next starts afresh)


def test_collect_forgets_only_what_no_root_reaches() -> None:
    c1 = compile_rules(ITCH, "stock == A and price > 5 : fwd(1)\nstock == B and price > 7 : fwd(2)\n")
    b: DiagramBuilder = c1.builder
    c2 = compile_rules(ITCH, "stock == A and price > 5 : fwd(1)\nstock == C and price > 9 : fwd(3)\n", builder=b)
    reach = {n for c in (c2,) for t in c.pipeline.tables for n in t.states} | set(c2.pipeline.leaves)
    stale = set(b.nodes) - reach - {c2.root, 0}
    assert stale                                                 # c1's root and B's branch
    assert b.collect([c2.root], force=True) == len(stale)
    assert set(b.nodes) >= reach and not stale & set(b.nodes)
    again = compile_rules(ITCH, "stock == A and price > 5 : fwd(1)\nstock == C and price > 9 : fwd(3)\n", builder=b)
    assert again.root == c2.root                                 # the memo still answers for kept nodes
    back = compile_rules(ITCH, "stock == A and price > 5 : fwd(1)\nstock == B and price > 7 : fwd(2)\n", builder=b)
    assert back.root not in stale and back.root > max(stale)     # forgotten ids are never reused
