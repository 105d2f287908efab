"""The bit-vector stage in the kernel: the XDP program, loaded for real and driven with
BPF_PROG_TEST_RUN, against the rules themselves and the IR interpreter, on random
multi-attribute rule sets (Hypothesis) and on the 10-attribute Siena-style workload at its
interval boundaries; a bank flip between a diagram rule set and a bit-vector one."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.bench.workloads import siena_message, siena_rules, siena_schema
from camus.compiler.backends.ebpf.bitvector import STATE_BV
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.backends.ebpf.contents import CapacityError
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.semantics.filter_eval import FilterEvaluator, outcome
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import parse_spec
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.compiler.strategies import messages, rule_files
from tests.dataplane.test_xdp_kernel import SPECS, load_random_spec_programs

pytestmark = pytest.mark.bpf
LIMITS = EbpfLimits(max_msgs=12, max_states=1 << 13, max_exact=1 << 13, max_bounds=1 << 14,
                    max_lpm=1 << 12, max_updates=256, bv_words=64, max_bv_bitmaps=4096, max_bv_segs=256,
                    bv_columns=128)
BV = CompileOptions(strategy="bitvector")
SIENA = siena_schema(10)


@pytest.fixture(scope="module")
def programs():
    loaded = load_random_spec_programs(LIMITS)
    spec = parse_spec(SIENA.spec_text(), "siena.p4")
    loaded["siena"] = (None, spec, XdpProgram.load(spec, LIMITS))
    yield loaded
    for _, _, prog in loaded.values():
        prog.close()


def check(prog: XdpProgram, compiled, contents, interp, pkt: bytes) -> None:
    """Verdict as the reference says; every message's ports and drop as the IR's."""
    want = expected_verdict(compiled.spec, interp, pkt, LIMITS.max_msgs)
    got = prog.classify(pkt)
    assert got.verdict == want.verdict, (want.category, pkt.hex())
    for i, (_, actions) in want.messages.items():
        state, flags, words = got.messages[i]
        assert state == STATE_BV
        assert sorted(map(str, contents.ports_of(words))) == sorted(map(str, actions.ports)), (i, pkt.hex())
        assert bool(flags & 1) == actions.drop


@settings(max_examples=300, deadline=None)
@given(data=st.data(), which=st.sampled_from(sorted(SPECS)), bank=st.sampled_from([0, 1]),
       layout=st.sampled_from(["auto", "planes", "columns"]))
def test_bitvector_in_the_kernel_matches_rules_and_ir(programs, data, which, bank, layout) -> None:
    sd, spec, prog = programs[which]
    rules = data.draw(rule_files(sd), label="rules")
    compiled = compile_rules(spec, rules, options=CompileOptions(strategy="bitvector", bv_layout=layout))
    interp = PipelineInterpreter(compiled.pipeline)
    direct = FilterEvaluator(compiled.rules, compiled.lowered)
    contents = map_contents(compiled.pipeline, spec, LIMITS, bank=bank)
    prog.write(contents)
    try:
        for _ in range(3):
            batch = data.draw(messages(sd, n=data.draw(st.integers(1, 12 if sd.mold else 1))), label="msgs")
            for m in batch:                          # the IR is the rules (the kernel is checked against it)
                assert outcome(interp.run(m).actions) == outcome(direct.run(m))
            check(prog, compiled, contents, interp, build_packet(spec, batch))
    finally:
        prog.remove(contents)


@pytest.mark.parametrize("n", [50, 1000, 4000])
def test_siena_workload_at_every_boundary(programs, n) -> None:
    _, spec, prog = programs["siena"]
    compiled = compile_rules(spec, "\n".join(siena_rules(n, SIENA, seed=n)))
    assert compiled.pipeline.bitvector is not None          # the cost model picks bit vectors
    interp = PipelineInterpreter(compiled.pipeline)
    contents = map_contents(compiled.pipeline, spec, LIMITS, bank=1)
    prog.write(contents)
    rng = random.Random(n)
    try:
        base = message_from_text(spec, siena_message(SIENA, rng))
        edges = sorted({s + d for f in compiled.pipeline.bitvector.fields if not f.name.endswith(SIENA.str_attrs)
                        for s in f.starts for d in (-1, 0) if s + d >= 0})
        name = next(f.name for f in compiled.pipeline.bitvector.fields if not f.name.endswith(SIENA.str_attrs))
        edges = edges[:200] + [edges[-1] + 1, edges[-1] + 1000, (1 << 32) - 1]   # past a direct table's end
        for v in edges:                                      # interval boundaries of one numeric field
            check(prog, compiled, contents, interp, build_packet(spec, [{**base, name: v}]))
        for _ in range(150):
            check(prog, compiled, contents, interp,
                  build_packet(spec, [message_from_text(spec, siena_message(SIENA, rng))]))
    finally:
        prog.remove(contents)


def test_flip_between_diagram_and_bit_vectors(programs) -> None:
    """A diagram table set in one bank, a bit-vector one in the other: the root flip switches
    whole table sets, either way round."""
    _, spec, prog = programs["siena"]
    rules = "\n".join(siena_rules(12, SIENA, seed=3))
    rng = random.Random(3)
    pkts = [build_packet(spec, [message_from_text(spec, siena_message(SIENA, rng))]) for _ in range(60)]
    for first, second in (("bdd", "bitvector"), ("bitvector", "bdd")):
        a = compile_rules(spec, rules, options=CompileOptions(strategy=first))
        b = compile_rules(spec, rules, options=CompileOptions(strategy=second))
        ca, cb = map_contents(a.pipeline, spec, LIMITS, bank=0), map_contents(b.pipeline, spec, LIMITS, bank=1)
        prog.write(ca)
        want = [tuple(sorted(ca.ports_of(m[2]) for m in [prog.classify(p).messages[0]])) for p in pkts]
        prog.write(cb)                                       # written beside, then the root flips
        got = [tuple(sorted(cb.ports_of(m[2]) for m in [prog.classify(p).messages[0]])) for p in pkts]
        prog.remove(ca)
        assert got == want
        prog.remove(cb)


def test_too_many_terms_are_refused_before_anything_changes(programs) -> None:
    _, spec, _ = programs["siena"]
    compiled = compile_rules(spec, "\n".join(siena_rules(64 * 64 + 500, SIENA, seed=1)), options=BV)
    with pytest.raises(CapacityError, match="words per bitmap"):
        map_contents(compiled.pipeline, spec, LIMITS, bank=0)


def test_fields_beyond_the_segment_loop_are_anded_per_word_first() -> None:
    """A spec with more query fields than the segment loop ANDs (BV_LOOP_FIELDS): the rest go
    through the word pass; the kernel still agrees with the IR on every message, including
    messages that differ from a matching one only in a late field."""
    from camus.compiler.backends.ebpf.program import BV_LOOP_FIELDS
    schema = siena_schema(BV_LOOP_FIELDS + 4)
    spec = parse_spec(schema.spec_text(), "siena14.p4")
    prog = XdpProgram.load(spec, LIMITS)
    try:
        compiled = compile_rules(spec, "\n".join(siena_rules(600, schema, seed=5, zipf=False)), options=BV)
        interp = PipelineInterpreter(compiled.pipeline)
        contents = map_contents(compiled.pipeline, spec, LIMITS, bank=0)
        prog.write(contents)
        rng = random.Random(5)
        late = [f.path for f in spec.query_fields[BV_LOOP_FIELDS:]]
        assert late
        for _ in range(120):
            m = message_from_text(spec, siena_message(schema, rng))
            check(prog, compiled, contents, interp, build_packet(spec, [m]))
            for name in late:                        # the same message, one late field changed
                other = message_from_text(spec, siena_message(schema, rng))
                check(prog, compiled, contents, interp, build_packet(spec, [{**m, name: other[name]}]))
    finally:
        prog.close()


def test_twenty_thousand_filters_run_in_the_kernel() -> None:
    """Past the 256-word bitmaps of the old word loop: 20,000 Siena filters (about 20K terms),
    limits sized from the rule set as attach does, the kernel against the IR."""
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    spec = parse_spec(SIENA.spec_text(), "siena.p4")
    compiled = compile_rules(spec, "\n".join(siena_rules(20_000, SIENA, seed=9)), options=BV)
    assert compiled.pipeline.bitvector.words > 256
    lim = sized_limits(compiled.pipeline, EbpfLimits(max_msgs=1), len(spec.query_fields))
    prog = XdpProgram.load(spec, lim)
    try:
        contents = map_contents(compiled.pipeline, spec, lim, bank=1)
        prog.write(contents)
        interp = PipelineInterpreter(compiled.pipeline)
        rng = random.Random(9)
        for _ in range(100):
            pkt = build_packet(spec, [message_from_text(spec, siena_message(SIENA, rng))])
            want = expected_verdict(spec, interp, pkt, 1)
            got = prog.classify(pkt)
            assert got.verdict == want.verdict
            for i, (_, actions) in want.messages.items():
                assert contents.ports_of(got.messages[i][2]) == tuple(actions.ports)
    finally:
        prog.close()


@pytest.mark.parametrize("n, hosts, count", [(400, 16, 0), (400, 16, 64), (400, 100, 0), (400, 100, 64),
                                             (700, 250, 64)])
def test_prefix_and_leaf_walk_agree_with_the_ir_and_count_each_rule_once(programs, n, hosts, count) -> None:
    """The prefix (one bit per leaf, a plane's leaves settled at once when all match) with one
    plane (16 actions), with two (100 actions: 64 + 36, or 80 and 164 with 64 counted rules),
    and with more actions than four planes hold (~300: the rest walked for them); with
    per-rule counters (settled leaf by leaf) and without (the union made ahead): the kernel's
    ports are the IR's, and each counted rule's hits are the number of messages it matched."""
    _, spec, prog = programs["siena"]
    rules = siena_rules(n, SIENA, seed=hosts + count, n_hosts=hosts, max_constraints=3)
    compiled = compile_rules(spec, "\n".join(rules), options=CompileOptions(strategy="bitvector",
                                                                             count_rules=count, bv_layout="planes"))
    bv = compiled.pipeline.bitvector
    assert bv is not None and len(bv.planes) == min(4, -(-len(compiled.pipeline.leaves) // 64))
    interp = PipelineInterpreter(compiled.pipeline)
    contents = map_contents(compiled.pipeline, spec, LIMITS, bank=0)
    prog.write(contents)
    prog.maps.clear_leaf_hits(sorted(contents.leaf))
    rng = random.Random(hosts)
    want = [0] * count
    try:
        for _ in range(150):
            m = message_from_text(spec, siena_message(SIENA, rng))
            check(prog, compiled, contents, interp, build_packet(spec, [m]))
            for r in interp.run(m).actions.rules:     # the counted rules the message matched
                want[r] += 1
        hits = prog.maps.leaf_hits(sorted(contents.leaf_rules))
        got = [0] * count
        for s, rs in contents.leaf_rules.items():
            for r in rs:
                got[r] += hits[s]
        assert got == want and (not count or sum(want) > 0)
    finally:
        prog.remove(contents)


@pytest.mark.parametrize("hosts, shuffle", [(250, False), (250, True), (40, True)])
def test_port_columns_agree_with_the_ir_for_hundreds_of_port_sets(programs, hosts, shuffle) -> None:
    """Port columns (each word's AND is the ports it delivers) on a Siena rule set over `hosts`
    ports with rules forwarding to two ports, drops and counted rules (walked leaf by leaf after
    the columns): the kernel's ports and drops are the IR's, message by message at the rules'
    boundaries; with the ports in another order than the compiler's (a ports file's), the
    columns are moved to the ports' bits and still agree."""
    _, spec, prog = programs["siena"]
    rng = random.Random(hosts)
    rules = siena_rules(700, SIENA, seed=hosts, n_hosts=hosts, max_constraints=3)
    for i in range(0, len(rules), 7):                  # a seventh to two ports, a few drops
        rules[i] = rules[i].replace(" : ", " : fwd(%d), " % rng.randint(1, hosts), 1)
    rules += [r.split(" : ")[0] + " : drop" for r in rules[1:40:13]]
    compiled = compile_rules(spec, "\n".join(rules), options=CompileOptions(
        strategy="bitvector", bv_layout="columns", count_rules=5))
    bv = compiled.pipeline.bitvector
    assert bv is not None and bv.columns is not None and len({a.ports for a in compiled.pipeline.leaves.values()}) > 200 \
        or hosts < 200
    ports = list(bv.columns.ports) + ["spare-a", "spare-b"]
    if shuffle:
        random.Random(3).shuffle(ports)
    lim = LIMITS
    contents = map_contents(compiled.pipeline, spec, lim, ports=ports, bank=1)
    assert contents.bv_cols
    prog.write(contents)
    interp = PipelineInterpreter(compiled.pipeline)
    try:
        msgs = [message_from_text(spec, siena_message(SIENA, rng)) for _ in range(120)]
        for k in range(0, len(msgs), 12):
            check(prog, compiled, contents, interp, build_packet(spec, msgs[k:k + 12]))
    finally:
        prog.remove(contents)


@pytest.mark.parametrize("layout, count", [("planes", 0), ("planes", 64), ("columns", 0)])
def test_a_program_of_a_thousand_ports_agrees_with_the_ir(layout, count) -> None:
    """Port sets of 16 words (filters over more than 512 ports): leaves held as their one port word and its
    index (bv_unite_leaf), a leaf over several words (WIDE), counted leaves settled one by one,
    and port columns over eleven 64-port groups: the kernel's ports are the IR's, message by
    message (the packet's ports united in camus_finish)."""
    from camus.compiler.backends.ebpf.tables import sized_contents
    spec = parse_spec(SIENA.spec_text(), "siena.p4")
    import re
    rules = siena_rules(440, SIENA, seed=3, n_hosts=800, max_constraints=3)
    # every other rule forwards to a second port 800 above its first (two words: WIDE); the
    # rest to one port (its word and index): over 512 ports, the program takes 16 words
    rules = [re.sub(r"fwd\((\d+)\)", lambda m: f"fwd({m[1]}, {int(m[1]) + 800})", r) if k % 2 else r
             for k, r in enumerate(rules)]
    rules.append(f"{rules[0].split(':')[0].strip()} : fwd(1, 100, 900)")        # ports in three words
    compiled = compile_rules(spec, "\n".join(rules), options=CompileOptions(strategy="bitvector", bv_layout=layout,
                                                                             count_rules=count))
    bv = compiled.pipeline.bitvector
    assert bv is not None and (bv.columns is not None) == (layout == "columns")
    lim, contents = sized_contents(compiled.pipeline, spec)
    assert lim.port_words == 16
    prog = XdpProgram.load(spec, lim)
    try:
        prog.write(contents)
        interp = PipelineInterpreter(compiled.pipeline)
        rng = random.Random(7)
        seen: set[int] = set()
        for _ in range(200):
            pkt = build_packet(spec, [message_from_text(spec, siena_message(SIENA, rng))])
            want = expected_verdict(spec, interp, pkt, lim.max_msgs)
            got = prog.classify(pkt)
            assert got.verdict == want.verdict
            for i, (_, actions) in want.messages.items():
                assert sorted(contents.ports_of(got.messages[i][2])) == sorted(actions.ports)   # bits by column
                seen.update(p for p in actions.ports if isinstance(p, int))
        assert max(seen) > 256                           # ports past the narrow program's words
    finally:
        prog.close()
