"""P4 back end: how the programs handle MoldUDP64 batches (the Camus recirculation scheme).

One message per pass: ingress classifies the first message; a copy of the rest goes round again
(v1model: ingress-to-egress clone + recirculate; TNA: mirror to a recirculation port) without the
classified message; delivered copies are pruned in egress to their one message. These functions
fill the templates' FRAMING_TYPES, INGRESS_TAIL and EGRESS_APPLY slots.
"""
from __future__ import annotations

from typing import Any

from ...language.spec import Spec
from ..emit import Emitter
from .layout import Layout, field_name, field_slice
from .schema import P4Options


def _names(spec: Spec, lay: Layout) -> tuple[str, str, str, str, str, str, str]:
    """framing instance, its count field, ip, udp, and the length/checksum fields egress rewrites."""
    assert lay.framing is not None
    return (lay.framing.name, field_name(lay.framing, spec.framing.count_offset * 8, 16, "message count"),
            lay.ip.name, lay.udp.name, field_name(lay.ip, 16, 16, "IPv4 total length"),
            field_name(lay.udp, 32, 16, "UDP length"), field_name(lay.udp, 48, 16, "UDP checksum"))


def msg_name(lay: Layout) -> str:
    """The batched message's header (layout_of requires one when messages are batched)."""
    assert lay.msg is not None
    return lay.msg.name


def _drop_classified(eg: Emitter, lay: Layout, names: tuple[Any, ...], headers: list[str]) -> None:
    """Egress statements removing the classified message (`gone` bytes) from the batch."""
    f, n, ip, udp, ip_len, udp_len, udp_csum = names
    for h in headers:
        eg(f"hdr.{h}.setInvalid();")
    eg(f"hdr.{f}.{n} = hdr.{f}.{n} - 1;")
    eg(f"hdr.{udp}.{udp_len} = hdr.{udp}.{udp_len} - gone;")
    eg(f"hdr.{ip}.{ip_len} = hdr.{ip}.{ip_len} - gone;")
    eg(f"hdr.{udp}.{udp_csum} = 0;")


def v1model_framed(spec: Spec, lay: Layout, opts: P4Options) -> dict[str, str]:
    f, n, ip, udp, ip_len, udp_len, udp_csum = _names(spec, lay)
    ihl = field_slice(lay.ip, 4, 4, "IPv4 IHL")
    l2 = (lay.eth.type.width + (lay.vlan.type.width if lay.vlan else 0)) // 8
    types = (f"header camus_len_t {{\n    bit<16> len;        // MoldUDP64 length prefix of the message that follows\n}}\n\n"
             f"header camus_skip_t {{\n    varbit<{opts.skip_bytes * 8}> bytes;"
             "   // a message of another length: carried, never classified\n}")
    tail = Emitter()
    tail.depth = 2
    with tail.block(f"if (hdr.{f}.{n} > 1 && standard_metadata.parser_error == error.NoError)"):
        tail("// more messages follow: a copy goes round again without this one (not after a parser")
        tail("// error: the rest of the batch would be read from the wrong offset)")
        tail("clone_preserving_field_list(CloneType.I2E, CAMUS_RECIRC_SESSION, 1);")
    eg = Emitter()
    eg.depth = 2
    eg(f"if (!hdr.{f}.isValid() || !hdr.camus_len.isValid()) {{ return; }}")
    eg("bit<16> gone = hdr.camus_len.len + 2;")
    with eg.block("if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE)"):
        eg("// the rest of the batch: drop the classified message and go round again")
        _drop_classified(eg, lay, _names(spec, lay), ["camus_len", msg_name(lay), "camus_skip"])
        eg("meta.camus.passes = meta.camus.passes + 1;")
        eg("recirculate_preserving_field_list(1);")
        eg("return;")
    eg("// a delivered copy: the classified message alone")
    eg(f"bit<16> keep = {spec.framing.header_bytes} + gone;")
    eg(f"hdr.{f}.{n} = 1;")
    eg(f"hdr.{udp}.{udp_len} = 8 + keep;")
    eg(f"hdr.{ip}.{ip_len} = ((bit<16>){ihl}) * 4 + 8 + keep;")
    eg(f"hdr.{udp}.{udp_csum} = 0;    // optional over IPv4")
    eg(f"truncate((bit<32>)({l2} + hdr.{ip}.{ip_len}));")
    return {"FRAMING_TYPES": types, "INGRESS_TAIL": tail.text().rstrip("\n"),
            "EGRESS_APPLY": eg.text().rstrip("\n")}


PRUNE_TABLE = "t_camus_prune"      # TNA egress: (message count, later messages parsed) -> bytes to cut


def prune_table_keys(spec: Spec, lay: Layout) -> list[tuple[str, int, str]]:
    """t_camus_prune's keys as P4Info names them: (name, bits, match kind)."""
    f, n = _names(spec, lay)[:2]
    return [(f"{f}.{n}", 16, "exact"), ("meta.rest_parsed", 8, "exact")]


def tna_framed(spec: Spec, lay: Layout, opts: P4Options) -> dict[str, str]:
    f, n, ip, udp, ip_len, udp_len, udp_csum = _names(spec, lay)
    msg_bits = spec.message_bytes * 8
    types = ("header camus_len_t {\n    bit<16> len;        // MoldUDP64 length prefix of the message that follows\n}\n\n"
             f"header camus_rest_t {{\n    bit<16> len;\n    bit<{msg_bits}> body;   // a later message of the batch\n}}")
    tail = Emitter()
    tail.depth = 2
    with tail.block(f"if (!hdr.{msg_name(lay)}.isValid() || hdr.{f}.{n} > {1 + opts.tna_max_rest})"):
        tail("// a first message of another size, or a batch longer than the parser holds: egress")
        tail("// could neither prune it nor remove the message (counted, not delivered)")
        tail("camus_oversize.count(0);")
        tail("ig_dprsr_md.drop_ctl = 1;")
    with tail.block(f"else if (hdr.{f}.{n} > 1)"):
        tail("// more messages follow: a mirrored copy goes round again without this one")
        tail("ig_dprsr_md.mirror_type = CAMUS_MIRROR_RECIRC;")
        tail("meta.camus.mirror_session = CAMUS_RECIRC_SESSION;")
    eg = Emitter()
    eg.depth = 2
    eg(f"if (!hdr.{f}.isValid() || !hdr.camus_len.isValid()) {{ return; }}")
    eg(f"bit<16> gone = {spec.message_bytes + 2};")
    with eg.block("if (meta.camus.recirc == 1)"):
        eg("// the mirrored rest of the batch: drop the classified message, leave the rest")
        _drop_classified(eg, lay, _names(spec, lay), ["camus_len", msg_name(lay)])
        eg("return;")
    eg("// a delivered copy: the classified message alone. The lengths to cut are precomputed per")
    eg("// count (no multiplier in Tofino's ALUs); a batch whose later messages the parser did not all")
    eg("// take (another size) has no entry: dropped, never over-delivered")
    eg("t_camus_prune.apply();")
    eg(f"hdr.{udp}.{udp_csum} = 0;    // optional over IPv4")
    prune = Emitter()
    prune.depth = 1
    with prune.block("action camus_prune(bit<16> cut)"):
        for i in range(opts.tna_max_rest):
            prune(f"hdr.camus_rest[{i}].setInvalid();")
        prune(f"hdr.{udp}.{udp_len} = hdr.{udp}.{udp_len} - cut;")
        prune(f"hdr.{ip}.{ip_len} = hdr.{ip}.{ip_len} - cut;")
        prune(f"hdr.{f}.{n} = 1;")
    with prune.block("action camus_unprunable()"):
        prune("eg_dprsr_md.drop_ctl = 1;")
    with prune.block(f"table {PRUNE_TABLE}"):
        with prune.block("key ="):
            prune(f'hdr.{f}.{n} : exact @name("{f}.{n}");')
            prune('meta.camus.rest_parsed : exact @name("meta.rest_parsed");')
        prune("actions = { camus_prune; camus_unprunable; }")
        prune("default_action = camus_unprunable();")
        prune(f"size = {opts.tna_max_rest + 1};")
        with prune.block("const entries ="):
            prune("(1, 0) : camus_prune(0);")
            for rest in range(1, opts.tna_max_rest + 1):
                prune(f"({rest + 1}, {rest}) : camus_prune({rest * (spec.message_bytes + 2)});")
    return {"FRAMING_TYPES": types, "INGRESS_TAIL": tail.text().rstrip("\n"),
            "EGRESS_APPLY": eg.text().rstrip("\n"), "EGRESS_DECLS": prune.text().rstrip("\n")}


def single_message() -> dict[str, str]:
    """One message per packet: nothing to recirculate or prune."""
    return {"FRAMING_TYPES": "// one message per packet: no batch framing",
            "INGRESS_TAIL": "        // one message per packet: nothing goes round again",
            "EGRESS_APPLY": "        // one message per packet: delivered copies need no pruning",
            "EGRESS_DECLS": "    // one message per packet: no pruning table"}
