"""Every back end in the registry, on the same random cases: each one that can run messages
without a kernel delivers what the rules say (ports, drops, calls as far as it carries them),
and each one's artefacts are deterministic. The kernel back end (xdp) is held to the same
cases in tests/dataplane (root)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.base import Backend, BackendError, TargetOptions
from camus.compiler.backends.registry import BACKENDS, backend, engine, explain_layers
from camus.compiler.compile import compile_rules
from camus.compiler.semantics.filter_eval import FilterEvaluator, outcome
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.conftest import APPS

from .strategies import messages, random_specs, rule_files

NO_KERNEL = [b.explain_as for b in BACKENDS.values() if b.explain_as and b.explain_as != "xdp"]


def test_registry_names_every_target_and_layer() -> None:
    assert set(BACKENDS) == {"ir", "ebpf", "p4", "userspace"}
    assert all(issubclass(b, Backend) and b.name == n and b.help for n, b in BACKENDS.items())
    assert set(explain_layers()) == {"filters", "ir", "xdp", "p4", "userspace"}


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_backend_engine_agrees_with_the_rules(data) -> None:
    spec_def = data.draw(random_specs(allow_counter=False), label="spec")
    spec = parse_spec(spec_def.text(), "random.p4")
    rules = data.draw(rule_files(spec_def, state=False), label="rules")
    msgs = data.draw(messages(spec_def), label="messages")
    c = compile_rules(spec, rules, "random.rules")
    direct = FilterEvaluator(c.rules, c.lowered)
    want = [outcome(direct.run(m)) for m in msgs]
    for via in NO_KERNEL:
        try:
            e = engine(via, c)
        except BackendError:
            continue                      # e.g. the userspace tables need byte-aligned fields
        for m, w in zip(msgs, want):
            actions, _ = e.run(m, 0)
            if via == "userspace":        # a userspace broker forwards: ports only
                assert actions.ports == w[0], (via, rules, m)
            else:
                assert outcome(actions) == w, (via, rules, m)


def test_artefacts_are_deterministic_and_named() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    text = (APPS / "itch" / "rules.txt").read_text()
    for name in BACKENDS:
        a = backend(name).build(compile_rules(spec, text), TargetOptions())
        b = backend(name).build(compile_rules(spec, text), TargetOptions())
        assert a.files == b.files and a.emit == b.emit, name
        assert a.emit, name
    assert set(backend("p4").build(compile_rules(spec, text), TargetOptions()).files) >= {
        "camus.p4", "entries.cli", "entries.txtpb", "entries.bfrt.py", "p4info.txtpb"}
    assert "flat_tables.txt" in backend("userspace").build(compile_rules(spec, text), TargetOptions()).files


def test_userspace_refuses_what_it_cannot_carry() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    c = compile_rules(spec, "stock == GOOGL and count(price, my_counter) > 2 : fwd(1)")
    try:
        backend("userspace").build(c, TargetOptions())
    except BackendError as exc:
        assert "stateless" in str(exc)
    else:
        raise AssertionError("stateful rules reached the userspace tables")


def test_xdp_program_limits_follow_the_query_fields() -> None:
    """The verifier's budget: more fields, fewer bit-vector segments; too many fields are
    refused with a message that says what to do, before any program is built."""
    from camus.bench.workloads import siena_schema
    from camus.compiler.backends.emit import BackendError
    from camus.compiler.backends.ebpf.program import EbpfLimits, MAX_QUERY_FIELDS, max_bv_segs_for, program_text
    from camus.compiler.language.spec_parser import parse_spec
    assert max_bv_segs_for(10) == 2048 and max_bv_segs_for(MAX_QUERY_FIELDS) == 1024
    wide = parse_spec(siena_schema(MAX_QUERY_FIELDS + 1).spec_text(), "wide.p4")
    with pytest.raises(BackendError, match=f"at most {MAX_QUERY_FIELDS} query fields"):
        program_text(wide, EbpfLimits())
    spec16 = parse_spec(siena_schema(16).spec_text(), "s16.p4")
    with pytest.raises(BackendError, match="holds at most 1024"):
        program_text(spec16, EbpfLimits(max_bv_segs=2048))
    assert "#define CAMUS_BV_LOOP_FIELDS 10" in program_text(spec16, EbpfLimits())


def test_bitvector_capacity_is_sized_from_the_rule_set_and_fields() -> None:
    """20K multi-attribute filters fit a 10-field host (the segment loop ANDs every field);
    with more fields than the loop holds the word pass bounds the terms, and the refusal says
    how many fit."""
    from camus.bench.workloads import siena_rules, siena_schema
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.compiler.backends.ebpf.contents import CapacityError
    from camus.compiler.compile import CompileOptions
    for n, ok in ((10, True), (14, False)):
        schema = siena_schema(n)
        spec = parse_spec(schema.spec_text(), "s.p4")
        c = compile_rules(spec, "\n".join(siena_rules(20_000, schema, seed=2)),
                          options=CompileOptions(strategy="bitvector"))
        if ok:
            lim = sized_limits(c.pipeline, EbpfLimits(), n)
            assert lim.bv_words >= c.pipeline.bitvector.words and lim.bv_words & (lim.bv_words - 1) == 0
            assert lim.max_bv_bitmaps * lim.bv_words * 8 <= 512 << 20
        else:
            with pytest.raises(CapacityError, match="classifies at most 16384"):
                sized_limits(c.pipeline, EbpfLimits(), n)


def test_switch_exact_key_misses_values_no_interval_holds() -> None:
    """A range table the diagram built on a `query_field_exact` field, whose intervals leave
    values out (`f3 != 65534 and f3 != 65535`): the switch's exact entries and default must not
    stretch the widest interval over those values (the switch dropped 65535 here)."""
    spec = parse_spec("""
header msg_t { bit<16> f3; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; msg_t msg; }
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
                bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
@pragma udp_port(7000)
@pragma query_field_exact(msg.f3)
""", "exact.p4")
    for rules in ("f3 != 65534 and f3 != 65535 : drop", "f3 != 0 and f3 != 7 : fwd(1)", "f3 == 11 or f3 == 12 : fwd(2)"):
        c = compile_rules(spec, rules + "\n", "r")
        direct, switch = FilterEvaluator(c.rules, c.lowered), engine("p4", c)
        for v in (0, 1, 7, 10, 11, 65533, 65534, 65535):
            assert outcome(switch.run({"msg.f3": v}, 0)[0]) == outcome(direct.run({"msg.f3": v})), (rules, v)


def test_not_equal_to_a_prefix_is_outside_it() -> None:
    """`ipv4.dst != 10.0.0.0/8` selects the addresses outside 10/8 (it was once lowered as `==`):
    the reference evaluator and every back end that runs messages agree."""
    spec = load_spec(APPS / "ipfwd" / "ipfwd.p4")
    text = "ipv4.dst != 10.0.0.0/8 : fwd(1)\nipv4.dst != 0.0.0.0/0 : fwd(2)\n"
    c = compile_rules(spec, text)
    for addr, want in ((0x0A010203, ()), (0x0B000001, (1,)), (0, (1,))):
        m = {q.path: 0 for q in spec.query_fields} | {"ipv4.dst": addr}
        assert outcome(FilterEvaluator(c.rules, c.lowered).run(m, 0))[0] == want
        for layer in ("ir", "p4"):                 # (the userspace brokers read message fields only)
            assert engine(layer, c).run(m, 0)[0].ports == want, (layer, hex(addr))
