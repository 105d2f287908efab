from __future__ import annotations

from camus.compiler.language.spec import MatchKind, Role
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.conftest import APPS


def test_itch_spec_layout() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    assert spec.stack == ["ethernet", "ipv4", "udp", "moldudp64", "add_order"]
    assert [spec.instances[n].role for n in spec.stack] == [
        Role.ETHERNET, Role.IPV4, Role.UDP, Role.FRAMING, Role.MESSAGE]
    assert spec.message_bytes == 36                       # ITCH 5.0 Add Order
    assert spec.instances["moldudp64"].type.width == 20 * 8
    assert spec.framing.kind == "moldudp64" and spec.framing.length_bytes == 2
    stock = spec.query_field("add_order.stock")
    price = spec.query_field("add_order.price")
    assert (stock.offset // 8, stock.width, stock.vtype) == (24, 64, "string")
    assert (price.offset // 8, price.width, price.kind) == (32, 32, MatchKind.AUTO)
    assert spec.udp_ports == (26400,) and spec.message_type == ("add_order.msg_type", 0x41)
    assert spec.counters[0].name == "my_counter" and spec.counters[0].window_us == 1_000_000


def test_int_spec_annotation_style() -> None:
    spec = load_spec(APPS / "int" / "int.p4")
    assert spec.framing.kind == "none"
    kinds = {q.name: (q.kind, q.vtype) for q in spec.query_fields}
    assert kinds["switch_id"] == (MatchKind.EXACT, "string")   # exact, byte-aligned: may hold text
    assert kinds["hop_latency"] == (MatchKind.AUTO, "int")
    assert kinds["flow_dst"] == (MatchKind.LPM, "ipv4")
    assert spec.counters[0].window_us == 131_072


def test_field_annotations_typedefs_and_type_names() -> None:
    spec = parse_spec("""
        typedef bit<32> ipv4_addr_t;
        typedef bit<48> mac_addr_t;
        header eth_t { mac_addr_t dst; mac_addr_t src; bit<16> type; }
        header app_t {
            @query_field_range bit<16> load;   // annotation on the field itself
            ipv4_addr_t peer;
            bit<8> flags;
        }
        struct hdrs { eth_t eth; app_t app; }
        @pragma query_field_exact(app_t.peer)
        @query_field(eth.src)
        @pragma message_framing(none)
    """, "x.p4")
    q = {x.path: x for x in spec.query_fields}
    assert q["app.load"].kind is MatchKind.RANGE and q["app.load"].offset == 0
    assert q["app.peer"].vtype == "ipv4" and q["app.peer"].offset == 16
    assert q["eth.src"].vtype == "mac" and q["eth.src"].role is Role.ETHERNET
    assert spec.fields_named("peer") == [q["app.peer"]]
    assert spec.fields_named("app_t.peer") == [q["app.peer"]]


def test_other_p4_is_skipped() -> None:
    spec = parse_spec("""
        #include <core.p4>
        const bit<16> TYPE_IPV4 = 0x800;
        header h_t { bit<8> a; bit<8> b; }
        struct headers { h_t h; }
        parser MyParser(packet_in p) { state start { transition accept; } }
        control C(inout headers hdr) { apply { } }
        /* block
           comment */
        @pragma query_field(h.b)
    """)
    assert [q.path for q in spec.query_fields] == ["h.b"]
    assert spec.query_fields[0].offset == 8


def test_a_comment_after_a_pragma_is_not_part_of_it() -> None:
    spec = parse_spec('header h_t { bit<8> a; }\nstruct s { h_t h; }\n@pragma query_field(h.a)  // (not, an arg)\n'
                      '@pragma query_counter(seq, 0, 4)   // every(n) (see rules): endless\n', "c.p4")
    assert [q.path for q in spec.query_fields] == ["h.a"] and spec.counters[0].window_us == 0


def test_include_of_sibling_files_is_followed_and_missing_or_cyclic_ones_refused(tmp_path) -> None:
    """Issue 45: a spec that includes its headers from a file of the same folder; `<core.p4>`
    (the P4 system headers) skipped; a missing quoted file and a cycle refused with a position."""
    import pytest
    from camus.compiler.compile import compile_rules
    from camus.compiler.language.errors import CompileErrors
    from camus.compiler.language.spec_parser import load_spec
    (tmp_path / "headers.p4").write_text("header label_t { bit<32> topic; bit<16> size; }\n")
    (tmp_path / "spec.p4").write_text('#include <core.p4>\n#include "headers.p4"\n'
                                      "struct headers { label_t label; }\n@pragma query_field(label.topic)\n")
    spec = load_spec(tmp_path / "spec.p4")
    assert [q.path for q in spec.query_fields] == ["label.topic"]
    assert compile_rules(spec, "label.topic == 7 : fwd(1)\n").pipeline.leaves
    (tmp_path / "missing.p4").write_text('\n  #include "nothere.p4"\n@pragma query_field(label.topic)\n')
    with pytest.raises(CompileErrors) as missing:
        load_spec(tmp_path / "missing.p4")
    assert 'missing.p4:2:3: error: #include "nothere.p4": no such file' in str(missing.value)
    (tmp_path / "a.p4").write_text('#include "b.p4"\n')
    (tmp_path / "b.p4").write_text('#include "a.p4"\n')
    with pytest.raises(CompileErrors) as cycle:
        load_spec(tmp_path / "a.p4")
    assert "#include cycle: a.p4 -> b.p4 -> a.p4" in str(cycle.value) and "b.p4:1:1" in str(cycle.value)
