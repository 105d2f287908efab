"""eBPF back end for the bit-vector stage: its map contents (bpf/camus_bv.h runs them).

State ids in a bank: 1 is the root (descriptor kind BV), 2 + i the interval table of query
field i (every field has one; an unconstrained field one interval holding every term), then one
id per bitmap (the interval tables' "next states": no descriptor, so they are flagged final),
then the leaves. Keeping everything in the state-id space lets the usual bank shift move a
bit-vector table set into the other half of the maps, and the root flip switch to it atomically.
"""
from __future__ import annotations


from ...ir.labels import long_label_count
from ...ir.pipeline import COLUMN_CHUNK, BitvectorPlane, BitvectorStage, Pipeline
from ...structure.bv_layout import reorder_columns
from ...language.spec import Spec
from .contents import (CapacityError, MapContents, direct_desc, leaf_flags, port_words_for, put_start,
                       range_desc)
from .program import PORT_WORDS, EbpfLimits, max_bv_columns_for, max_bv_segs_for, max_bv_words_for


KIND_BV = 5                 # bpf/camus_xdp.h CAMUS_KIND_BV
LEAF_COUNTED = 8            # bpf/camus_xdp.h CAMUS_LEAF_COUNTED
LEAF_WIDE = 16              # bpf/camus_xdp.h CAMUS_LEAF_WIDE: a port above 63 (the kernel ORs every word)
SEG_PLANE_SHIFT = 8         # bpf/camus_xdp.h CAMUS_SEG_PLANE_SHIFT: a segment's prefix plane, in its flags
ONE_WORD_SHIFT = 16         # bpf/camus_xdp.h CAMUS_ONE_WORD_SHIFT
STATE_BV = 0x3FFFFFFF       # bpf/camus_xdp.h CAMUS_STATE_BV: a message the stage classified


BITMAP_BYTES = 512 << 20    # the most map memory the stage's bitmaps may take on a host


def inline_ports(ports: tuple[int, ...], flags: int, words: int) -> tuple[tuple[int, ...], int]:
    """A bit-vector leaf's ports and flags as its segments and plane entries hold them (bpf/
    camus_bv.h bv_unite_leaf): a program of 4 port words keeps the words (WIDE past word 0); a
    wider one's leaf with its ports in one word k holds that word first and k in its flags, else
    WIDE with every word."""
    if words <= PORT_WORDS:
        return ports, flags
    used = [i for i, w in enumerate(ports) if w]
    if len(used) > 1:
        return ports, flags | LEAF_WIDE
    k = used[0] if used else 0
    return (ports[k] if used else 0,), (flags & ~LEAF_WIDE) | k << ONE_WORD_SHIFT


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def sized_limits(p: Pipeline, base: EbpfLimits, fields: int, n_ports: int | None = None) -> EbpfLimits:
    """`base` with the labels map sized for the long topic levels and DNS labels `p` names, and
    the bit-vector capacities grown to hold `p` with headroom (updates may grow
    the rule set; both banks), within what the verifier accepts for a program with `fields`
    query fields and within BITMAP_BYTES of bitmaps. Raises CapacityError when the stage
    cannot fit an XDP host at all. `n_ports`: the ports a ports file numbers (else the rules')."""
    from dataclasses import replace

    longs = long_label_count(p)
    if 2 * longs > base.max_labels:      # DNS names, topic levels: both banks, twice the room
        base = replace(base, max_labels=_pow2(4 * longs))
    bv = p.bitvector
    if bv is None:
        return base
    max_words = max_bv_words_for(fields)
    needed = bv.words
    # the program's port words: a ports file's order may spread the columns over every one
    port_words = port_words_for(max(n_ports or 0, len({x for a in p.leaves.values() for x in a.ports})))
    if bv.columns is not None:
        needed += max(0, (port_words * max(bv.columns.layers)) - bv.columns.words)
    if bv.words > max_words:
        raise CapacityError(f"bit-vector stage: {bv.terms} terms; an XDP host with {fields} query fields "
                            f"classifies at most {64 * max_words} with this stage (split the subscriptions "
                            f"across hosts, or group them)")
    columns = 0
    if bv.columns is not None:      # the segments hold only leaves no column serves
        segs = len({(t // 64, bv.term_leaf[t]) for t in range(bv.prefix, bv.terms)}) + 1
        walk = max(max(bv.columns.layers) * port_words // 4, len(port_runs(bv)[0]), 1)
        most_columns = max_bv_columns_for(fields, port_words)
        if walk > most_columns:
            raise CapacityError(f"bit-vector stage: {walk} port-column quads or run pieces; a program with "
                                f"{fields} query fields and {64 * port_words} ports holds {most_columns}")
        columns = min(most_columns, _pow2(2 * walk))
    else:
        segs = bv.words + len(p.leaves)
    max_segs = max_bv_segs_for(fields, columns, port_words)
    if segs > max_segs:
        raise CapacityError(f"bit-vector stage: {segs} segments (words + distinct actions); a program with "
                            f"{fields} query fields holds {max_segs}")
    # room to grow: twice the words while small, a quarter more once large (bitmaps are words long)
    grown = 2 * needed if needed <= 128 else needed + needed // 4
    words = max(base.bv_words, min(max_words, _pow2(grown)))
    for headroom in (4, 2):             # both banks, room to grow; else both banks exactly
        bitmaps = max(base.max_bv_bitmaps, _pow2(headroom * (len(bv.bitmaps) + 1)))
        if bitmaps * words * 8 <= BITMAP_BYTES:
            break
    else:
        raise CapacityError(f"bit-vector stage: {len(bv.bitmaps)} distinct bitmaps of {words * 8} bytes need "
                            f"{bitmaps * words * 8 >> 20} MiB of maps in both banks; the limit is "
                            f"{BITMAP_BYTES >> 20} MiB (fewer distinct constants per field, or split the "
                            f"subscriptions across hosts)")
    return replace(base, bv_words=words, max_bv_bitmaps=bitmaps, bv_columns=columns,
                   max_bv_segs=min(max_segs, max(base.max_bv_segs if not columns else 64, _pow2(2 * segs))))


def bitmap_words(b: int, words: int) -> tuple[int, ...]:
    return tuple((b >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for w in range(words))


def _runs(bv: BitvectorStage, start: int, stop: int, leaf_state: dict[int, int]) -> list[tuple[int, int, int]]:
    """(mask, word, leaf state) for every run of terms with one leaf in [start, stop), cut at
    word boundaries."""
    out: list[tuple[int, int, int]] = []
    t = start
    while t < stop:
        leaf = bv.term_leaf[t]
        end = t
        while end < stop and bv.term_leaf[end] == leaf:
            end += 1
        a = t
        while a < end:
            w = a // 64
            b = min(end, (w + 1) * 64)
            mask = ((1 << (b - a)) - 1) << (a - w * 64)
            out.append((mask, w, leaf_state[leaf]))
            a = b
        t = end
    return out


def segments(bv: BitvectorStage, leaf_state: dict[int, int]) -> list[tuple[int, int, int, int]]:
    """(mask, word, leaf state, next) for every run of terms with one leaf after the prefix
    (the kernel settles the prefix word by word, without segments). `next` is the next leaf's
    first run: once a leaf matched, its other runs cannot add anything."""
    rest = _runs(bv, bv.prefix, bv.terms, leaf_state)
    nxt = [len(rest)] * len(rest)
    for j in range(len(rest) - 2, -1, -1):
        nxt[j] = j + 1 if rest[j + 1][2] != rest[j][2] else nxt[j + 1]
    return [(mask, word, leaf, n) for (mask, word, leaf), n in zip(rest, nxt)]


def group_bits(plane: BitvectorPlane) -> tuple[dict[int, int], int, int]:
    """For a prefix plane: each leaf's settled bit (the top bit of its group in the plane's
    words), all of them (`tops`), and the groups' other bits (`rest`). A group kept a bit after
    the AND exactly when ((word & ~tops) + rest | word) & tops has its top bit: the add carries
    into the top bit from any lower bit and never past it."""
    share = plane.share
    tbit = {leaf: 1 << ((g + 1) * share - 1) for g, leaf in enumerate(plane.leaves)}
    rest = sum(((1 << (share - 1)) - 1) << (g * share) for g in range(len(tbit)))
    return tbit, sum(tbit.values()), rest


def port_columns(bv: BitvectorStage, out: MapContents) -> BitvectorStage:
    """`bv` with each port's column at the port's bit in `out` (its ports file's order): as
    compiled when the orders agree, else its columns moved (structure/bv_layout.reorder_columns)."""
    assert bv.columns is not None
    index = {p: i for i, p in enumerate(out.ports)}
    if all(index[p] == i for i, p in enumerate(bv.columns.ports) if p is not None):
        return bv
    return reorder_columns(bv, index)


def column_words(bv: BitvectorStage) -> list[tuple[int, int, int, int]]:
    """The kernel's port-column entries: per four words of each group, (the group's ports
    with a term in these words or later ones, the first word, group, the next group's first
    entry)."""
    cols = bv.columns
    assert cols is not None
    entries: list[tuple[int, int, int, int]] = []
    word = 0
    for g, n in enumerate(cols.layers):
        present = []
        for layer in range(n):
            t = 64 * (word + layer)
            present.append(sum(1 << b for b in range(64) if bv.term_leaf[t + b]))
        need = 0
        needs = []
        for mask in reversed(present):
            need |= mask
            needs.append(need)
        nxt = len(entries) + n // COLUMN_CHUNK
        entries += [(need_l, word + layer, g, nxt) for layer, need_l in enumerate(reversed(needs)) if layer % COLUMN_CHUNK == 0]
        word += n
    return entries


def port_runs(bv: BitvectorStage) -> tuple[list[tuple[int, int]], dict[int, tuple[int, int]]]:
    """The kernel's port runs: pieces (mask, word), a port's run cut at word boundaries; per
    port bit with a run, (its first piece, pieces)."""
    assert bv.columns is not None
    pieces: list[tuple[int, int]] = []
    of_port: dict[int, tuple[int, int]] = {}
    for bit, (first, n) in enumerate(bv.columns.runs):
        if not n:
            continue
        start, t = len(pieces), first
        while t < first + n:
            w = t // 64
            b = min(first + n, (w + 1) * 64)
            pieces.append((((1 << (b - t)) - 1) << (t - 64 * w), w))
            t = b
        of_port[bit] = (start, len(pieces) - start)
    return pieces, of_port


def bitvector_contents(p: Pipeline, spec: Spec, lim: EbpfLimits, out: MapContents) -> None:
    """Fill `out` (bank 0 numbering) with the stage of `p`; raises CapacityError when it does
    not fit the program's limits (before anything live is touched)."""
    from .custom import check_custom


    bv = p.bitvector
    assert bv is not None
    if bv.columns is not None:
        bv = port_columns(bv, out)
    words = bv.words
    if words > lim.bv_words:
        raise CapacityError(f"bit-vector stage: {bv.terms} terms need {words} words per bitmap; the program "
                            f"holds {lim.bv_words} (attach with larger limits)")
    nf = len(spec.query_fields)
    root, first_bitmap = 1, 2 + nf
    bitmaps = list(bv.bitmaps)
    ones = len(bitmaps)
    bitmaps.append(bv.all_terms)                    # for fields no term constrains
    by_path = {f.name: f for f in bv.fields}
    for i, q in enumerate(spec.query_fields):
        f = by_path.get(q.path)
        slice_: list[tuple[int, int]] = []
        if f is None:
            put_start(slice_, 0, first_bitmap + ones)
        else:
            for start, b in zip(f.starts, f.bitmaps):
                put_start(slice_, start, first_bitmap + b)
        out.desc[2 + i] = direct_desc(i, slice_, out) or range_desc(i, slice_, out)
    first_leaf = first_bitmap + len(bitmaps)
    leaf_state = {leaf: first_leaf + k for k, leaf in enumerate(sorted(p.leaves))}
    for leaf, s in leaf_state.items():
        a = p.leaves[leaf]
        check_custom(spec, a, diagram=False)
        out.leaf[s] = (out.port_mask(a.ports), leaf_flags(a), 0, 0)
        if a.rules:
            out.leaf_rules[s] = a.rules
    def seg_flags(leaf: int) -> int:
        ports, flags = out.leaf[leaf][0], out.leaf[leaf][1]
        return (flags | (LEAF_COUNTED if leaf in out.leaf_rules else 0)
                | (LEAF_WIDE if any(ports[1:]) else 0))
    settled: dict[int, tuple[int, int]] = {}        # leaf state -> (plane, settled bit)
    out.bv_planes, first_word = [], 0
    for k, plane in enumerate(bv.planes):
        tbit, tops, rest = group_bits(plane)
        out.bv_planes.append((tops, rest, plane.words, first_word,
                              [(tbit[leaf], seg_flags(leaf_state[leaf]), leaf_state[leaf],
                                out.leaf[leaf_state[leaf]][0]) for leaf in plane.leaves]))
        settled.update({leaf_state[leaf]: (k, b) for leaf, b in tbit.items()})
        first_word += plane.words
    out.bv_walk_all = len(settled) < len(leaf_state)
    out.bv_cols = column_words(bv) if bv.columns is not None else []
    out.bv_runs, out.bv_port_runs = port_runs(bv) if bv.columns is not None else ([], {})
    segs = [(mask, word, leaf, out.leaf[leaf][0], seg_flags(leaf) | settled.get(leaf, (0, 0))[0] << SEG_PLANE_SHIFT,
             nxt, settled.get(leaf, (0, 0))[1]) for mask, word, leaf, nxt in segments(bv, leaf_state)]
    out.bv_bits = {k: bitmap_words(b, words) for k, b in enumerate(bitmaps)}
    out.bv_segs = segs
    out.bv_words, out.bv_max_segs, out.bv_fields, out.bv_columns = lim.bv_words, lim.max_bv_segs, nf, lim.bv_columns
    out.root = root
    out.desc[root] = (KIND_BV, 0, 0, first_bitmap, out.bv_bits_base, words, (out.bv_segs_base << 32) | len(segs))
    for what, have, cap in (("bit-vector bitmaps", len(bitmaps), lim.max_bv_bitmaps),
                            ("bit-vector segments", len(segs), lim.max_bv_segs),
                            ("bit-vector port-column word quads", len(out.bv_cols), lim.bv_columns),
                            ("bit-vector port-run pieces", len(out.bv_runs), lim.bv_columns)):
        if have > cap:
            raise CapacityError(f"{what}: {have} needed, the maps hold {cap}")
