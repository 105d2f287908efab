"""P4 back end: DNS queries on v1model — the name read label by label, the answer written by the switch.

The tables test a name through its variables (compiler/language/topics.py): `depth` and label i
from the right, ASCII lower-cased, left-aligned and NUL-padded to the field's width (0 when the
name has fewer labels). The XDP program computes them from the name in place; the switch's parser
reads the name one byte at a time into a stack of byte headers (`camus_qname`: the deparser writes
the question back as it came, however long it is) and builds the labels in metadata
(`camus_<field>_t`):

    cur    the current label so far, left-aligned: each byte or'ed in at `shift`
    l0..   the labels closed so far, the last one in l0; closing a label pushes the others up, so
           at the end l<i> is label i from the right (the XDP program's numbering)
    left   bytes left in the current label; pos: the name's bytes read (wire format)
    more   a label was read; cut: a NUL byte was met (the name's text ends there, as the XDP
           program's string does); text: the text is not empty; ok: the name was read whole

The text is the XDP program's: labels joined by dots (a dot inside a label separates too), cut at
the first NUL. A malformed name (a label over 63 bytes, or a name that does not end within the
field's bytes) has depth 0 and no labels, as in XDP; a packet that ends inside the name is not
classified (dropped).

Answers: a leaf whose custom action is `answerDNS(a.b.c.d)` is a `t_leaf_calls` entry of
`answer_dns(call_id, addr)` (p4_schema), which leaves the address in the name's metadata; after the
tables, a standard query (QR 0, opcode 0, one question) of type A, class IN, over untagged IPv4,
becomes its own answer: the rewrite of bpf/camus_dns.h, written by the deparser — addresses and
ports swapped, an authoritative answer header, the question as it came, one A record (the name as
a pointer to the question), whatever followed the question (an EDNS record) truncated away, the
IPv4 checksum recomputed, the UDP checksum 0 — and leaves through the port it came in on. Any
other query keeps its call id (calls.json), as a custom action does everywhere else.

`parser_walk` and `answer_walk` are those states and that rewrite in Python, state for state:
no p4c or bmv2 runs on the build machines, so the tests check them against the name semantics
(`topics.derived_values`) and against the XDP program's own answers in the kernel.
"""
from __future__ import annotations

import ipaddress

from ...language.topics import MAX_DNS_LABEL, Topic
from ..emit import Emitter
from .layout import Layout, field_slice, meta_name

QNAME, QUESTION, RECORD = "camus_qname", "camus_dns_q", "camus_dns_rr"
TTL = 60                       # bpf/camus_dns.h CAMUS_DNS_TTL
RECORD_BYTES = 16              # pointer 2, type 2, class 2, TTL 4, length 2, address 4
UPPER = ((0x41, 0xFF), (0x42, 0xFE), (0x44, 0xFC), (0x48, 0xF8), (0x50, 0xF8), (0x58, 0xFE), (0x5A, 0xFF))  # A-Z


def meta(t: Topic) -> str:
    return f"meta.{meta_name(t.path)}"


# -- the program's pieces --------------------------------------------------------------------------

def header_types() -> str:
    e = Emitter()
    with e.block("header camus_byte_t"):
        e("bit<8> b;           // one byte of the question's name, as it came")
    with e.block(f"header {QUESTION}_t"):
        e("bit<16> qtype;")
        e("bit<16> qclass;")
    with e.block(f"header {RECORD}_t"):
        e("bit<16> name;       // 0xc00c: the question's name")
        e("bit<16> rtype;")
        e("bit<16> rclass;")
        e("bit<32> ttl;")
        e("bit<16> rdlength;")
        e("bit<32> addr;")
    return e.text().rstrip("\n")


def stack(t: Topic) -> list[tuple[str, str]]:
    """The headers after the DNS header, in parse and emit order."""
    return [(f"camus_byte_t[{t.nbytes}]", QNAME), (f"{QUESTION}_t", QUESTION), (f"{RECORD}_t", RECORD)]


def scratch_members(t: Topic, e: Emitter) -> None:
    e(f"bit<{t.width}> cur;     // the current label so far, left-aligned")
    e("bit<16> shift;      // where its next byte goes")
    e("bit<8> left;        // bytes left in the current label")
    e("bit<16> pos;        // the name's bytes read")
    e("bit<16> room;       // bit 15: the next label would not end within the field")
    e("bit<1> more;        // a label was read")
    e("bit<1> cut;         // a NUL byte was met: the rest is not in the text")
    e("bit<1> text;        // the text is not empty")
    e("bit<1> ok;          // the name was read whole and well-formed")


def parser_states(t: Topic, after: str) -> list[str]:
    e = Emitter()
    e.depth = 1
    m, w = meta(t), t.width
    s = m.removeprefix("meta.")                  # the states are named after the struct
    last = f"hdr.{QNAME}.last.b"

    def push() -> None:
        e("// a label ends: the others move up one, it becomes label 0 from the right")
        for i in range(t.levels - 1, 0, -1):
            e(f"{m}.l{i} = {m}.l{i - 1};")
        if t.levels:
            e(f"{m}.l0 = {m}.cur;")
        e(f"{m}.cur = 0;")
        e(f"{m}.shift = {w - 8};")
        e(f"{m}.depth = {m}.depth + 1;")

    with e.block(f"state {s}_begin"):
        e(f"// {t.path}: a DNS name in wire format, labels counted from the right")
        for v in ("depth", *(f"l{i}" for i in range(t.levels)), "answering", "answer", "cur", "left", "pos", "more",
                  "cut", "text", "ok"):
            e(f"{m}.{v} = 0;")
        e(f"{m}.shift = {w - 8};")
        e(f"transition {s}_len;")
    with e.block(f"state {s}_len"):
        e(f"packet.extract(hdr.{QNAME}.next);      // a length byte")
        e(f"{m}.left = {last};")
        e(f"{m}.room = {t.nbytes - 1} - ({m}.pos + 1 + (bit<16>){last});")
        e(f"{m}.pos = {m}.pos + 1;")
        with e.block(f"transition select({last}, {m}.room[15:15])"):
            e(f"(0, _): {s}_root;          // the root label: the name ends")
            e(f"(0x40 &&& 0xc0, _): {s}_bad;   // a label over {MAX_DNS_LABEL} bytes (or a pointer)")
            e(f"(0x80 &&& 0x80, _): {s}_bad;")
            e(f"(_, 1): {s}_bad;           // the name would not end within {t.nbytes} bytes")
            e(f"default: {s}_label;")
    with e.block(f"state {s}_label"):
        with e.block(f"transition select({m}.more, {m}.cut)"):
            e(f"(1, 0): {s}_sep;           // the dot between two labels")
            e(f"default: {s}_go;")
    with e.block(f"state {s}_sep"):
        push()
        e(f"transition {s}_go;")
    with e.block(f"state {s}_go"):
        e(f"{m}.more = 1;")
        e(f"transition {s}_byte;")
    with e.block(f"state {s}_byte"):
        e(f"packet.extract(hdr.{QNAME}.next);")
        e(f"{m}.pos = {m}.pos + 1;")
        e(f"{m}.left = {m}.left - 1;")
        with e.block(f"transition select({m}.cut, {last})"):
            e(f"(1, _): {s}_next;          // past a NUL: not in the text")
            e(f"(0, 0): {s}_nul;")
            e(f"(0, 0x2e): {s}_dot;        // '.' inside a label separates too")
            for value, mask in UPPER:
                e(f"(0, 0x{value:02x} &&& 0x{mask:02x}): {s}_upper;")
            e(f"default: {s}_char;")
    for kind, byte in (("char", last), ("upper", f"({last} | 0x20)")):
        with e.block(f"state {s}_{kind}"):
            e(f"{m}.cur = {m}.cur | ((bit<{w}>){byte} << {m}.shift);")
            e(f"{m}.shift = {m}.shift - 8;")
            e(f"{m}.text = 1;")
            e(f"transition {s}_next;")
    with e.block(f"state {s}_dot"):
        e(f"{m}.text = 1;")
        push()
        e(f"transition {s}_next;")
    with e.block(f"state {s}_nul"):
        e(f"{m}.cut = 1;")
        e(f"transition {s}_next;")
    with e.block(f"state {s}_next"):
        with e.block(f"transition select({m}.left)"):
            e(f"0: {s}_len;")
            e(f"default: {s}_byte;")
    with e.block(f"state {s}_root"):
        e(f"{m}.ok = 1;")
        e("meta.camus.classify = 1;")
        with e.block(f"transition select({m}.text)"):
            e(f"1: {s}_last;")
            e(f"default: {s}_question;    // an empty text: no labels")
    with e.block(f"state {s}_last"):
        push()
        e(f"transition {s}_question;")
    with e.block(f"state {s}_question"):
        e(f"packet.extract(hdr.{QUESTION});   // a packet without it is classified, not answered")
        e(f"transition {after};")
    with e.block(f"state {s}_bad"):
        e("// malformed: no labels (the XDP program's reading), classified as such")
        e(f"{m}.depth = 0;")
        for i in range(t.levels):
            e(f"{m}.l{i} = 0;")
        e("meta.camus.classify = 1;")
        e(f"transition {after};")
    return e.lines


def answer_action(t: Topic, e: Emitter) -> None:
    """t_leaf_calls' action for a leaf that answers: its call id, and the address to answer with."""
    with e.block("action answer_dns(bit<16> call_id, bit<32> addr)"):
        e("meta.camus.call_id = call_id;      // the host answers what the switch cannot (calls.json)")
        e(f"{meta(t)}.answering = 1;")
        e(f"{meta(t)}.answer = addr;")
    e()


def ingress_tail(lay: Layout, t: Topic) -> str:
    """After the tables: an answerable query becomes its answer, sent back where it came from."""
    m, msg = meta(t), lay.msg
    assert msg is not None                         # check_dns_layout
    f = field_slice
    flags = f(msg, 16, 16, "DNS flags")
    vlan = f"!hdr.{lay.vlan.name}.isValid() && " if lay.vlan is not None else ""
    e = Emitter()
    e.depth = 2
    e("// DNS: a standard query for an A record, answered by the switch (bpf/camus_dns.h's rewrite)")
    with e.block(f"if ({m}.answering == 1 && {m}.ok == 1 && {m}.pos > 1 && {vlan}hdr.{QUESTION}.isValid() && "
                 f"hdr.{QUESTION}.qtype == 1 && hdr.{QUESTION}.qclass == 1 && "
                 f"{f(msg, 16, 5, 'DNS QR and opcode')} == 0 && {f(msg, 32, 16, 'DNS question count')} == 1 && "
                 f"{f(lay.ip, 0, 4, 'IPv4 version')} == 4)"):
        e(f"bit<16> dns_len = 12 + {m}.pos + 4 + {RECORD_BYTES};")
        e(f"bit<48> mac = {f(lay.eth, 0, 48, 'destination MAC')};")
        e(f"{f(lay.eth, 0, 48, 'destination MAC')} = {f(lay.eth, 48, 48, 'source MAC')};")
        e(f"{f(lay.eth, 48, 48, 'source MAC')} = mac;")
        e(f"bit<32> addr = {f(lay.ip, 96, 32, 'IPv4 source')};")
        e(f"{f(lay.ip, 96, 32, 'IPv4 source')} = {f(lay.ip, 128, 32, 'IPv4 destination')};")
        e(f"{f(lay.ip, 128, 32, 'IPv4 destination')} = addr;")
        e(f"{f(lay.ip, 16, 16, 'IPv4 total length')} = 20 + 8 + dns_len;")
        e(f"{f(lay.ip, 64, 8, 'IPv4 TTL')} = 64;")
        e(f"{f(lay.ip, 48, 16, 'IPv4 flags and fragment offset')} = 0x4000;   // DF, as resolvers send")
        e(f"bit<16> port = {f(lay.udp, 0, 16, 'UDP source port')};")
        e(f"{f(lay.udp, 0, 16, 'UDP source port')} = {f(lay.udp, 16, 16, 'UDP destination port')};")
        e(f"{f(lay.udp, 16, 16, 'UDP destination port')} = port;")
        e(f"{f(lay.udp, 32, 16, 'UDP length')} = 8 + dns_len;")
        e(f"{f(lay.udp, 48, 16, 'UDP checksum')} = 0;          // none (allowed over IPv4)")
        e(f"{flags} = 0x8400 | ({flags} & 0x0100);   // QR, AA, the client's RD; RCODE 0")
        e(f"{f(msg, 48, 16, 'DNS answer count')} = 1;")
        e(f"{f(msg, 64, 16, 'DNS authority count')} = 0;")
        e(f"{f(msg, 80, 16, 'DNS additional count')} = 0;      // an EDNS record is cut off below")
        e(f"hdr.{RECORD}.setValid();")
        e(f"hdr.{RECORD}.name = 0xc00c;")
        e(f"hdr.{RECORD}.rtype = 1;")
        e(f"hdr.{RECORD}.rclass = 1;")
        e(f"hdr.{RECORD}.ttl = {TTL};")
        e(f"hdr.{RECORD}.rdlength = 4;")
        e(f"hdr.{RECORD}.addr = {m}.answer;")
        e("truncate((bit<32>)(14 + 20 + 8 + dns_len));   // what followed the question goes")
        e("standard_metadata.egress_spec = standard_metadata.ingress_port;")
        e("standard_metadata.mcast_grp = 0;")
        e("meta.camus.deliver = 1;")
        e("meta.camus.call_id = 0;")
    return e.text().rstrip("\n")


# -- the same in Python (the tests' reference) -----------------------------------------------------

def parser_walk(t: Topic, data: bytes) -> tuple[dict[str, int], int, bool] | None:
    """The name states on `data` (the packet after the DNS header): (the variables, named as the
    tables' keys are, the name's wire length, whether it was read whole and well-formed); None
    when the packet ends inside the name (a parser error: not classified)."""
    w = t.width
    head = f"{t.instance}.{t.name}"
    levels = [0] * t.levels
    depth = cur = pos = more = cut = text = 0
    shift = w - 8

    def push() -> None:
        nonlocal cur, shift, depth
        if levels:
            levels[1:] = levels[:-1]
            levels[0] = cur
        cur, shift, depth = 0, w - 8, depth + 1

    def out(ok: bool) -> tuple[dict[str, int], int, bool]:
        got = {f"{head}/depth": depth if ok else 0}
        got.update({f"{head}/{i}": (v if ok else 0) for i, v in enumerate(levels)})
        return got, pos, ok

    while True:                                          # state _len
        if pos >= len(data):
            return None
        n = data[pos]
        room = (t.nbytes - 1 - (pos + 1 + n)) & 0xFFFF
        pos += 1
        if n == 0:                                       # _root
            if text:
                push()                                   # _last
            return out(True)
        if n & 0xC0 or room >> 15:
            return out(False)                            # _bad
        if more and not cut:
            push()                                       # _sep
        more = 1                                         # _go
        for _ in range(n):                               # _byte
            if pos >= len(data):
                return None
            b = data[pos]
            pos += 1
            if cut:
                continue
            if b == 0:
                cut = 1                                  # _nul
            elif b == 0x2E:
                text = 1                                 # _dot
                push()
            else:                                        # _char, _upper
                if any(b & mask == value for value, mask in UPPER):
                    b |= 0x20
                cur |= b << shift
                shift, text = shift - 8, 1


def answer_walk(frame: bytes, name_at: int, wire: int, addr: str) -> bytes | None:
    """The ingress tail on an untagged IPv4 frame whose name (at `name_at`, after Ethernet, IPv4,
    UDP and the DNS header) was read whole, `wire` bytes, and whose leaf answers with `addr`:
    None where its test fails (the query goes on), else the rewrite and the deparser's bytes."""
    eth, ip, udp, dns = frame[:14], frame[14:34], frame[34:42], frame[42:54]
    question = frame[name_at:name_at + wire + 4]
    if (wire < 2 or len(question) < wire + 4 or question[wire:] != b"\x00\x01\x00\x01" or dns[2] & 0xF8
            or dns[4:6] != b"\x00\x01" or ip[0] >> 4 != 4):
        return None
    dns_len = 12 + wire + 4 + RECORD_BYTES
    ip_new = bytearray(ip)
    ip_new[12:16], ip_new[16:20] = ip[16:20], ip[12:16]
    ip_new[2:4] = (20 + 8 + dns_len).to_bytes(2, "big")
    ip_new[8] = 64
    ip_new[6:8] = b"\x40\x00"
    ip_new[10:12] = b"\0\0"
    total = sum(int.from_bytes(ip_new[i:i + 2], "big") for i in range(0, 20, 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    ip_new[10:12] = (~total & 0xFFFF).to_bytes(2, "big")
    flags = int.from_bytes(dns[2:4], "big")
    dns_new = dns[:2] + (0x8400 | (flags & 0x0100)).to_bytes(2, "big") + dns[4:6] + b"\0\x01\0\0\0\0"
    record = (b"\xc0\x0c\x00\x01\x00\x01" + TTL.to_bytes(4, "big") + b"\x00\x04" +
              ipaddress.IPv4Address(addr).packed)
    return (eth[6:12] + eth[:6] + eth[12:14] + bytes(ip_new) + udp[2:4] + udp[0:2] +
            (8 + dns_len).to_bytes(2, "big") + b"\0\0" + dns_new + question + record)
