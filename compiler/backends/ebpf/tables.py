"""eBPF back end, dynamic part: the Pipeline IR as BPF map contents.

Reads only the IR (and the spec for variable numbering). Capacity is checked here, before
anything live is touched: a rule set that does not fit raises CapacityError and changes
nothing.
"""
from __future__ import annotations

from typing import Any


from ...ir.labels import LabelError, label_wide
from ...ir.pipeline import Entry, FieldTable, MatchSpec, Pipeline
from ...structure.slicing import sort_ports
from ...language.spec import Spec
from .bitvector import KIND_BV, sized_limits
from ...structure.bv_layout import preferred_ports
from .contents import (FN, KIND, LEAF_CALL, RADIX_SUB, STATE_FINAL, STATE_MASK, CapacityError, Desc, MapContents,
                       check_ports, leaf_value, port_words_for, put_start, range_desc, slot_table)
from .custom import check_custom
from .program import BV_MAX_PORT_WORDS, EbpfLimits, max_bv_columns_for, max_bv_segs_for, n_svars
from ..emit import BackendError


def _decompress(t: FieldTable, entries: list[Entry]) -> list[tuple[int, MatchSpec, int]]:
    """Back ends read raw values: undo low-resolution domain codes (exact or range)."""
    if t.compression is None:
        return [(e.state, e.match, e.next) for e in entries]
    if t.compression.kind == "exact":
        raw = {code: m[1] for m, code in t.compression.codes}
        return [(e.state, ("exact", raw[e.match[1]]) if e.match[0] == "exact" else e.match, e.next)
                for e in entries]
    spans = {code: (m[1], m[2]) for m, code in t.compression.codes}
    return [(e.state, ("range", spans[e.match[1]][0], spans[e.match[2]][1]), e.next) for e in entries]


def exact_state(s: int, var: int, entries: list[tuple[int, MatchSpec, int]], out: MapContents) -> Desc:
    """One exact state's open-addressing slots, appended at out.xslot_count; its descriptor."""
    default = 0
    points: dict[int, int] = {}
    for _, m, n in entries:
        if m[0] == "exact":
            points[m[1]] = n
        else:
            default = n
    base = out.xslot_count
    bits, mult, slots = slot_table(s, points)
    for i, item in enumerate(slots):
        if item is not None:
            out.xslots[base + i] = item
    out.xslot_count = base + len(slots)
    return (KIND["exact"], var, bits, default, base, 0, mult)


def range_state(var: int, entries: list[tuple[int, MatchSpec, int]], width: int, out: MapContents) -> Desc:
    """One range state's lookup structure (radix, direct or search tree) appended to out;
    its descriptor."""
    slice_: list[tuple[int, int]] = []
    pos = 0
    for _, m, n in sorted(entries, key=lambda e: e[1][1]):
        lo, hi = m[1], m[2]
        if lo > pos:
            put_start(slice_, pos, 0)             # a gap: nobody subscribed
        put_start(slice_, lo, n)
        pos = hi + 1
    if pos <= (1 << width) - 1:
        put_start(slice_, pos, 0)
    return range_desc(var, slice_, out)


def lpm_key_of(s: int, m: MatchSpec, width: int) -> tuple[int, int, int]:
    """The LPM trie key of a state's prefix entry: 32 bits of state, then the value."""
    value, plen = m[1], m[2]
    return (32 + plen, s, value << (64 - width))


def map_contents(p: Pipeline, spec: Spec, limits: EbpfLimits | None = None,
                 ports: list[object] | None = None, bank: int | None = None) -> MapContents:
    """Map contents for the IR. With `bank` 0 or 1 the table set is placed in that half of
    every map (state ids, slots, bounds), so a new set can be written beside the live one and
    the root flipped atomically; without it the whole maps are used."""
    lim = limits or EbpfLimits()
    out = _contents(p, spec, lim if bank is None else _half(lim), ports)
    if bank:
        out = _shift(out, lim)
    out.bank = bank or 0
    # the labels' bank is the one the program derives from the root (bpf/camus_topic.h)
    root = out.root & STATE_MASK
    out.label_bank = int(root >= lim.max_states // 2)
    return out


def _half(lim: EbpfLimits) -> EbpfLimits:
    from dataclasses import replace
    return replace(lim, max_states=lim.max_states // 2, max_exact=lim.max_exact // 2,
                   max_bounds=lim.max_bounds // 2, max_rnodes=lim.max_rnodes // 2, max_rsub=lim.max_rsub // 2,
                   max_lpm=lim.max_lpm // 2, max_updates=lim.max_updates // 2,
                   max_bv_bitmaps=lim.max_bv_bitmaps // 2, max_labels=lim.max_labels // 2)    # segments: one map value per bank


def _shift(c: MapContents, lim: EbpfLimits) -> MapContents:
    """Move a bank-0 table set into bank 1: every state id (but 0, "nobody"), slot and bound."""
    ds, dx, db = lim.max_states // 2, lim.max_exact // 2, lim.max_bounds // 2
    dr, dsub = lim.max_rnodes // 2, lim.max_rsub // 2
    def st(s: int) -> int:          # a state id (flag kept; 0, "nobody", is the same in both banks)
        return (s & STATE_FINAL) | ((s & STATE_MASK) + ds if s & STATE_MASK else 0)

    def ref(r: int) -> int:
        return r + dsub if r & RADIX_SUB else st(r)
    out = MapContents(st(c.root), ports=c.ports, port_words=c.port_words, svar_cfg=c.svar_cfg,
                      cover_ports=c.cover_ports, cover_flags=c.cover_flags,
                      xslot_count=c.xslot_count + dx,
                      bounds_base=db, rnodes_base=dr, rsub_base=dsub,
                      bounds=[(keys, tuple(st(v) if leaf else v + db for v in vals), n, leaf)
                              for keys, vals, n, leaf in c.bounds],
                      rnodes=[(split, st(below), ref(above)) for split, below, above in c.rnodes],
                      rsub=[(lo, base + dr, last, shift) for lo, base, last, shift in c.rsub])
    dbits, dsegs = lim.max_bv_bitmaps // 2, 1
    moved = {KIND["exact"]: dx, KIND["range"]: db, KIND["radix"]: dr, KIND["direct"]: dr, KIND_BV: dbits}
    for s, (kind, var, bits, default, base, count, mult) in c.desc.items():
        base = base + moved.get(kind, 0)
        if kind == KIND_BV:                      # segment bank << 32 | segments
            mult = ((mult >> 32) + dsegs) << 32 | (mult & 0xFFFFFFFF)
        out.desc[st(s)] = (kind, var, bits, st(default), base, count, mult)
    out.bv_bits = {k + dbits: w for k, w in c.bv_bits.items()}
    out.bv_segs = [(mask, word, st(leaf), ports, flags, nxt, lbit) for mask, word, leaf, ports, flags, nxt, lbit
                   in c.bv_segs]
    out.bv_planes = [(tops, rest, words, first, [(b, flags, st(leaf), ports) for b, flags, leaf, ports in leaves])
                     for tops, rest, words, first, leaves in c.bv_planes]
    out.bv_walk_all, out.bv_cols, out.bv_runs, out.bv_port_runs = c.bv_walk_all, c.bv_cols, c.bv_runs, c.bv_port_runs
    out.bv_words, out.bv_max_segs, out.bv_bits_base, out.bv_segs_base = c.bv_words, c.bv_max_segs, dbits, dsegs
    out.bv_columns = c.bv_columns
    out.bv_fields = c.bv_fields
    out.labels, out.label_words = c.labels, c.label_words
    out.exact = {(st(s), v): st(n) for (s, v), n in c.exact.items()}     # (raw ids, no flags)
    out.xslots = {i + dx: (v, st(n)) for i, (v, n) in c.xslots.items()}
    out.lpm = {(plen, st(s), v): st(n) for (plen, s, v), n in c.lpm.items()}
    out.leaf = {st(s): a for s, a in c.leaf.items()}
    out.leaf_rules = {st(s): r for s, r in c.leaf_rules.items()}
    out.updates = {st(s): m for s, m in c.updates.items()}
    return out


def _mark_final(out: MapContents) -> None:
    """Flag every transition into a state without a descriptor (it tests nothing more), so the
    kernel's walk stops there without reading one."""
    def ref(s: int) -> int:
        return s if s in out.desc else s | STATE_FINAL
    out.root = ref(out.root)
    out.desc = {s: (kind, var, bits, ref(default) if kind == KIND["exact"] else default, base, count, mult)
                for s, (kind, var, bits, default, base, count, mult) in out.desc.items()}
    out.xslots = {i: (v, ref(n)) for i, (v, n) in out.xslots.items()}
    out.bounds = [(keys, tuple(ref(v) for v in vals) if leaf else vals, n, leaf)
                  for keys, vals, n, leaf in out.bounds]
    out.rnodes = [(split, ref(below), above if above & RADIX_SUB else ref(above))
                  for split, below, above in out.rnodes]
    out.lpm = {k: ref(n) for k, n in out.lpm.items()}


def _contents(p: Pipeline, spec: Spec, lim: EbpfLimits, ports: list[object] | None,
              fit_ports: bool = False) -> MapContents:
    """`fit_ports`: port sets as wide as the ports need (fitted_contents), else lim.port_words."""
    field_index = {q.path: i for i, q in enumerate(spec.query_fields)}
    nf = len(spec.query_fields)
    out = MapContents(p.root)
    try:          # topic levels (wider than a register): matched by label ids, dictionary in `labels`
        p, names = label_wide(p, {q.path: q.width for q in spec.query_fields})
    except LabelError as exc:
        raise BackendError(str(exc)) from None
    nbytes = {q.path: q.width // 8 for q in spec.query_fields}
    out.labels = {(field_index[path], raw.to_bytes(nbytes[path], "big")): code     # long levels only
                  for path, d in names.by_field.items() for raw, code in d.items()}
    out.label_words = max([(n + 7) // 8 for path, n in nbytes.items() if path in names.by_field], default=0)
    if len(out.labels) > lim.max_labels:
        raise CapacityError(f"{len(out.labels)} topic level labels; this program holds {lim.max_labels}")
    all_ports = sort_ports({x for a in p.leaves.values() for x in a.ports})
    out.ports = list(ports) if ports is not None else preferred_ports(p.bitvector, list(all_ports))
    out.port_words = max(lim.port_words, port_words_for(len(out.ports))) if fit_ports else lim.port_words
    check_ports(out.ports, all_ports, out.port_words)
    if len(p.state_vars) > n_svars(spec, lim):
        raise CapacityError(f"{len(p.state_vars)} state variables; this program holds {n_svars(spec, lim)}")

    for t in p.tables:
        var = field_index[t.field] if t.field is not None else nf + t.state_var  # type: ignore[operator]
        entries = _decompress(t, t.entries)
        if t.kind == "exact":
            per_state: dict[int, list[tuple[int, MatchSpec, int]]] = {s: [] for s in t.states}
            for s, m, n in entries:
                per_state[s].append((s, m, n))
                if m[0] == "exact":
                    out.exact[(s, m[1])] = n
            for s in sorted(per_state):
                out.desc[s] = exact_state(s, var, per_state[s], out)
        elif t.kind == "range":
            spans: dict[int, list[tuple[int, MatchSpec, int]]] = {s: [] for s in t.states}
            for s, m, n in entries:
                spans[s].append((s, m, n))
            for s in sorted(spans):
                out.desc[s] = range_state(var, spans[s], t.field_width, out)
        else:
            for s in t.states:
                out.desc[s] = (KIND["lpm"], var, 0, 0, 0, 0, 0)
            for s, m, n in entries:
                out.lpm[lpm_key_of(s, m, t.field_width)] = n

    if p.bitvector is not None:
        from .bitvector import bitvector_contents
        bitvector_contents(p, spec, lim, out)
    for s, a in (p.leaves.items() if p.bitvector is None else ()):
        check_custom(spec, a, diagram=True)
        out.leaf[s] = leaf_value(a, out)
        if a.rules:
            out.leaf_rules[s] = a.rules
    forwarded: set[Any] = set()
    for a in p.leaves.values():
        forwarded.update(a.ports)
    out.cover_ports = out.port_mask(tuple(forwarded))
    out.cover_flags = LEAF_CALL if any(a.calls for a in p.leaves.values()) else 0
    for s, ups in p.state_updates.items():
        mask = 0
        for k in ups:
            mask |= 1 << k
        out.updates[s] = mask
    for sv in p.state_vars:
        out.svar_cfg.append((sv.window_us * 1000, FN[sv.fn], field_index[sv.field] if sv.field else 0, sv.modulus))

    _mark_final(out)
    for key, have in _needs(p, out).items():
        if have > getattr(lim, key):
            raise CapacityError(f"{DIAGRAM_MAPS[key]}: {have} needed, the maps hold {getattr(lim, key)}")
    return out


# the diagram's maps (EbpfLimits field -> what its capacity errors call an entry)
DIAGRAM_MAPS = {"max_states": "state id", "max_exact": "exact slots", "max_bounds": "range bounds",
               "max_rnodes": "range buckets", "max_rsub": "range sub-tables", "max_lpm": "LPM entries",
               "max_updates": "update entries"}


def _needs(p: Pipeline, out: MapContents) -> dict[str, int]:
    """What a table set takes of each diagram map (EbpfLimits field -> entries)."""
    top = max([p.root, *out.desc, *out.leaf], default=0)
    return {"max_states": top + 1, "max_exact": out.xslot_count, "max_bounds": len(out.bounds),
            "max_rnodes": len(out.rnodes), "max_rsub": len(out.rsub), "max_lpm": len(out.lpm),
            "max_updates": len(out.updates)}


def _bv_room_for_ports(out: MapContents, lim: EbpfLimits, fields: int, uses_stage: bool) -> dict[str, int]:
    """The bit-vector stage's capacity in a program with `out`'s port sets: wider sets leave the
    verifier room for fewer segments and column steps (none past BV_MAX_PORT_WORDS). Raises
    CapacityError when the rules take the stage and it does not fit."""
    most = max_bv_segs_for(fields, lim.bv_columns, out.port_words)
    most_columns = max_bv_columns_for(fields, out.port_words) if lim.bv_columns else 0
    if uses_stage:
        if not most:
            raise CapacityError(f"{len(out.ports)} ports: these rules take the bit-vector stage, which serves at "
                                f"most {64 * BV_MAX_PORT_WORDS} ports on one host (split the subscribers across hosts)")
        for what, have, room in (("segments", len(out.bv_segs), most),
                                 ("port-column quads", len(out.bv_cols), most_columns),
                                 ("port-run pieces", len(out.bv_runs), most_columns)):
            if have > room:
                raise CapacityError(f"bit-vector stage: {have} {what}; a program with {fields} query fields and "
                                    f"{len(out.ports)} ports holds {room}")
    return ({"max_bv_segs": most} if most and lim.max_bv_segs > most else {}) | (
        {"bv_columns": most_columns} if lim.bv_columns > most_columns else {})


def fitted_contents(p: Pipeline, spec: Spec, lim: EbpfLimits,
                    ports: list[object] | None = None) -> tuple[EbpfLimits, MapContents]:
    """`lim` with each diagram map grown where `p` needs more than it holds (one bank with a
    quarter to spare, for updates that grow the rule set; both banks), and `p`'s bank-0 contents.
    The layout does not depend on the map sizes, so one pass in maps too large to run out gives
    both; the defaults stay where they suffice (the usual program, unchanged)."""
    from dataclasses import replace
    room: dict[str, Any] = {key: 1 << 30 for key in DIAGRAM_MAPS} | {"max_states": STATE_FINAL // 2}
    out = _contents(p, spec, replace(_half(lim), **room), ports, fit_ports=True)
    grown: dict[str, Any] = {"port_words": out.port_words} if out.port_words > lim.port_words else {}
    grown.update(_bv_room_for_ports(out, lim, len(spec.query_fields), p.bitvector is not None))
    if p.bitvector is not None:
        out.bv_max_segs = grown.get("max_bv_segs", out.bv_max_segs)      # the stage value is sized by these
        out.bv_columns = grown.get("bv_columns", out.bv_columns)
    for key, have in _needs(p, out).items():
        want = 2 * (1 << max(0, (have + have // 4 - 1).bit_length()))
        if want > getattr(lim, key):
            grown[key] = want
    if grown.get("max_states", 0) > STATE_FINAL:
        raise CapacityError(f"state id: {_needs(p, out)['max_states']} needed; an XDP program holds "
                            f"{STATE_FINAL // 2} per bank")
    out.bank = out.label_bank = 0
    return replace(lim, **grown), out


def sized_contents(p: Pipeline, spec: Spec) -> tuple[EbpfLimits, MapContents]:
    """The program's limits and map contents sized from the rule set, as `attach` sizes them
    (room to grow; bit-vector words as the stage needs), so `compile --target ebpf` and
    `explain --via xdp` take what `attach` takes."""
    return fitted_contents(p, spec, sized_limits(p, EbpfLimits(), len(spec.query_fields)), None)
