"""A program written for the Camus compiler's output: it includes the generated control
(`#include "camus.p4"`) and applies it with Camus's two arguments. Such a pair (program with
pragmas, rules) compiles unchanged for --target p4; the generated file declares what the
program calls, and its entries deliver as the rules say."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.backends.base import BackendError, TargetOptions
from camus.compiler.backends.registry import backend
from camus.compiler.compile import compile_files
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import load_spec
from tests.compiler.test_p4_program import declared_tables

PROGRAM = """#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> id; bit<3> flags;
    bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header order_t { bit<8> kind; bit<64> symbol; bit<32> qty; bit<32> price; }
struct metadata { }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; order_t order; }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.ether_type) { 0x800: ip; default: accept; } }
    state ip { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.protocol) { 17: udp; default: accept; } }
    state udp { pkt.extract(hdr.udp); transition select(hdr.udp.dport) { 4321: order; default: accept; } }
    state order { pkt.extract(hdr.order); transition accept; }
}

#include "{name}"

control Ingress(inout headers hdr, inout metadata meta, inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.order.isValid()) {
            Camus.apply(hdr, standard_metadata);
        }
    }
}

@pragma query_field(order.symbol)
@pragma query_field(order.price)
@pragma query_type(order.symbol, string)
"""
RULES = "order.symbol == ACME and order.price > 100 : fwd(1);\norder.symbol == ACME : fwd(2);\n"


@pytest.mark.parametrize("name", ["camus.p4", "itch_camus.p4"])
def test_a_program_that_includes_camus_output_compiles_unchanged(tmp_path: Path, name: str) -> None:
    spec, rules = tmp_path / "prog.p4", tmp_path / "rules.txt"
    spec.write_text(PROGRAM.replace("{name}", name))
    rules.write_text(RULES)
    assert load_spec(spec).camus_control_file == name
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    control = (out / name).read_text()
    assert "control Camus(inout headers hdr, inout standard_metadata_t standard_metadata)" in control
    assert "mark_to_drop(standard_metadata);" in control
    tables = declared_tables(control)
    assert {"t_root", "t_order_symbol_exact", "t_order_symbol", "t_order_price", "t_leaf"} <= set(tables)
    for t in tables.values():                       # every key reads the program's own headers or the walk
        for expr, _ in t["key"]:
            assert expr.startswith(("order.", "meta.")), expr
    assert re.search(r"hdr\.order\.symbol : exact", control)
    assert (out / "entries.cli").exists() and (out / "p4info.txtpb").exists()
    if name != "camus.p4":
        assert not (out / "camus.p4").exists()       # the user's program is the program
    c = compile_files(str(spec), str(rules))
    engine = backend("p4").engine(c)
    for price, want in ((150, (1, 2)), (50, (2,))):
        got, _ = engine.run({"order.symbol": int.from_bytes(b"ACME    ", "big"), "order.price": price}, 0)
        assert tuple(sorted(got.ports)) == want


def test_only_the_camus_control_may_be_missing(tmp_path: Path) -> None:
    spec = tmp_path / "prog.p4"
    spec.write_text(PROGRAM.replace("{name}", "camus.p4").replace('#include <v1model.p4>', '#include "mine.p4"'))
    with pytest.raises(CompileErrors, match='#include "mine.p4": no such file'):
        load_spec(spec)
    spec.write_text(PROGRAM.replace("{name}", "camus.p4").replace("Camus.apply", "Other.apply"))
    with pytest.raises(CompileErrors, match='#include "camus.p4": no such file'):
        load_spec(spec)


def test_the_two_argument_control_is_v1model(tmp_path: Path) -> None:
    spec, rules = tmp_path / "prog.p4", tmp_path / "rules.txt"
    spec.write_text(PROGRAM.replace("{name}", "camus.p4"))
    rules.write_text(RULES)
    c = compile_files(str(spec), str(rules))
    with pytest.raises(BackendError, match="use --arch v1model"):
        backend("p4").build(c, TargetOptions(arch="tna"))
