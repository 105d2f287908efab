"""P4 back end: topic fields (MQTT topics, NATS subjects) split into levels by the v1model parser.

The tables test a topic through its variables (compiler/language/topics.py): `depth` (how many
levels), `sys` (MQTT: level 0 starts with '$') and level i's bytes, left-aligned and NUL-padded
to the field's width (0 when the topic has fewer levels). The XDP program computes them a word
at a time; on the switch a parser loop does it a byte at a time over copies of the field, kept in
metadata (`camus_<field>_t`):

    rest   the field shifted left past the bytes read (its top byte is the next one)
    start  the field shifted to where the current level starts
    len    the current level's length so far, in bits; pos the bytes read

At a separator and at the end (a NUL, or every byte read), level `depth - 1`, when it has a
variable, is `start` with all but its first `len` bits cleared. bmv2 runs such a loop (one state
per byte, the field's width in bytes at most); Tofino's parser can neither shift a wide field nor
loop over it, so topic specs are refused for TNA (p4_layout.refuse_topics). DNS names are read label
by label instead, from the packet (p4_dns).

`parser_walk` is that state machine in Python, state for state, over the same constants: the
tests check it against the topic semantics (`topics.derived_values`), since no p4c or bmv2 runs
on the build machines to check the P4 text itself (golden files pin that).
"""
from __future__ import annotations

from ...language.spec import QueryField, Spec
from ...language.topics import Topic
from . import dns as p4_dns
from .layout import meta_name
from ..emit import Emitter

DEPTH_BITS = 16
POS_BITS = 16





def variable_expr(q: QueryField) -> str:
    """The P4 expression of a topic variable (depth, sys or a level)."""
    member = f"l{q.level}" if q.part == "level" else q.part
    return f"meta.{meta_name(q.topic)}.{member}"


def metadata_type(t: Topic, scratch: bool = True) -> str:
    """A topic field's struct: its variables, and (`scratch`) the parser loop's working copies."""
    e = Emitter()
    with e.block(f"struct {meta_name(t.path)}_t"):
        e(f"bit<{DEPTH_BITS}> depth;      // levels in the {'name' if t.flavor == 'dns' else 'topic'}")
        if t.flavor == "mqtt":
            e("bit<1> sys;         // level 0 starts with '$' (wildcards skip it)")
        for i in range(t.levels):
            what = f"label {i} from the right, lower-cased" if t.flavor == "dns" else f"level {i}: its bytes"
            e(f"bit<{t.width}> l{i};      // {what}, left-aligned, NUL-padded; 0 if none")
        if t.flavor == "dns":
            e("bit<1> answering;   // answerDNS: the leaf answers (t_leaf_calls' answer_dns)")
            e("bit<32> answer;     // with this address (0.0.0.0 too: a sinkhole's answer)")
            if scratch:
                p4_dns.scratch_members(t, e)
        elif scratch:
            e(f"bit<{t.width}> rest;    // the field past the bytes read")
            e(f"bit<{t.width}> start;   // the field from the current level on")
            e(f"bit<{POS_BITS}> len;        // the current level's bits so far")
            e(f"bit<{POS_BITS}> pos;        // bytes read")
    return e.text().rstrip("\n")


def metadata_types(spec: Spec) -> str:
    """One struct per topic field (the whole program: with the parser loop's working copies)."""
    return "\n\n".join(metadata_type(t) for t in spec.topics.values())


def metadata_members(spec: Spec) -> str:
    return "\n".join(f"    {meta_name(t.path)}_t {meta_name(t.path)};" for t in spec.topics.values())


def parser_states(spec: Spec, after: str) -> tuple[str, list[str]]:
    """(the first state's name, the states' lines): every topic field split in turn, then `after`."""
    topics = list(spec.topics.values())
    lines: list[str] = []
    for k, t in enumerate(topics):
        nxt = f"{meta_name(topics[k + 1].path)}_begin" if k + 1 < len(topics) else after
        lines += _states(t, nxt)
    return (f"{meta_name(topics[0].path)}_begin" if topics else after), lines


def _states(t: Topic, after: str) -> list[str]:
    if t.flavor == "dns":
        return p4_dns.parser_states(t, after)
    e = Emitter()
    e.depth = 1
    m, s = f"meta.{meta_name(t.path)}", meta_name(t.path)
    field = f"hdr.{t.instance}.{t.name}"
    top = f"[{t.width - 1}:{t.width - 8}]"
    keep = f"{m}.start & ~((~(bit<{t.width}>)0) >> {m}.len)"     # the level's first `len` bits
    with e.block(f"state {s}_begin"):
        e(f"// {t.path}: '{t.sep.decode()}'-separated levels, NUL-padded ({t.flavor})")
        e(f"{m}.rest = {field};")
        e(f"{m}.start = {field};")
        e(f"{m}.depth = 1;")
        e(f"{m}.len = 0;")
        e(f"{m}.pos = 0;")
        for i in range(t.levels):            # (a target that does not zero metadata: no stale level)
            e(f"{m}.l{i} = 0;")
        if t.flavor == "mqtt":
            e(f"{m}.sys = 0;")
            with e.block(f"transition select({field}{top})"):
                e(f"0x24: {s}_sys;      // '$'")
                e(f"default: {s}_scan;")
        else:
            e(f"transition {s}_scan;")
    if t.flavor == "mqtt":
        with e.block(f"state {s}_sys"):
            e(f"{m}.sys = 1;")
            e(f"transition {s}_scan;")
    with e.block(f"state {s}_scan"):
        with e.block(f"transition select({m}.pos, {m}.rest{top})"):
            e(f"({POS_BITS}w{t.nbytes}, _): {s}_end;      // every byte read")
            e(f"(_, 8w0): {s}_end;          // the NUL padding")
            e(f"(_, 8w{t.sep[0]}): {s}_sep;         // '{t.sep.decode()}'")
            e(f"default: {s}_byte;")
    with e.block(f"state {s}_byte"):
        e(f"{m}.rest = {m}.rest << 8;")
        e(f"{m}.len = {m}.len + 8;")
        e(f"{m}.pos = {m}.pos + 1;")
        e(f"transition {s}_scan;")
    for kind, then in (("sep", f"{s}_next"), ("end", after)):
        with e.block(f"state {s}_{kind}"):
            with e.block(f"transition select({m}.depth)"):
                for i in range(t.levels):
                    e(f"{i + 1}: {s}_{kind}{i};")
                e(f"default: {then};        // a level without a variable")
        for i in range(t.levels):
            with e.block(f"state {s}_{kind}{i}"):
                e(f"{m}.l{i} = {keep};")
                e(f"transition {then};")
    with e.block(f"state {s}_next"):
        e("// past the separator: the next level starts")
        e(f"{m}.rest = {m}.rest << 8;")
        e(f"{m}.start = {m}.rest;")
        e(f"{m}.len = 0;")
        e(f"{m}.pos = {m}.pos + 1;")
        e(f"{m}.depth = {m}.depth + 1;")
        e(f"transition {s}_scan;")
    return e.lines


def parser_walk(t: Topic, raw: bytes) -> dict[str, int]:
    """The generated states run in Python on a field's bytes: the variables they leave, named as
    the tables' keys are (`<path>/depth`, `<path>/sys`, `<path>/<i>`)."""
    w, ones = t.width, (1 << t.width) - 1
    field = int.from_bytes(raw, "big")
    rest, start, length, pos, depth = field, field, 0, 0, 1
    out = {f"{t.path}/{i}": 0 for i in range(t.levels)}
    if t.flavor == "mqtt":
        out[f"{t.path}/sys"] = int(field >> (w - 8) == 0x24)

    def keep() -> None:
        if depth <= t.levels:
            out[f"{t.path}/{depth - 1}"] = start & ~(ones >> length) & ones

    while True:                                      # state _scan
        byte = rest >> (w - 8)
        if pos == t.nbytes or byte == 0:
            keep()                                   # states _end, _end<i>
            break
        if byte == t.sep[0]:
            keep()                                   # states _sep, _sep<i>, then _next
            rest = (rest << 8) & ones
            start, length, pos, depth = rest, 0, pos + 1, depth + 1
            continue
        rest = (rest << 8) & ones                    # state _byte
        length, pos = length + 8, pos + 1
    out[f"{t.path}/depth"] = depth
    return out
