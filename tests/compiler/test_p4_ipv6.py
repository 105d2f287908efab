"""IPv6 feeds on a v1model switch: the hICN meter app's whole program (its parser takes IPv6,
its plain forwarding is an IPv6 LPM table, its meter a register), checked against its entries and
P4Info; what the IPv6 program does not do is refused with the reason."""
from __future__ import annotations

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import p4info_message
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.compile import compile_files
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.compiler.test_golden import check_golden
from tests.compiler.test_p4_program import check_entries_fit_program
from tests.conftest import APPS


def test_the_hicn_meter_runs_as_a_whole_v1model_program(update_goldens: bool) -> None:
    c = compile_files(str(APPS / "hicn" / "hicn.p4"), str(APPS / "hicn" / "rules.txt"))
    text = program_text(c.spec)
    check_golden("hicn_v1model.p4", text, update_goldens)
    check_program_fit(c.pipeline, c.spec, "v1model")
    tables = p4_tables(c.pipeline, c.spec)
    info = p4info_message(c.spec)
    check_entries_fit_program(text, info, tables)
    check_entries(tables, p4_schema(c.spec))
    assert {t.preamble.alias for t in info.tables} >= {"ipv6_lpm", "t_ipv6_dst_hi", "t_ipv6_dst_lo"}
    assert "register<bit<64>>" in text and "r_meter_count" in text       # the per-name meter
    assert "CAMUS_UDP_PORT_0: parse_hicn;" in text


def test_what_the_ipv6_program_does_not_do_is_refused_with_the_reason() -> None:
    hicn = (APPS / "hicn" / "hicn.p4").read_text()
    with pytest.raises(BackendError, match="Tofino program parses IPv4"):
        program_text(load_spec(APPS / "hicn" / "hicn.p4"), P4Options(arch="tna"))
    batched = hicn.replace("struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; hicn_t hicn; }",
                           "header mold_t { bit<80> session; bit<64> seq; bit<16> count; }\n"
                           "struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; mold_t mold; hicn_t hicn; }")
    assert batched != hicn
    with pytest.raises(BackendError, match="one message per packet"):
        program_text(parse_spec(batched + "\n@pragma message_framing(moldudp64)\n"))
    bare = hicn.replace("struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; hicn_t hicn; }",
                        "struct headers { ethernet_t ethernet; ipv6_t ipv6; hicn_t hicn; }")
    with pytest.raises(BackendError, match="missing: udp"):
        program_text(parse_spec(bare))


def test_ila_rewrites_on_the_switch_with_its_entries(update_goldens: bool) -> None:
    """ILA has no message header (the packet is the message); an ila(L::) leaf is a t_leaf_calls
    entry ila_rewrite(call id, locator), and the ingress writes the locator (the bytes are checked
    against XDP's own rewrite in tests/dataplane/test_xdp_ila.py)."""
    import ipaddress
    from camus.compiler.backends.p4.interp import EntryInterpreter
    c = compile_files(str(APPS / "ila" / "ila.p4"), str(APPS / "ila" / "rules.txt"))
    text = program_text(c.spec)
    check_golden("ila_v1model.p4", text, update_goldens)
    tables = p4_tables(c.pipeline, c.spec)
    check_entries_fit_program(text, p4info_message(c.spec), tables)
    check_entries(tables, p4_schema(c.spec))
    assert "state camus_packet" in text and text.count(".apply();     // one call site") == 1
    sw = EntryInterpreter(tables)
    for dst, locator in (("2001:db8:5ea::1:1", "2001:db8:a:1::"), ("2001:db8:c:1::1:1", "2001:db8:5ea::")):
        addr = int(ipaddress.IPv6Address(dst))
        v = sw.run({"ipv6.dst/hi": addr >> 64, "ipv6.dst/lo": addr & ((1 << 64) - 1)})
        assert v.locator == int(ipaddress.IPv6Address(locator)) >> 64, dst
    assert sw.run({"ipv6.dst/hi": 0x20010DB805EA0000, "ipv6.dst/lo": 7}).locator is None     # fwd(9) only


@pytest.mark.parametrize("app", ["dns", "ila", "hicn"])
def test_the_new_actions_go_over_p4runtime_and_come_back(app: str) -> None:
    """answer_dns (a 32-bit address) and ila_rewrite (a 64-bit locator) are written as P4Runtime
    updates and read back as the same entries (a switch's entries after a restart)."""
    from camus.compiler.backends.p4.runtime import Names, tables_from_entities, updates
    c = compile_files(str(APPS / app / f"{app}.p4"), str(APPS / app / "rules.txt"))
    tables = p4_tables(c.pipeline, c.spec)
    names = Names(p4info_message(c.spec))
    back = tables_from_entities(names, c.spec, [u.entity for u in updates(names, tables)])
    assert sorted(map(repr, back.entries)) == sorted(map(repr, tables.entries))
    assert back.defaults == tables.defaults
    assert app == "hicn" or {e.action for e in back.entries} & {"answer_dns", "ila_rewrite"}
