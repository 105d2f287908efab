"""Camus users' own spec files: pragma-only specs, where each field is declared by its pragma
(with its width) or lives in a well-known header / switch metadata with its real layout. Every
shape goes through check (compile), explain's layers that need no byte layout (filters, IR, the
P4 entries' interpreter) with the expected deliveries, and XDP refuses clearly."""
from __future__ import annotations


from pathlib import Path

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.ebpf.program import program_text
from camus.compiler.backends.p4.runtime import Names, p4info_pb2, p4runtime_pb2, text_format
from camus.compiler.backends.registry import engine
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec
from tests.conftest import APPS

# name: (spec, rules, [(message, expected ports)])
CORPUS = {
    "iot_car": ("""@pragma query_field(car.lat, 16)
@pragma query_field(car.long, 16)
@pragma query_field(car.speed, 16)
""", """car.lat > 10 and car.lat < 20 and car.speed > 100 : fwd(36);
car.long == 7 : fwd(2);""",
        [("lat=15 speed=120", (36,)), ("lat=15 speed=100", ()), ("lat=20 speed=200", ()),
         ("lat=11 long=7 speed=101", (2, 36)), ("long=7", (2,))]),
    "dns": ("""@pragma query_field_exact(dns_q.qname, 64)
@pragma query_field(dns_q.qtype, 16)
@pragma query_default_action(notfoundDNS)
""", """dns_q.qname == "example" and dns_q.qtype == 1 : fwd(1);
dns_q.qtype == 28 : fwd(2);""",
        [("qname=example qtype=1", (1,)), ("qname=example qtype=28", (2,)), ("qname=other qtype=1", ())]),
    "int": ("""@pragma query_field(int_switch.switch_id, 32)
@pragma query_field(int_q.q_occupancy, 24)
@pragma query_field(int_hop.hop_latency, 32)
""", """int_q.q_occupancy > 1000 : fwd(1);
int_switch.switch_id == 3 and int_hop.hop_latency > 500 : fwd(2);""",
        [("q_occupancy=2000", (1,)), ("switch_id=3 hop_latency=600", (2,)),
         ("switch_id=3 hop_latency=500 q_occupancy=1001", (1,)), ("switch_id=4 hop_latency=900", ())]),
    "itch": ("""@pragma query_field_exact(add_order.stock, 64)
@pragma query_field(add_order.price, 32)
""", """add_order.stock == "GOOGL" and add_order.price > 50 : fwd(1);
add_order.stock == "AAPL" : fwd(2);""",
        [("stock=GOOGL price=60", (1,)), ("stock=GOOGL price=50", ()), ("stock=AAPL price=1", (2,))]),
    "ipv4_routing": ("""@pragma query_field_lpm(ipv4.dstAddr)
@pragma query_field(ipv4.protocol, 8)
""", """ipv4.dstAddr == 10.0.0.0/8 : fwd(1);
ipv4.dstAddr == 10.1.0.0/16 and ipv4.protocol == 17 : fwd(2);""",
        [("dstAddr=10.2.3.4", (1,)), ("dstAddr=10.1.3.4 protocol=17", (1, 2)), ("dstAddr=11.0.0.1", ())]),
    "ipv6_hicn_metadata": ("""@pragma query_field_lpm(ipv6.dstAddr)
@pragma query_field_exact(standard_metadata.ingress_port, 9)
""", """ipv6.dstAddr == ff02:0000:0000:0000:0000:0000:0000:0000/16 : fwd(3);
ipv6.dstAddr == b001::/16 and standard_metadata.ingress_port == 4 : fwd(4);""",
        [("dstAddr=ff02::1", (3,)), ("dstAddr=b001::5 ingress_port=4", (4,)), ("dstAddr=b001::5 ingress_port=5", ()),
         ("dstAddr=fe80::1", ())]),
    "tna_metadata": ("""@pragma query_field_exact(ig_intr_md.ingress_port, 9)
@pragma query_field(sensor.value, 32)
""", """ig_intr_md.ingress_port == 1 and sensor.value > 80 : fwd(5);""",
        [("ingress_port=1 value=81", (5,)), ("ingress_port=2 value=81", ()), ("ingress_port=1 value=80", ())]),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_pragma_only_specs_deliver_as_the_rules_say(name: str) -> None:
    spec_text, rules, cases = CORPUS[name]
    spec = parse_spec(spec_text, f"{name}.p4")
    named = list(dict.fromkeys(q.whole or q.path for q in spec.query_fields))   # a wide field's words: one name
    assert named == [line.split("(")[1].split(",")[0].split(")")[0]
                                                   for line in spec_text.splitlines() if "query_field" in line]
    c = compile_rules(spec, rules)
    for via in ("filters", "ir", "p4"):
        eng = engine(via, c)
        for text, want in cases:
            actions, _ = eng.run(message_from_text(spec, text), 0)
            assert tuple(sorted(actions.ports)) == want, (via, text)
    if name == "ipv4_routing":       # the standard headers alone: the XDP parser finds them (issue 45)
        assert "XDP_DROP" in program_text(spec)
        return
    with pytest.raises(BackendError, match="the XDP back end cannot read") as refused:
        program_text(spec)
    # each refusal says what to add: the header's layout and stack, or that metadata is not in the packet
    assert ("struct headers {" in str(refused.value) or "switch metadata, not in the packet" in str(refused.value))


def test_a_well_known_header_the_xdp_parser_does_not_read_is_refused_with_the_reason() -> None:
    spec = parse_spec("@pragma query_field(tcp.dstPort)\n", "t.p4")
    with pytest.raises(BackendError, match="well-known header the XDP parser does not read"):
        program_text(spec)


def test_builtin_headers_have_their_real_layouts() -> None:
    spec = parse_spec("@pragma query_field(ipv4.dst_addr)\n@pragma query_field(udp.dport)\n"
                      "@pragma query_field(ethernet.etherType, 16)\n", "b.p4")
    got = {q.path: (q.width, q.offset) for q in spec.query_fields}
    assert got == {"ipv4.dst_addr": (32, 128), "udp.dport": (16, 16), "ethernet.etherType": (16, 96)}
    c = compile_rules(spec, "ipv4.dst_addr == 10.0.0.0/8 and udp.dport == 53 : fwd(1);")   # the spec's own names
    actions, _ = engine("ir", c).run(message_from_text(spec, "dst_addr=10.1.2.3 dport=53"), 0)
    assert actions.ports == (1,)
    spec = parse_spec("@pragma query_field(udp.len)\n@pragma query_field(ipv4.len)\n@pragma query_field(ipv4.dst)\n"
                      "@pragma query_field(ipv4.dstAddr)\n", "aliases.p4")
    assert [(q.path, q.offset) for q in spec.query_fields] == [("udp.len", 32), ("ipv4.len", 16), ("ipv4.dst", 128),
                                                               ("ipv4.dstAddr", 128)]


@pytest.mark.parametrize("text, message", [
    ("@pragma query_field(car.lat)\n", "give the field's width"),
    ("@pragma query_field(ipv4.dstAddr, 16)\n", "declared bit<32> but the pragma says 16"),
    ("@pragma query_field(ipv4.nosuch, 8)\n", "the built-in ipv4_t has no field nosuch"),
    ("@pragma query_field(car.lat, 16)\n@pragma query_field(car.lat, 16)\n", "query field twice"),
])
def test_pragma_only_mistakes_are_explained_with_their_position(text: str, message: str) -> None:
    with pytest.raises(CompileErrors) as err:
        parse_spec(text, "bad.p4")
    assert message in str(err.value) and "bad.p4:" in str(err.value)


def test_a_spec_with_its_own_headers_still_catches_typos_but_takes_metadata() -> None:
    declared = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
                bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header car_t { bit<16> lat; bit<16> speed; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; car_t car; }
@pragma query_field(car.lat)
"""
    with pytest.raises(CompileErrors, match="unknown field 'cra.speed'"):
        parse_spec(declared + "@pragma query_field(cra.speed, 16)\n", "typo.p4")
    spec = parse_spec(declared + "@pragma query_field_exact(standard_metadata.ingress_port, 9)\n", "meta.p4")
    c = compile_rules(spec, "car.lat > 5 and standard_metadata.ingress_port == 2 : fwd(1);")
    actions, _ = engine("ir", c).run(message_from_text(spec, "lat=6 ingress_port=2"), 0)
    assert actions.ports == (1,)
    with pytest.raises(BackendError, match="switch metadata"):
        program_text(spec)


# -- Camus's mode on the switch: a control block for the user's own program ---------------------

CAR = APPS / "camus_compat" / "car.p4"
CAR_RULES = APPS / "camus_compat" / "car_rules.txt"


@pytest.mark.parametrize("arch", ["v1model", "tna"])
def test_control_block_matches_golden(arch: str, update_goldens: bool) -> None:
    from camus.compiler.backends.p4.control import control_text
    from camus.compiler.backends.p4.schema import P4Options
    from camus.compiler.language.spec_parser import load_spec
    from tests.compiler.test_golden import check_golden
    spec = load_spec(CAR) if arch == "v1model" else parse_spec(
        CAR.read_text().replace("standard_metadata.ingress_port", "ig_intr_md.ingress_port"), "car.p4")
    check_golden(f"car_control_{arch}.p4", control_text(spec, P4Options(arch=arch)), update_goldens)


def test_control_block_is_the_whole_programs_tables() -> None:
    """Same tables, keys, @names and apply order as the whole program's ingress: one set of entries
    serves both (the walk's state is the block's `camus` parameter instead of meta.camus). The
    egress port filters are the whole program's own (a control-only build refuses them)."""
    from camus.compiler.backends.p4.control import control_text
    from camus.compiler.backends.p4.program import program_text as p4_program
    from camus.compiler.language.spec_parser import load_spec
    spec = load_spec(APPS / "itch" / "itch.p4")
    whole, block = p4_program(spec), control_text(spec)
    whole = whole.split("control CamusEgress")[0]
    tables = [line.strip() for line in whole.splitlines() if line.strip().startswith("table t_")]
    assert tables and tables == [line.strip() for line in block.splitlines() if line.strip().startswith("table t_")]
    applied = [line.strip() for line in whole.splitlines() if ".apply()" in line and "t_" in line]
    assert applied == [line.strip() for line in block.splitlines() if ".apply()" in line and "t_" in line]
    assert "meta.camus" not in block.split("struct camus_meta_t")[1].split("apply {")[0].replace(
        "Camus.apply(hdr, meta.camus", "")


def test_compile_target_p4_writes_the_block_and_where_possible_the_program(tmp_path) -> None:
    from click.testing import CliRunner
    from camus.cli import main
    r = CliRunner().invoke(main, ["compile", str(CAR), str(CAR_RULES), "--target", "p4", "-o", str(tmp_path / "car")])
    assert r.exit_code == 0, r.output
    assert "control block only" in r.output and "declares no headers" in r.output
    out = {p.name for p in (tmp_path / "car").iterdir()}
    assert "camus_control.p4" in out and "camus.p4" not in out and "entries.txtpb" in out
    assert "table_set_default t_leaf call 1" in (tmp_path / "car" / "entries.cli").read_text()
    r = CliRunner().invoke(main, ["compile", str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt"),
                                  "--target", "p4", "-o", str(tmp_path / "itch")])
    assert r.exit_code == 0, r.output
    assert {"camus.p4", "camus_control.p4"} <= {p.name for p in (tmp_path / "itch").iterdir()}
    r = CliRunner().invoke(main, ["compile", str(CAR), str(CAR_RULES), "--target", "p4", "--arch", "tna", "--emit"])
    assert r.exit_code != 0 and "v1model metadata" in r.output


def test_car_app_delivers_through_every_layer_without_a_layout() -> None:
    from camus.compiler.compile import compile_files
    from camus.compiler.language.spec_parser import load_spec
    spec = load_spec(CAR)
    c = compile_files(CAR, CAR_RULES)
    cases = [("lat=15 speed=120", ["fwd(36)"]), ("long=7", ["fwd(2)"]), ("lat=1 speed=201 ingress_port=4", ["fwd(2,3)"]),
             ("lat=0 long=0 speed=300", ["drop"]), ("lat=50 long=1", ["report_unknown()"])]
    for via in ("filters", "ir", "p4"):
        eng = engine(via, c)
        assert [eng.run(message_from_text(spec, t), 0)[0].names() for t, _ in cases] == [w for _, w in cases], via


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_corpus_spec_compiles_for_the_p4_target(name: str) -> None:
    """`compile --target p4` takes each shape unchanged: the control block and its entries (the
    architecture follows the metadata the spec names), checked against the declared tables."""
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.registry import backend
    spec_text, rules, _ = CORPUS[name]
    arch = "tna" if "ig_intr_md" in spec_text else "v1model"
    c = compile_rules(parse_spec(spec_text, f"{name}.p4"), rules)
    out = backend("p4").build(c, TargetOptions(arch=arch))
    assert "control Camus(" in out.files["camus_control.p4"] and "camus.p4" not in out.files
    assert "control block only" in out.summary
    req = text_format.Parse(out.files["entries.txtpb"], p4runtime_pb2.WriteRequest())
    names = Names(text_format.Parse(out.files["p4info.txtpb"], p4info_pb2.P4Info()))
    defaults = [names.table_by_id[u.entity.table_entry.table_id].name for u in req.updates
                if u.entity.table_entry.is_default_action]
    assert defaults[-1] == "t_root" and len(req.updates) > 1
    if "query_default_action" in spec_text:
        assert "t_leaf" in defaults


def test_metadata_of_the_other_architecture_is_refused_by_both_p4_outputs() -> None:
    from camus.compiler.backends.p4.control import control_text
    from camus.compiler.backends.p4.program import program_text as p4_program
    from camus.compiler.backends.p4.schema import P4Options
    itch = (APPS / "itch" / "itch.p4").read_text()
    tna_meta = parse_spec(itch + "\n@pragma query_field_exact(ig_intr_md.ingress_port, 9)\n", "itch_tna.p4")
    for make in (p4_program, control_text):
        with pytest.raises(BackendError, match="ig_intr_md.ingress_port is tna metadata.*--arch tna"):
            make(tna_meta, P4Options(arch="v1model"))
    program = p4_program(tna_meta, P4Options(arch="tna"))    # read from the ingress parameter
    assert "ig_intr_md.ingress_port : exact" in program and "hdr.ig_intr_md" not in program


def test_cli_compiles_a_tofino_metadata_spec_for_tna_without_a_flag(tmp_path) -> None:
    """Issue 45: a spec reading ig_intr_md was compiled for v1model by default and refused with
    advice to pass --arch tna; the CLI now takes the architecture the spec was written for and
    says so (an explicit --arch still wins)."""
    from click.testing import CliRunner
    from camus.cli import main
    spec_text, rules, _ = CORPUS["tna_metadata"]
    (tmp_path / "s.p4").write_text(spec_text)
    (tmp_path / "r.txt").write_text(rules + "\n")
    done = CliRunner().invoke(main, ["compile", str(tmp_path / "s.p4"), str(tmp_path / "r.txt"), "--target", "p4"])
    assert done.exit_code == 0 and "compiling for tna" in done.output, done.output
    forced = CliRunner().invoke(main, ["compile", str(tmp_path / "s.p4"), str(tmp_path / "r.txt"), "--target", "p4",
                                       "--arch", "v1model"])
    assert forced.exit_code == 1 and "--arch tna" in forced.output, forced.output


WHOLE = Path(__file__).resolve().parent / "whole_programs"


@pytest.mark.parametrize("program, rules, messages", [
    ("p4_16_program.p4", "label.topic == 7 : fwd(1)\nlabel.topic > 100 : fwd(2)\n",
     [("topic=7", (1,)), ("topic=101", (2,)), ("topic=50", ())]),
    ("p4_14_program.p4", "itch.price > 50 : fwd(1)\nitch.price == 10 : drop\n",
     [("price=51", (1,)), ("price=10", ()), ("price=20", ())]),
])
def test_whole_p4_programs_are_specs_for_every_target(program: str, rules: str, messages) -> None:
    """Issue 45: whole P4_16 and P4_14 programs (actions with arithmetic, `&&`/`||`, casts,
    slices, shifts, `apply` blocks, the ternary operator, `#include` of the system headers and
    `#define`s) read as specs: the declarations the reader does not use are skipped, balanced.
    The IR, the switch's entries and the XDP program all come out, and deliver as the rules say."""
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.registry import backend
    from camus.compiler.language.spec_parser import load_spec
    spec = load_spec(WHOLE / program)
    c = compile_rules(spec, rules)
    assert "XDP_DROP" in program_text(spec) and backend("p4").build(c, TargetOptions()).files
    for text, ports in messages:
        m = message_from_text(spec, text)
        for via in ("ir", "p4"):
            assert engine(via, c).run(m, 0)[0].ports == ports, (via, text)
