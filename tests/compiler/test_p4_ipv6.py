"""IPv6 feeds on a v1model switch: the hICN meter app's whole program (its parser takes IPv6,
its plain forwarding is an IPv6 LPM table, its meter a register), checked against its entries and
P4Info; what the IPv6 program does not do is refused with the reason."""
from __future__ import annotations

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4_entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4_program import program_text
from camus.compiler.backends.p4_runtime import p4info_message
from camus.compiler.backends.p4_schema import P4Options, p4_schema
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
    with pytest.raises(BackendError, match="missing: message"):           # ILA: the packet is the message
        program_text(load_spec(APPS / "ila" / "ila.p4"))
