"""P4 back end, static part: the P4_16 program for a spec (v1model for bmv2, TNA for Tofino).

Like the XDP program, it depends on the spec only: the tables are declared once as data in
`p4_schema` (one per query field, the key kind from the field's pragma, window stages, the leaf
tables), and this module writes those declarations and their apply sequence as P4; rules
arrive as entries (`p4_entries`). The fixed scaffolding lives in templates under `p4/` (`{{NAME}}` slots); this
module fills the slots: header types, parser states, tables, the apply sequence, emits.

Standard headers are found by layout, not by name: the IPv4 TTL is the byte at offset 8 whatever
the spec calls it, read through a bit slice when the spec declares a wider field (`vihl[3:0]`).
"""
from __future__ import annotations


from ...language.spec import Spec
from ..emit import BackendError, Emitter, fill_template
from .attrs import attrs_program_text, check_attrs_layout
from .framing import single_message, tna_framed, v1model_framed
from .dns import answer_action, ingress_tail
from .layout import dns_topic
from .dns import header_types as dns_header_types
from .dns import stack as dns_stack
from .ila import META as ILA_META
from .ila import ila_rewrites
from .ila import ingress_tail as ila_ingress_tail
from .ila import metadata_type as ila_metadata_type
from .ila import rewrite_action as ila_action
from .layout import Layout, field_name, field_slice, ip_route, layout_of
from .topics import metadata_members, metadata_types, parser_states
from .table_text import apply_table, declare_table, egress_filter_blocks
from .schema import (ARCHS, SVAR_KEY, meta_slots, P4Options, P4Schema,
                        check_metadata_arch, field_expr, is_attrs,
                        counted_paths, load_action, p4_schema, update_action, updatable_fields, window_counters,
                        window_shift)



# -- slot fillers ---------------------------------------------------------------------------------

def _header_types(spec: Spec, whole: bool = False) -> str:
    """The spec's header types; in the whole program a DNS name is not a field of its header but
    the byte stack it is read into (p4_dns), so its header type stops before it."""
    dns = dns_topic(spec) if whole else None
    e = Emitter()
    seen: set[str] = set()
    for name in spec.stack:
        t = spec.instances[name].type
        if t.name in seen:
            continue
        seen.add(t.name)
        with e.block(f"header {t.name}"):
            for f in t.fields:
                if dns is None or (name, f.name) != (dns.instance, dns.name):
                    e(f"bit<{f.width}> {f.name};")
        e()
    if dns is not None:
        e(dns_header_types())
    return e.text().rstrip("\n")


def _stack(lay: Layout, spec: Spec, arch: str, opts: P4Options) -> list[tuple[str, str]]:
    """(header type, instance) in parse and emit order, with the framing helpers in place."""
    out = []
    for name in spec.stack:
        inst = spec.instances[name]
        if inst is lay.msg and lay.framing is not None:
            out.append(("camus_len_t", "camus_len"))
        out.append((inst.type.name, inst.name))
        if inst is lay.msg and (dns := dns_topic(spec)) is not None:
            out += dns_stack(dns)
    if lay.framing is not None:
        out.append(("camus_skip_t", "camus_skip") if arch == "v1model"
                   else (f"camus_rest_t[{opts.tna_max_rest}]", "camus_rest"))
    return out


def _members(spec: Spec, lay: Layout, arch: str, opts: P4Options) -> str:
    return "\n".join(f"    {t} {n};" for t, n in _stack(lay, spec, arch, opts))


def _constants(spec: Spec, lay: Layout) -> str:
    lines: list[str] = []
    for i, p in enumerate(spec.udp_ports):
        lines.append(f"const bit<16> CAMUS_UDP_PORT_{i} = {p};")
    if lay.framing is not None:
        lines.append(f"const bit<16> CAMUS_MSG_BYTES = {spec.message_bytes};")
    return "\n".join(lines)


def _udp_select(spec: Spec, lay: Layout, e: Emitter, next_state: str) -> None:
    dport = field_slice(lay.udp, 16, 16, "UDP destination port")
    if not spec.udp_ports:
        e(f"transition {next_state};")
        return
    with e.block(f"transition select({dport})"):
        for i in range(len(spec.udp_ports)):
            e(f"CAMUS_UDP_PORT_{i}: {next_state};")
        e("default: accept;")


def _kind_select(spec: Spec, e: Emitter) -> None:
    """Whether the message is one the tables classify (the spec's message type, if it has one)."""
    if spec.message_type is not None:
        inst_name, _, fname = spec.message_type[0].rpartition(".")
        with e.block(f"transition select(hdr.{inst_name}.{fname})"):
            e(f"{spec.message_type[1]}: camus_classify;")
            e("default: accept;")
    else:
        e("transition camus_classify;")


def _parser_states(spec: Spec, lay: Layout, arch: str, side: str = "ingress",
                   rest_slots: int = P4Options.tna_max_rest) -> str:
    """Parser states; `side` egress (TNA) re-parses the packet after the bridge header."""
    e = Emitter()
    e.depth = 1
    _start_states(e, lay, arch, side)
    _network_states(e, spec, lay)
    _framing_states(e, spec, lay, arch)
    _message_states(e, spec, lay, arch)
    _classify_states(e, spec, lay, arch, rest_slots)
    return e.text().rstrip("\n")


def _start_states(e: Emitter, lay: Layout, arch: str, side: str) -> None:
    """The architecture's own metadata first (TNA: port metadata, or egress's bridge header)."""
    with e.block("state start"):
        if arch == "tna" and side == "ingress":
            e("packet.extract(ig_intr_md);")
            e("packet.advance(PORT_METADATA_SIZE);")
        elif arch == "tna":
            e("packet.extract(eg_intr_md);")
            e("packet.extract(hdr.camus_bridge);")
            with e.block("transition select(hdr.camus_bridge.kind)"):
                e("CAMUS_KIND_RECIRC: camus_mark_recirc;")
                e(f"default: parse_{lay.eth.name};")
        if side == "ingress":
            e(f"transition parse_{lay.eth.name};")
    if side == "egress":
        with e.block("state camus_mark_recirc"):
            e("meta.camus.recirc = 1;")
            e("packet.advance(8);     // the mirrored packet still carries its normal bridge byte")
            e(f"transition parse_{lay.eth.name};")


def _network_states(e: Emitter, spec: Spec, lay: Layout) -> None:
    """Ethernet, a VLAN tag, IPv4 or IPv6 and UDP: what is not the feed is forwarded plainly."""
    eth_type = field_slice(lay.eth, 96, 16, "EtherType")
    ethertype = "0x86dd" if lay.ipv6 else "0x0800"
    with e.block(f"state parse_{lay.eth.name}"):
        e(f"packet.extract(hdr.{lay.eth.name});")
        with e.block(f"transition select({eth_type})"):
            if lay.vlan is not None:
                e(f"0x8100: parse_{lay.vlan.name};")
            e(f"{ethertype}: parse_{lay.ip.name};")
            e("default: accept;")
    if lay.vlan is not None:
        with e.block(f"state parse_{lay.vlan.name}"):
            e(f"packet.extract(hdr.{lay.vlan.name});")
            with e.block(f"transition select({field_slice(lay.vlan, 16, 16, 'VLAN EtherType')})"):
                e(f"{ethertype}: parse_{lay.ip.name};")
                e("default: accept;")
    ip = lay.ip
    if lay.ipv6:          # UDP right after the fixed header
        not_feed, keys, udp = "extension headers (fragments too)", field_slice(ip, 48, 8, "IPv6 next header"), "17"
    else:                 # no options, not a fragment, UDP
        not_feed, udp = "options and fragments", "(5, 17, 0, 0)"
        keys = ", ".join((field_slice(ip, 4, 4, "IPv4 IHL"), field_slice(ip, 72, 8, "IPv4 protocol"),
                          field_slice(ip, 50, 1, "IPv4 MF flag"), field_slice(ip, 51, 13, "IPv4 fragment offset")))
    with e.block(f"state parse_{ip.name}"):
        e(f"packet.extract(hdr.{ip.name});")
        e(f"// {not_feed} are not subscription traffic: plain forwarding")
        with e.block(f"transition select({keys})"):
            e(f"{udp}: parse_{lay.udp.name};")
            e("default: accept;")
    after_udp = (f"parse_{lay.framing.name}" if lay.framing else f"parse_{lay.msg.name}" if lay.msg
                 else "camus_packet")
    with e.block(f"state parse_{lay.udp.name}"):
        e(f"packet.extract(hdr.{lay.udp.name});")
        _udp_select(spec, lay, e, after_udp)


def _framing_states(e: Emitter, spec: Spec, lay: Layout, arch: str) -> None:
    """A MoldUDP64 batch: its header, each message's length, other message types skipped."""
    if lay.framing is not None:
        assert lay.msg is not None                # layout_of: batched messages have a header
        count = field_slice(lay.framing, spec.framing.count_offset * 8, 16, "MoldUDP64 message count")
        with e.block(f"state parse_{lay.framing.name}"):
            e(f"packet.extract(hdr.{lay.framing.name});")
            e("meta.camus.feed = 1;")
            with e.block(f"transition select({count})"):
                e("0: accept;            // heartbeat: nothing to deliver")
                e("default: parse_camus_len;")
        with e.block("state parse_camus_len"):
            e("packet.extract(hdr.camus_len);")
            if arch == "v1model":
                e("// the header and maybe more (a payload): bit 15 of the difference is set when shorter")
                e("meta.camus.extra = hdr.camus_len.len - CAMUS_MSG_BYTES;")
                with e.block("transition select(meta.camus.extra[15:15])"):
                    e(f"0: parse_{lay.msg.name};")
                    e("default: parse_camus_skip;")
            else:
                with e.block("transition select(hdr.camus_len.len)"):
                    e(f"CAMUS_MSG_BYTES: parse_{lay.msg.name};")
                    e("default: parse_camus_skip;")
        with e.block("state parse_camus_skip"):
            if arch == "v1model":
                e("// another message type: carried past so the rest of the batch recirculates")
                e("packet.extract(hdr.camus_skip, (bit<32>)hdr.camus_len.len * 8);")
            else:
                e("// Tofino parses fixed-size headers only: a message of another length ends the batch")
            e("transition accept;")


def _message_states(e: Emitter, spec: Spec, lay: Layout, arch: str) -> None:
    """The message header (or the packet itself when the spec has none) and its kind."""
    payload = arch == "v1model" and lay.framing is not None
    if lay.msg is None:
        with e.block("state camus_packet"):
            e("// no message header: the packet itself is classified (its addresses, its ports)")
            e("meta.camus.feed = 1;")
            e("transition camus_classify;")
    else:
        with e.block(f"state parse_{lay.msg.name}"):
            if lay.framing is None:
                e("meta.camus.feed = 1;")
            e(f"packet.extract(hdr.{lay.msg.name});")
            if payload:
                e("// bytes past the header (a topic's payload) stay with the message: egress removes")
                e("// or keeps them with it")
                with e.block("transition select(meta.camus.extra)"):
                    e("0: camus_msg_kind;")
                    e("default: camus_msg_payload;")
            else:
                _kind_select(spec, e)
    if payload:
        with e.block("state camus_msg_payload"):
            e("packet.extract(hdr.camus_skip, (bit<32>)meta.camus.extra * 8);")
            e("transition camus_msg_kind;")
        with e.block("state camus_msg_kind"):
            _kind_select(spec, e)


def _classify_states(e: Emitter, spec: Spec, lay: Layout, arch: str, rest_slots: int) -> None:
    """Where classification starts: topics are split, Tofino reads the rest of a batch."""
    with e.block("state camus_classify"):
        if dns_topic(spec) is None:
            e("meta.camus.classify = 1;")
        else:
            e("// classified once the DNS name is read (a packet ending inside it is not)")
        if spec.topics:                   # v1model only (refused for TNA): split, then accept
            first, topic_lines = parser_states(spec, "accept")
            e(f"transition {first};")
        elif arch == "tna" and lay.framing is not None:
            e("meta.camus.rest_parsed = 0;      // Tofino's metadata starts undefined")
            with e.block("transition select(packet.lookahead<bit<16>>())"):
                e("CAMUS_MSG_BYTES: parse_camus_rest_0;")
                e("default: accept;")
        else:
            e("transition accept;")
    if spec.topics:
        e.lines += topic_lines
    if arch == "tna" and lay.framing is not None:
        # unrolled, each state setting its own count: Tofino's parser assigns constants but has
        # no adder for metadata, and egress then prunes by a table of precomputed lengths
        for i in range(rest_slots):
            with e.block(f"state parse_camus_rest_{i}"):
                if i == 0:
                    e("// the rest of the batch as headers, so that egress can prune it")
                e(f"packet.extract(hdr.camus_rest[{i}]);")
                e(f"meta.camus.rest_parsed = {i + 1};")
                if i + 1 < rest_slots:
                    with e.block("transition select(packet.lookahead<bit<16>>())"):
                        e(f"CAMUS_MSG_BYTES: parse_camus_rest_{i + 1};")
                        e("default: accept;")
                else:
                    e("transition accept;")


def table_blocks(spec: Spec, schema: P4Schema) -> tuple[str, str]:
    """Table declarations (the window registers and actions just before their tables) and the
    apply sequence, both from the schema."""
    decl, seq = Emitter(), Emitter()
    decl.depth, seq.depth = 1, 3
    stateful_done = False
    for t in schema.tables:
        if t.name.startswith(("t_update", "t_svar", "t_leaf")) and not stateful_done:
            if schema.arch == "v1model":
                _window_registers(spec, decl)
            stateful_done = True
        if t.name == "t_leaf_calls" and (dns := dns_topic(spec)) is not None:
            answer_action(dns, decl)
        if t.name == "t_leaf_calls" and ila_rewrites(spec):
            ila_action(decl)
        code = schema.codes.get(t.name)
        if code is not None:
            decl(f"action {code.action}(bit<{code.key.bits}> code) {{ {code.key.expr} = code; }}")
        declare_table(decl, t)
    for t in schema.apply_order():
        apply_table(seq, t, schema)
    return decl.text().rstrip("\n"), seq.text().rstrip("\n")


def _window_registers(spec: Spec, decl: Emitter) -> None:
    """query_counter windows: registers per counter (window number, count, sum) and the actions
    that update and load them (the tables that call them are the schema's). An endless counter
    (window 0) has no window number: its values only grow, or wrap at every(n)'s modulus."""
    counters = window_counters(spec, "v1model")
    for c in spec.counters:
        if c not in counters:
            decl(f"// query_counter {c.name}: {c.window_us} us is not a power of two; the switch numbers")
            decl("// windows with a shift, so rules using it are refused (the XDP target takes them)")
    for c in counters:
        shift = window_shift(c.window_us)
        endless = shift is None
        if endless:
            decl(f"// query_counter {c.name}: an endless count (no window)")
        else:
            decl(f"register<bit<32>>({c.size}) r_{c.name}_window;   // window number = now_us >> {shift}")
        decl(f"register<bit<64>>({c.size}) r_{c.name}_count;")
        decl(f"register<bit<64>>({c.size}) r_{c.name}_sum;")
        # what a register holds now: its value in the current window (0 in a new one)
        kept = "{}" if endless else "(window == now ? {} : 0)"

        def window_read() -> None:
            if not endless:
                decl(f"bit<32> now = (bit<32>)(standard_metadata.ingress_global_timestamp >> {shift});")
                decl("bit<32> window;")
                decl(f"r_{c.name}_window.read(window, index);")
                decl(f"r_{c.name}_window.write(index, now);")

        for path in counted_paths(spec):
            params = "bit<32> index, bit<64> modulus" if not path else "bit<32> index"
            with decl.block(f"action {update_action(c.name, path)}({params})"):
                window_read()
                decl("bit<64> count;")
                decl(f"r_{c.name}_count.read(count, index);")
                decl(f"count = {kept.format('count')} + 1;")
                if not path:     # every(n): the n-th match reads 0 (the rule tests `== 0`)
                    decl("r_" + c.name + "_count.write(index, count == modulus ? 0 : count);")
                    continue
                decl(f"r_{c.name}_count.write(index, count);")
                q = next(f for f in updatable_fields(spec) if f.path == path)
                decl("bit<64> sum;")
                decl(f"r_{c.name}_sum.read(sum, index);")
                decl(f"r_{c.name}_sum.write(index, {kept.format('sum')} + (bit<64>){field_expr(q, spec)});")
        for fn in ("count", "sum"):
            with decl.block(f"action {load_action(c.name, fn)}(bit<32> index)"):
                if not endless:
                    decl(f"bit<32> now = (bit<32>)(standard_metadata.ingress_global_timestamp >> {shift});")
                    decl("bit<32> window;")
                    decl(f"r_{c.name}_window.read(window, index);")
                decl("bit<64> value;")
                decl(f"r_{c.name}_{fn}.read(value, index);")
                decl(f"meta.camus.{SVAR_KEY} = {kept.format('value')};")


def _emits(spec: Spec, lay: Layout, arch: str, opts: P4Options) -> str:
    return "\n".join(f"        packet.emit(hdr.{n});" for _, n in _stack(lay, spec, arch, opts))


def _ip_checksum(lay: Layout) -> str:
    """The IPv4 header checksum, recomputed after TTL and length changes (IPv6 has none)."""
    if lay.ipv6:
        return "        // IPv6 has no header checksum"
    csum = field_name(lay.ip, 80, 16, "IPv4 header checksum")
    fields = ", ".join(f"hdr.{lay.ip.name}.{f.name}" for f in lay.ip.type.fields if f.name != csum)
    return (f"        update_checksum(hdr.{lay.ip.name}.isValid(),\n            {{ {fields} }},\n"
            f"            hdr.{lay.ip.name}.{csum}, HashAlgorithm.csum16);")


# A message whose custom actions the switch did not run itself (a DNS query it does not answer, a
# resolver's `resolve`): where XDP hands it to the host stack, the switch routes it, so it reaches
# the host it was sent to (the resolver) instead of being dropped for want of a port.
CALLS_ROUTED = """        if (meta.camus.call_id != 0 && meta.camus.deliver == 0 && meta.camus.drop == 0) {
            route = true;       // custom actions: on, as the host stack would send it
        }"""


def check_whole_program(spec: Spec, arch: str) -> None:
    """Raise BackendError (saying why) when no whole program can be made for `spec` on `arch`:
    the control block alone is written then, for the user's own program."""
    if is_attrs(spec):
        check_attrs_layout(spec, arch)
    else:
        layout_of(spec, arch)


def program_text(spec: Spec, opts: P4Options = P4Options()) -> str:
    """The complete P4_16 program for `spec` on `opts.arch` (deterministic)."""
    if opts.arch not in ARCHS:
        raise BackendError(f"unknown P4 architecture {opts.arch!r} (one of {', '.join(ARCHS)})")
    check_metadata_arch(spec, opts.arch)
    if is_attrs(spec):
        schema = p4_schema(spec, opts)
        return attrs_program_text(spec, opts, table_blocks(spec, schema), _header_types(spec), meta_slots(schema))
    lay = layout_of(spec, opts.arch)
    schema = p4_schema(spec, opts)
    decl, seq = table_blocks(spec, schema)
    slots = {
        "SPEC": spec.name,
        **meta_slots(schema),
        "CONSTANTS": _constants(spec, lay),
        "HEADER_TYPES": _header_types(spec, whole=True),
        "HEADER_MEMBERS": _members(spec, lay, opts.arch, opts),
        "TOPIC_TYPES": (metadata_types(spec) + "\n\n" if spec.topics else "") + (
            ila_metadata_type() + "\n\n" if ila_rewrites(spec) else ""),
        "TOPIC_MEMBERS": ("\n" + metadata_members(spec) if spec.topics else "") + (
            f"\n    {ILA_META}_t {ILA_META};" if ila_rewrites(spec) else ""),
        "PARSER_STATES": _parser_states(spec, lay, opts.arch, rest_slots=opts.tna_max_rest),
        "EGRESS_PARSER_STATES": _parser_states(spec, lay, opts.arch, "egress", opts.tna_max_rest) if opts.arch == "tna" else "",
        "TABLES": decl,
        "APPLY": seq,
        **egress_filter_blocks(schema),
        "EMITS": _emits(spec, lay, opts.arch, opts),
        "ETH": lay.eth.name,
        "ETH_DST": field_name(lay.eth, 0, 48, "destination MAC"),
        "ETH_SRC": field_name(lay.eth, 48, 48, "source MAC"),
        "IP": lay.ip.name,
        "L3": ip_route(lay)[0],
        "IP_DST": ip_route(lay)[1],
        "IP_TTL": field_name(lay.ip, 56, 8, "IPv6 hop limit") if lay.ipv6 else field_name(lay.ip, 64, 8, "IPv4 TTL"),
        "IP_CHECKSUM": _ip_checksum(lay),
        "UDP": lay.udp.name,
    }
    if lay.framing is None:
        slots.update(single_message())
        if (dns := dns_topic(spec)) is not None and opts.arch == "v1model":
            slots["INGRESS_TAIL"] = ingress_tail(lay, dns)
        elif ila_rewrites(spec) and opts.arch == "v1model":
            slots["INGRESS_TAIL"] = ila_ingress_tail(lay)
        if opts.arch == "v1model":
            slots["INGRESS_TAIL"] += "\n" + CALLS_ROUTED
    elif opts.arch == "v1model":
        slots.update(v1model_framed(spec, lay, opts))
    else:
        slots.update(tna_framed(spec, lay, opts))
    if opts.arch == "tna":                    # Tofino computes the checksum in its deparser (IPv4 only)
        csum = field_name(lay.ip, 80, 16, "IPv4 header checksum")
        slots["IP_CSUM"] = csum
        slots["IP_CSUM_FIELDS"] = ", ".join(f"hdr.{lay.ip.name}.{f.name}" for f in lay.ip.type.fields
                                            if f.name != csum)
    if opts.arch == "v1model":              # these sit one block deeper there (inside `if (feed == 1)`)
        for k in ("APPLY", "INGRESS_TAIL"):
            slots[k] = "\n".join("    " + line if line else line for line in slots[k].splitlines())
    return fill_template(f"{opts.arch}.p4", slots)
