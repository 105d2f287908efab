"""The bit-vector stage's layouts (structure/bv_layout.py): port columns and their runs, the
choice between columns and planes, moving columns to a data plane's port numbering, and the
IR's checks of a column layout. The kernel runs the same layouts in
tests/dataplane/test_xdp_bitvector.py."""
from __future__ import annotations

import json
import random

import pytest

from camus.bench.workloads import siena_message, siena_rules, siena_schema
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.codec.packets import message_from_text
from camus.compiler.ir.pipeline import BitvectorStage
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.structure.bitvector import union_actions
from camus.compiler.structure.bv_layout import preferred_ports, reorder_columns

SIENA = siena_schema(10)
SPEC = parse_spec(SIENA.spec_text(), "siena.p4")


def _compiled(n: int, hosts: int, layout: str = "auto", seed: int = 1, mixed: bool = True):
    rules = siena_rules(n, SIENA, seed=seed, n_hosts=hosts, max_constraints=3)
    rng = random.Random(seed)
    for i in range(0, len(rules) if mixed else 0, 9):   # some to two ports, one drop
        rules[i] = rules[i].replace(" : ", f" : fwd({rng.randint(1, hosts)}), ", 1)
    if mixed:
        rules.append(rules[3].split(" : ")[0] + " : drop")
    return compile_rules(SPEC, "\n".join(rules), options=CompileOptions(strategy="bitvector", bv_layout=layout))


def _same_deliveries(a: BitvectorStage, b: BitvectorStage, leaves, count: int = 150) -> None:
    rng = random.Random(5)
    for _ in range(count):
        m = message_from_text(SPEC, siena_message(SIENA, rng))
        assert union_actions(a, a.matching(m)[0], leaves) == union_actions(b, b.matching(m)[0], leaves)


def test_many_port_sets_get_port_columns_and_few_get_planes() -> None:
    many = _compiled(1000, 200).pipeline.bitvector
    assert many is not None and many.columns is not None and not many.planes
    few = _compiled(1000, 16, mixed=False).pipeline.bitvector       # 16 actions: one plane settles them
    assert few is not None and few.columns is None and few.planes


def test_columns_and_planes_deliver_alike_and_every_column_forwards_to_its_port() -> None:
    cols = _compiled(600, 120, "columns")
    planes = _compiled(600, 120, "planes")
    a, b = cols.pipeline.bitvector, planes.pipeline.bitvector
    assert a is not None and b is not None and a.columns is not None
    cols.pipeline.validate()            # every term in a column or run forwards to its port
    rng = random.Random(2)
    for _ in range(150):
        m = message_from_text(SPEC, siena_message(SIENA, rng))
        assert union_actions(a, a.matching(m)[0], cols.pipeline.leaves) == \
            union_actions(b, b.matching(m)[0], planes.pipeline.leaves)


def test_a_ports_file_order_moves_whole_columns_and_runs_with_the_same_deliveries() -> None:
    c = _compiled(2000, 40, "columns")          # 50 terms a port: columns cut, runs after them
    bv = c.pipeline.bitvector
    assert bv is not None and bv.columns is not None and bv.columns.run_bits > 0
    ports = list(bv.columns.ports) + ["spare"]
    random.Random(3).shuffle(ports)
    moved = reorder_columns(bv, {p: i for i, p in enumerate(ports)})
    assert moved.columns is not None and moved.columns.ports == ports
    moved.validate(c.pipeline.leaves)
    _same_deliveries(bv, moved, c.pipeline.leaves)
    # a data plane free to number its ports takes the stage's order: nothing moves
    assert preferred_ports(bv, sorted(ports, key=str))[:len(bv.columns.ports)] == bv.columns.ports


def test_the_ir_refuses_a_column_holding_another_ports_term_and_keeps_columns_in_json() -> None:
    c = _compiled(300, 100, "columns")
    bv = c.pipeline.bitvector
    assert bv is not None and bv.columns is not None
    back = BitvectorStage.from_json(json.loads(json.dumps(bv.to_json())))
    assert back.columns == bv.columns and back.term_leaf == bv.term_leaf
    cols = bv.columns
    t = next(t for t in range(64) if bv.term_leaf[t])        # a term in the first group's first word
    other = next(p for p in cols.ports if p not in c.pipeline.leaves[bv.term_leaf[t]].ports)
    swapped = list(cols.ports)
    i = swapped.index(other)
    swapped[t], swapped[i] = swapped[i], swapped[t]
    bad = BitvectorStage(bv.terms, bv.fields, bv.bitmaps, bv.term_leaf, [], type(cols)(swapped, cols.layers, cols.runs))
    with pytest.raises(ValueError, match="column of a port it does not forward to|run holds a term of another port"):
        bad.validate(c.pipeline.leaves)


def test_every_column_layout_fits_the_program_for_its_fields() -> None:
    """The compiler's bound on a layout's walk is what an XDP program with that many query
    fields holds (the verifier's budget), so a chosen layout always attaches."""
    from camus.compiler.backends.ebpf.program import MAX_QUERY_FIELDS, max_bv_columns_for
    from camus.compiler.structure.bv_layout import column_steps
    assert all(column_steps(n) <= max_bv_columns_for(n) for n in range(1, MAX_QUERY_FIELDS + 1))
