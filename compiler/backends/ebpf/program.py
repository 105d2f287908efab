"""eBPF back end, static part: the XDP program for a spec.

The program text is bpf/camus_xdp.h + a generated `camus_gen.h` + bpf/camus_xdp.c. Only the
spec shapes the generated part (feed port, framing, message size and how to read each query
field); the rules reach the program as map contents (`ebpf_tables`), so a subscription change
never reloads it. Output is deterministic (golden-tested).
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

from ...language.spec import QueryField, Role, Spec
from ...codec.attrs import ATTRS_FRAMINGS, ETHERTYPE_ATTRS, dictionary
from ...ir.labels import LABEL_WIDTH
from .custom import dns_answers, ila_rewrites
from ..emit import BackendError, Emitter



RADIX_LEVELS = 4      # radix range tables: bucket lookups before a range test gives up
PORT_WORDS = 4        # bpf/camus_xdp.h CAMUS_PORT_WORDS unless defined: 256 subscriber ports
MAX_PORT_WORDS = 64   # 4,096 subscriber ports on one host
# The bit-vector stage ANDs this many fields inside its segment loop (bpf/camus_bv.h); fields
# beyond them are ANDed once per word before it. The verifier walks the segment loop
# CAMUS_MAX_BV_SEGS times, so its cost grows with the fields in it: 10 fields x 2048 segments
# verify in about 0.7M of the 1M instructions allowed, 16 in 0.92M.
BV_LOOP_FIELDS = 10
MAX_QUERY_FIELDS = 32  # the stage keeps one bitmap pointer per field on the 512-byte BPF stack


BV_MAX_PORT_WORDS = 16  # a program with wider port sets has no bit-vector stage (the verifier's budget)


def max_bv_segs_for(fields: int, columns: int = 0, port_words: int = PORT_WORDS) -> int:
    """The most bit-vector segments a program with this many query fields can hold: the
    verifier's work grows with segments x fields in the loop plus the per-field lookups
    (measured: 10 fields x 2048 segments 0.65M instructions, 12 x 2048 0.69M, 16 x 1024 0.44M,
    32 x 1024 0.57M).
    A program with port columns (whose segments only hold drops, custom actions and counted
    rules) spends part of the budget on them. Wider port sets cost more per segment and per
    path (8 fields, 1,024 segments: 4 words 0.38M, 16 words 0.60M; 2,048 at 16 words 0.93M)."""
    if port_words > BV_MAX_PORT_WORDS:
        return 0
    if columns:
        return 256
    most = 2048 if fields <= 12 else 1024
    # 16 words: 12 fields x 1,024 segments 0.92M, 32 x 512 0.92M: a quarter keeps a margin
    return most // 4 if port_words > PORT_WORDS * 2 else most


def max_bv_columns_for(fields: int, port_words: int = PORT_WORDS) -> int:
    """The most port-column quads and port-run pieces (bv_columns) a program with this many
    query fields can hold beside max_bv_segs_for(fields, columns) segments: the verifier walks
    both loops that many times (measured with 256 segments: 10 fields x 512 0.55M instructions,
    12 x 512 0.57M, 16 x 512 0.59M, 32 x 256 0.54M, 32 x 512 0.72M; 10 x 1024 0.89M). With 16
    port words: 16 x 512 0.89M, 32 x 256 0.96M, so half."""
    most = 512 if fields <= 16 else 256
    return most // 2 if port_words > PORT_WORDS * 2 else most


def max_bv_words_for(fields: int) -> int:
    """The longest bitmaps (64-bit words: terms / 64) a program with this many query fields can
    AND: fields beyond BV_LOOP_FIELDS go through a loop over every word, which the verifier
    walks CAMUS_BV_WORDS times; without one the words only size the maps."""
    return 4096 if fields <= BV_LOOP_FIELDS else 256


def _no_layout(spec: Spec, instance: str) -> str:
    """Why a query field's header has no byte layout the program could read."""
    inst = spec.instances[instance]
    if inst.layout == "pragma":
        return (f"header '{instance}' is declared only by query_field pragmas, so its byte layout is unknown: "
                f"declare it with its fields in packet order (`header {instance}_t {{ bit<16> a; ... }}`) and the "
                f"header stack (`struct headers {{ ethernet_t ethernet; ipv4_t ipv4; udp_t udp; {instance}_t "
                f"{instance}; }}`)")
    if inst.role is Role.METADATA:
        return f"'{instance}' is switch metadata, not in the packet"
    if inst.layout == "builtin":
        return (f"'{instance}' is a well-known header the XDP parser does not read (it finds Ethernet, IPv4 or "
                f"IPv6, and UDP by itself)")
    return f"header '{instance}' is not in the spec's header stack (declare the headers and `struct headers`)"


@dataclass(frozen=True)
class EbpfLimits:
    max_msgs: int = 12            # messages per packet the program classifies (unrolled)
    max_states: int = 1 << 18     # desc[] and leaf[] size: state ids must stay below this
    max_exact: int = 1 << 18
    max_bounds: int = 1 << 16     # search-tree nodes (8 interval starts each; clustered ranges only)
    max_rnodes: int = 1 << 20     # radix range buckets (16 bytes each)
    max_rsub: int = 1 << 16       # radix sub-tables (buckets holding several starts)
    max_lpm: int = 1 << 16
    max_updates: int = 1 << 12
    max_svars: int = 16
    max_labels: int = 1 << 16     # topic level labels, both banks (compiler/ir/labels.py)
    # The bit-vector stage's capacity (attach sizes it from the rule set: ebpf_bitvector.sized_limits)
    bv_words: int = 64            # 64-bit words per bitmap (terms / 64), a power of two, at most
                                  # max_bv_words_for(query fields)
    max_bv_bitmaps: int = 2048    # distinct bitmaps, both banks (bv_words * 8 bytes each)
    max_bv_segs: int = 1024       # runs of terms with one leaf within one word (one map value per bank);
                                  # at most max_bv_segs_for(query fields): the verifier's budget
    bv_columns: int = 0           # port-column word quads and port-run pieces (structure/bv_layout.py);
                                  # 0: no port columns (the program walks planes and segments only)
    port_words: int = 4           # 64-bit words of a port set (64 subscriber ports each), a power of two up
                                  # to MAX_PORT_WORDS; attach sizes it from the ports (fitted_contents)
    parse_only: bool = False      # benchmark floor: parse and read fields, classify nothing, drop

    @property
    def range_levels(self) -> int:
        """Levels of an 8-ary search tree holding max_bounds interval starts."""
        levels, size = 1, 8
        while size < self.max_bounds:
            levels, size = levels + 1, size * 8
        return levels


def _read_expr(base: str, q: QueryField) -> str:
    """C expression reading a big-endian field at a bit offset from `base` (already checked)."""
    byte, bit = divmod(q.offset, 8)
    if bit == 0 and q.width in (8, 16, 32, 64):
        t = {8: "__u8", 16: "__u16", 32: "__u32", 64: "__u64"}[q.width]
        load = f"*({t} *)({base} + {byte})"
        return {8: f"(__u64){load}", 16: f"(__u64)bpf_ntohs({load})",
                32: f"(__u64)bpf_ntohl({load})", 64: f"__builtin_bswap64({load})"}[q.width]
    nbytes = (bit + q.width + 7) // 8
    if nbytes > 8:
        raise BackendError(f"{q.path}: fields spanning more than 8 bytes are not supported")
    parts = " | ".join(f"((__u64)((__u8 *){base})[{byte + i}] << {8 * (nbytes - 1 - i)})"
                       for i in range(nbytes))
    spare = nbytes * 8 - bit - q.width
    return f"((({parts}) >> {spare}) & 0x{(1 << q.width) - 1:x}ULL)"


def _switch(e: Emitter, signature: str, cases: list[str], default: str) -> None:
    """An inline function returning cases[idx] (the verifier wants constant offsets)."""
    with e.block(f"static __always_inline {signature}"):
        e("switch (idx) {")
        for i, value in enumerate(cases):
            e(f"case {i}: return {value};")
        e(f"default: return {default};")
        e("}")


def n_svars(spec: Spec, limits: EbpfLimits) -> int:
    return min(limits.max_svars, sum(c.size for c in spec.counters))


def generate_header(spec: Spec, limits: EbpfLimits) -> str:
    for name in ("bv_words", "max_bv_segs", "bv_columns", "port_words"):
        n = getattr(limits, name)
        if (n < 1 and name != "bv_columns") or n & (n - 1):
            raise BackendError(f"{name} must be a power of two (is {n})")
    if not PORT_WORDS <= limits.port_words <= MAX_PORT_WORDS:
        raise BackendError(f"port_words must be {PORT_WORDS}..{MAX_PORT_WORDS} (is {limits.port_words})")
    if not 1 <= limits.max_msgs <= 16:
        raise BackendError("messages per packet must be 1..16 (one tail call each; 16-bit keep masks)")
    for q in spec.query_fields:
        if not spec.located(q.instance):     # named by a pragma only: no byte layout to read
            raise BackendError(f"the XDP back end cannot read {q.path}: {_no_layout(spec, q.instance)}")
        if q.topic and q.role is not Role.MESSAGE:
            raise BackendError(f"the XDP back end reads topics in the message header only; {q.topic} is not")
        if q.width > 64 and q.part != "level":        # topic levels are matched by label ids
            raise BackendError(f"the XDP back end reads query fields up to 64 bits; {q.path} is {q.width}")
        if q.role in (Role.VLAN, Role.FRAMING):
            raise BackendError(f"the XDP back end cannot read {q.path} ({q.role.value} header fields)")
    if any(a[0] == "fwd" for a in spec.default_atoms):    # port bits depend on the rule set
        raise BackendError(f"query_default_action({spec.default_action}) forwards; an XDP host applies a "
                           "default of custom actions (handed to the host stack) or drop only")
    if spec.framing.kind in ATTRS_FRAMINGS and any(q.role is not Role.MESSAGE for q in spec.query_fields):
        raise BackendError(f"{spec.framing.kind}: the XDP program classifies the attributes only (no IP/UDP "
                           "header in these frames)")
    if spec.framing.kind not in ("none", "moldudp64", *ATTRS_FRAMINGS):
        raise BackendError(f"framing {spec.framing.kind} is not supported")
    nf, ns = len(spec.query_fields), n_svars(spec, limits)
    if nf > MAX_QUERY_FIELDS:
        raise BackendError(f"the XDP program classifies at most {MAX_QUERY_FIELDS} query fields; spec "
                           f"'{spec.name}' has {nf} (drop the @pragma query_field lines of fields no rule tests)")
    for what, asked, most in (("words", limits.bv_words, max_bv_words_for(nf)),
                              ("segments", limits.max_bv_segs if limits.port_words <= BV_MAX_PORT_WORDS else 0,
                               max_bv_segs_for(nf, limits.bv_columns, limits.port_words)),
                              ("port columns", limits.bv_columns, max_bv_columns_for(nf, limits.port_words))):
        if asked > most:
            raise BackendError(f"bit-vector {what}: {asked} asked, a program with {nf} query fields holds at "
                               f"most {most} (the kernel verifier's instruction budget)")
    e = Emitter()
    e(f"/* generated by camus-xdp from spec '{spec.name}': do not edit */")
    for name, value in (("CAMUS_N_FIELDS", nf), ("CAMUS_N_SVARS", ns), ("CAMUS_N_VARS", nf + ns),
                        ("CAMUS_VAR_SLOTS", 1 << (nf + ns - 1).bit_length()),
                        ("CAMUS_MAX_MSGS", limits.max_msgs), ("CAMUS_MAX_STATES", limits.max_states),
                        ("CAMUS_MAX_EXACT", limits.max_exact), ("CAMUS_MAX_BOUNDS", limits.max_bounds),
                        ("CAMUS_MAX_RNODES", limits.max_rnodes), ("CAMUS_MAX_RSUB", limits.max_rsub),
                        ("CAMUS_RADIX_LEVELS", RADIX_LEVELS),
                        ("CAMUS_MAX_LPM", limits.max_lpm), ("CAMUS_MAX_UPDATES", limits.max_updates),
                        ("CAMUS_MAX_SVARS", max(1, ns)), ("CAMUS_RANGE_LEVELS", limits.range_levels),
                        ("CAMUS_BV_WORDS", limits.bv_words), ("CAMUS_MAX_BV_BITMAPS", limits.max_bv_bitmaps),
                        ("CAMUS_MAX_BV_SEGS", limits.max_bv_segs), ("CAMUS_BV_COLUMNS", limits.bv_columns),
                        ("CAMUS_BV_LOOP_FIELDS", min(nf, BV_LOOP_FIELDS)),
                        ("CAMUS_BV_STAGE", int(limits.port_words <= BV_MAX_PORT_WORDS)),
                        ("CAMUS_FRAMING_MOLD", int(spec.framing.kind == "moldudp64")),
                        ("CAMUS_FRAMING_ATTRS", {"attrs_pairs": 1, "attrs_bitmask": 2}.get(spec.framing.kind, 0)),
                        ("CAMUS_MSG_BYTES", spec.message_min_bytes),
                        ("CAMUS_PARSE_ONLY", int(limits.parse_only))):
        e(f"#define {name} {value}")
    if any(a[0] == "call" for a in spec.default_atoms):   # a message no rule delivers goes up
        e(f"#define CAMUS_DEFAULT_FLAGS CAMUS_LEAF_CALL   /* query_default_action({spec.default_action}) */")
    ports = " || ".join(f"(p) == {p}" for p in spec.udp_ports) or "1"
    e(f"#define CAMUS_UDP_PORT_OK(p) ({ports})")
    mtype_field = spec.message_type_field()
    if mtype_field is not None and spec.message_type is not None:
        e(f"#define CAMUS_MSG_TYPE_OK(msg) ({_read_expr('(msg)', mtype_field)} == {spec.message_type[1]})")
    else:
        e("#define CAMUS_MSG_TYPE_OK(msg) 1")
    e()
    # Per-packet fields: read once, from the header they live in.
    with e.block("static __always_inline int camus_packet_fields(__u64 *v, void *l2, void *l3, void *l4, void *end)"):
        for i, q in enumerate(spec.query_fields):
            if q.role is Role.MESSAGE:
                continue
            base = {Role.ETHERNET: "l2", Role.IPV4: "l3", Role.IPV6: "l3", Role.UDP: "l4"}[q.role]
            need = (q.offset + q.width + 7) // 8
            if q.role in (Role.IPV4, Role.IPV6):    # a field of the other IP version's packets: not the feed
                version, size = (4, 20) if q.role is Role.IPV4 else (6, 40)
                e(f"if (l3 + {size} > end || (*(__u8 *)l3 >> 4) != {version})")
                e("    return 0;")
            e(f"if ({base} + {need} > end)")
            e("    return 0;")
            e(f"v[{i}] = {_read_expr(base, q)};   /* {q.path} */")
        e("return 1;")
    e()
    with e.block("static __always_inline void camus_message_fields(__u64 *v, void *msg)"):
        for i, q in enumerate(spec.query_fields):
            if q.role is Role.MESSAGE and not q.topic:
                e(f"v[{i}] = {_read_expr('msg', q)};   /* {q.path} */")
    e()
    _topic_defines(e, spec, limits)
    _attr_defines(e, spec)
    _switch(e, "__u32 camus_var_width(__u32 idx)",
            [str(LABEL_WIDTH if q.part == "level" else q.width) for q in spec.query_fields], "64")
    return e.text()


def _attr_defines(e: Emitter, spec: Spec) -> None:
    """Attribute framings: the dictionary (compiler/codec/attrs.py) as two switches."""
    if spec.framing.kind not in ATTRS_FRAMINGS:
        return
    attrs = dictionary(spec)
    index = {q.path: i for i, q in enumerate(spec.query_fields)}
    e(f"#define CAMUS_N_ATTRS {len(attrs)}")
    e(f"#define CAMUS_ETHERTYPE_ATTRS 0x{ETHERTYPE_ATTRS:04x}")
    _switch(e, "__u32 camus_attr_bytes(__u32 idx)", ["0"] + [str(a.width // 8) for a in attrs], "0")
    with e.block("static __always_inline void camus_attr_store(__u64 *v, __u32 id, __u64 val)"):
        e("switch (id) {")
        for a in attrs:
            if a.path in index:
                e(f"case {a.id}: v[{index[a.path]}] = val; break;   /* {a.path} */")
        e("default: break;")
        e("}")


def _topic_defines(e: Emitter, spec: Spec, limits: EbpfLimits) -> None:
    """Topic fields: camus_topic.h's sizes and the calls that fill their variables."""
    e(f"#define CAMUS_DNS_NAMES {int(any(t.flavor == 'dns' for t in spec.topics.values()))}")
    e(f"#define CAMUS_DNS_ANSWERS {int(dns_answers(spec))}")
    e(f"#define CAMUS_ILA {int(ila_rewrites(spec))}")
    if not spec.topics:
        e("#define CAMUS_READ_TOPICS(v, msg, end, avail, bank)")
        return
    index = {q.path: i for i, q in enumerate(spec.query_fields)}
    most = max(t.nbytes for t in spec.topics.values())
    buf = 1 << (2 * (most + 8) - 1).bit_length()       # half of it holds the field + 8
    for name, value in (("CAMUS_TOPICS", 1), ("CAMUS_TOPIC_BUF", buf), ("CAMUS_LABEL_WORDS", (most + 7) // 8),
                        ("CAMUS_MAX_LABELS", limits.max_labels)):
        e(f"#define {name} {value}")
    calls = []
    for t in spec.topics.values():
        head = f"{t.instance}.{t.name}"
        first, lv0 = index[f"{head}/depth"], index[f"{head}/0"]
        at = t.offset // 8
        if t.flavor == "dns":        # `avail`: the datagram's bytes from the message on
            calls.append(f"camus_dns_name(v, (const __u8 *)(msg) + {at}, (end), (avail) - {at}, {t.nbytes}, "
                         f"{first}, {lv0}, {t.levels}, bank);")
            continue
        sep = "'/'" if t.flavor == "mqtt" else "'.'"
        calls.append(f"camus_topic(v, (msg) + {at}, {t.nbytes}, {first}, {lv0}, {t.levels}, {sep}, "
                     f"{int(t.flavor == 'mqtt')}, bank);")
    e("#define CAMUS_READ_TOPICS(v, msg, end, avail, bank) do { \\")
    for c in calls:
        e(f"    {c} \\")
    e("} while (0)")


def program_text(spec: Spec, limits: EbpfLimits | None = None) -> str:
    """The complete C source BCC compiles (what `camus-xdp compile --target ebpf --emit` prints)."""
    lim = limits or EbpfLimits()
    bpf = files("camus.bpf")                    # bpf/, shipped as package data
    shared = bpf.joinpath("camus_xdp.h").read_text()
    main = bpf.joinpath("camus_xdp.c").read_text().replace("/*@CAMUS_BV_H@*/", bpf.joinpath("camus_bv.h").read_text())
    main = main.replace("/*@CAMUS_L2_H@*/", bpf.joinpath("camus_l2.h").read_text())
    main = main.replace("/*@CAMUS_ATTRS_H@*/", bpf.joinpath("camus_attrs.h").read_text()
                        if spec.framing.kind in ATTRS_FRAMINGS else "")
    main = main.replace("/*@CAMUS_TOPIC_H@*/", bpf.joinpath("camus_topic.h").read_text() if spec.topics else "")
    main = main.replace("/*@CAMUS_DNS_H@*/", bpf.joinpath("camus_dns.h").read_text() if dns_answers(spec) else "")
    main = main.replace("/*@CAMUS_ILA_H@*/", bpf.joinpath("camus_ila.h").read_text() if ila_rewrites(spec) else "")
    prune = bpf.joinpath("camus_prune.h").read_text()      # pasted into both ways a copy leaves
    tc = bpf.joinpath("camus_tc.c").read_text().replace("/*@CAMUS_PRUNE_H@*/", prune)
    fan = bpf.joinpath("camus_fan.c").read_text().replace("/*@CAMUS_PRUNE_H@*/", prune)
    if lim.port_words != PORT_WORDS:              # the shared header's structs are sized by it
        shared = f"#define CAMUS_PORT_WORDS {lim.port_words}   /* {64 * lim.port_words} subscriber ports */\n" + shared
    return (main.replace("/*@CAMUS_XDP_H@*/", shared)
                .replace("/*@CAMUS_GEN_H@*/", generate_header(spec, lim))
                .replace("/*@CAMUS_TC_C@*/", tc + fan))
