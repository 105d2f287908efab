"""eBPF back end, dynamic part: the Pipeline IR as BPF map contents.

Reads only the IR (and the spec for variable numbering). Capacity is checked here, before
anything live is touched: a rule set that does not fit raises CapacityError and changes
nothing.
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

from ...ir.labels import LabelError, label_wide
from ...ir.pipeline import ActionSet, Entry, FieldTable, MatchSpec, Pipeline
from ...structure.slicing import sort_ports
from ...language.spec import Spec
from .bitvector import KIND_BV
from .custom import check_custom, custom_flags, custom_value
from .program import RADIX_LEVELS, EbpfLimits, n_svars
from ..emit import BackendError

import random

KIND = {"exact": 1, "range": 2, "lpm": 3, "radix": 4, "direct": 6}
MAX_PROBE = 4          # bpf/camus_xdp.h CAMUS_MAX_PROBE
PORT_WORDS = 4
FN = {"count": 0, "sum": 1, "avg": 2, "every": 3}
LEAF_DROP, LEAF_CALL, LEAF_PORTS = 1, 2, 4


class CapacityError(BackendError):
    pass


@dataclass
class MapContents:
    root: int
    # state -> (kind, var, bits, default, base, count, mult)
    desc: dict[int, tuple[int, int, int, int, int, int, int]] = field(default_factory=dict)
    exact: dict[tuple[int, int], int] = field(default_factory=dict)                 # (state, value) -> next
    xslots: dict[int, tuple[int, int]] = field(default_factory=dict)                # slot -> (value, next)
    # search-tree nodes: keys, vals, nkeys, leaf
    bounds: list[tuple[tuple[Any, ...], tuple[Any, ...], int, int]] = field(default_factory=list)
    rnodes: list[tuple[int, int, int]] = field(default_factory=list)                # radix buckets: split, below, above
    rsub: list[tuple[int, int, int, int]] = field(default_factory=list)             # radix sub-tables: lo, base, last, shift
    lpm: dict[tuple[int, int, int], int] = field(default_factory=dict)              # (plen, state, value<<) -> next
    # state -> ports words, flags, group, DNS answer (IPv4 as the kernel reads it, network order)
    leaf: dict[int, tuple[tuple[int, ...], int, int, int]] = field(default_factory=dict)
    updates: dict[int, int] = field(default_factory=dict)                           # state -> svar mask
    leaf_rules: dict[int, tuple[int, ...]] = field(default_factory=dict)            # state -> counted rules it matched
    svar_cfg: list[tuple[int, int, int, int]] = field(default_factory=list)    # window_ns, fn, field, modulus
    ports: list[object] = field(default_factory=list)                               # bit i -> logical port
    cover_ports: tuple[int, ...] = ()           # port words of every port a rule forwards to: the overload bypass
    cover_flags: int = 0                        # LEAF_CALL when a rule has custom actions: the stack is in the cover
    xslot_count: int = 0                                                            # slots used, holes included
    bounds_base: int = 0                                                            # first bounds[] index
    rnodes_base: int = 0                                                            # first rnodes[] index
    rsub_base: int = 0                                                              # first rsub[] index
    bank: int = 0
    labels: dict[tuple[int, bytes], int] = field(default_factory=dict)              # (var, level bytes) -> label id
    label_words: int = 0                                                            # 64-bit words of a label key
    label_bank: int = 0                 # the bank the program derives from the root: which half of labels, bypass
    # the bit-vector stage (ebpf_bitvector.py): bitmaps as words; segments (mask, word, leaf
    # state, its port words, its flags with its plane, the next leaf's first segment, the leaf's
    # settled bit), the prefix planes, all of a bank in one bv_segs value
    bv_bits: dict[int, tuple[int, ...]] = field(default_factory=dict)
    bv_segs: list[tuple[int, int, int, tuple[int, ...], int, int, int]] = field(default_factory=list)
    # prefix planes: tops, rest, words, first word, per leaf in group order (bit, flags, state, ports)
    bv_planes: list[tuple[int, int, int, int, list[tuple[int, int, int, tuple[int, ...]]]]] = field(
        default_factory=list)
    bv_walk_all: bool = False                                                       # a leaf in no plane
    bv_fields: int = 0                                                              # query fields (interval tables)
    bv_words: int = 0                                                               # words per bv_bits value
    bv_max_segs: int = 0                                                            # segments per bv_segs value
    bv_bits_base: int = 0
    bv_segs_base: int = 0                                                           # the bank's bv_segs index
    _port_index: tuple[tuple[Any, ...], dict[Any, int]] = field(default_factory=lambda: ((), {}), repr=False,
                                                                 compare=False)   # (ports, port -> bit)

    def port_mask(self, ports: tuple[Any, ...]) -> tuple[int, ...]:
        words = [0] * PORT_WORDS
        key = tuple(self.ports)                # the index once per table set, not per leaf (15K at 100K rules)
        if self._port_index[0] != key:
            self._port_index = (key, {p: i for i, p in enumerate(key)})
        index = self._port_index[1]
        for p in ports:
            i = index[p]
            words[i // 64] |= 1 << (i % 64)
        return tuple(words)

    def ports_of(self, words: tuple[int, ...]) -> tuple[Any, ...]:
        return tuple(p for i, p in enumerate(self.ports) if words[i // 64] >> (i % 64) & 1)


FANOUT = 8           # bpf/camus_xdp.h CAMUS_FANOUT


def _put(starts: list[tuple[int, int]], lo: int, nxt: int) -> None:
    """Append an interval start, merging with the previous interval when it has the same next."""
    if not starts or starts[-1][1] != nxt:
        starts.append((lo, nxt))


def _search_tree(starts: list[tuple[int, int]], out: "MapContents") -> tuple[int, int]:
    """Append a static 8-ary search tree over sorted (start, next) to out.bounds; returns the
    root's index and the number of levels. Nodes are padded by repeating their last key."""
    def node(keys: list[int], vals: list[int], leaf: bool) -> int:
        pad = FANOUT - len(keys)
        out.bounds.append((tuple(keys + [keys[-1]] * pad), tuple(vals + [vals[-1]] * pad), len(keys), int(leaf)))
        return out.bounds_base + len(out.bounds) - 1

    level = [(starts[i][0], node([k for k, _ in starts[i:i + FANOUT]], [v for _, v in starts[i:i + FANOUT]], True))
             for i in range(0, len(starts), FANOUT)]
    levels = 1
    while len(level) > 1:
        level = [(level[i][0], node([k for k, _ in level[i:i + FANOUT]], [n for _, n in level[i:i + FANOUT]], False))
                 for i in range(0, len(level), FANOUT)]
        levels += 1
    return level[0][1], levels


RADIX_SUB = 0x80000000
STATE_FINAL = 0x40000000       # bpf: CAMUS_STATE_FINAL, on transitions into states that test nothing
STATE_MASK = STATE_FINAL - 1
RADIX_SPREAD = 4      # buckets per interval start: most buckets then hold at most one start
SPLIT_NONE = (1 << 64) - 1


def _radix(points: list[tuple[int, int]], cover: int, out: "MapContents", depth: int = 0) -> tuple[int, int, int, int] | None:
    """A radix table over sorted (start, next) points, keys below the first start going to
    `cover`: buckets of 2**shift keys from the first start (keys outside clamp to the first or
    last bucket), at most RADIX_SPREAD per point, each resolved by one split; a bucket with
    several starts gets a finer table of its own. Appends to out.rnodes / out.rsub and returns
    (lo, base, last, shift), or None when the starts are too clustered for RADIX_LEVELS levels
    (the caller then builds a search tree). Lookup cost does not grow with the number of starts."""
    if not points:
        out.rnodes.append((SPLIT_NONE, cover, cover))
        return 0, out.rnodes_base + len(out.rnodes) - 1, 0, 63
    lo, hi = points[0][0], points[-1][0]
    shift = 0
    while ((hi - lo) >> shift) + 1 > RADIX_SPREAD * len(points):
        shift += 1
    last = (hi - lo) >> shift
    first = len(out.rnodes)
    out.rnodes.extend([(SPLIT_NONE, 0, 0)] * (last + 1))        # this table's buckets, filled below
    groups: dict[int, list[tuple[int, int]]] = {}
    for start, nxt in points:
        groups.setdefault((start - lo) >> shift, []).append((start, nxt))
    below = cover
    for b in range(last + 1):
        group = groups.get(b, [])
        if len(group) <= 1:
            out.rnodes[first + b] = (group[0][0], below, group[0][1]) if group else (SPLIT_NONE, below, below)
        else:
            if depth + 1 >= RADIX_LEVELS:
                return None
            sub = _radix(group, below, out, depth + 1)
            if sub is None:
                return None
            out.rsub.append(sub)
            out.rnodes[first + b] = (0, 0, RADIX_SUB | (out.rsub_base + len(out.rsub) - 1))
        if group:
            below = group[-1][1]
    return lo, out.rnodes_base + first, last, shift


def _range_desc(var: int, slice_: list[tuple[int, int]], out: "MapContents") -> tuple[int, int, int, int, int, int, int]:
    """The desc entry of one range state testing `var` (slice_: sorted interval starts from 0,
    with their next state): a radix table, or, for starts too clustered for it, an 8-ary
    search tree."""
    mark = (len(out.rnodes), len(out.rsub))
    table = _radix(slice_[1:], slice_[0][1], out)
    if table is not None:
        lo, base, last, shift = table
        return (KIND["radix"], var, shift, 0, base, last, lo)
    del out.rnodes[mark[0]:], out.rsub[mark[1]:]                # undo the partial table
    root, levels = _search_tree(slice_, out)
    return (KIND["range"], var, 0, 0, root, levels, 0)


DIRECT_SPREAD = 8     # a direct table holds at most this many entries per interval (or 64 in all)


def direct_desc(var: int, slice_: list[tuple[int, int]],
                out: "MapContents") -> tuple[int, int, int, int, int, int, int] | None:
    """A direct-index table for starts in a narrow domain (small integers: readings, levels,
    enumerations): one range-bucket entry per key from 0 to the last start, each holding its
    interval's next state, keys past the end clamped to the last entry. One load, no split to
    compare, no sub-table. None when the domain is wide for the number of intervals."""
    last = slice_[-1][0]
    if last + 1 > max(64, DIRECT_SPREAD * len(slice_)):
        return None
    first = len(out.rnodes)
    i = 0
    for key in range(last + 1):
        while i + 1 < len(slice_) and slice_[i + 1][0] <= key:
            i += 1
        out.rnodes.append((0, slice_[i][1], slice_[i][1]))
    return (KIND["direct"], var, 0, 0, out.rnodes_base + first, last, 0)


def _slot_table(state: int, entries: dict[int, int]) -> tuple[int, int, list[Any]]:
    """An open-addressing table for one state's exact entries: size 2**bits (load <= 1/2) and
    an odd multiplier under which no key is more than MAX_PROBE slots from its hash. Seeded by
    the state id, so the same entries always give the same table."""
    if not entries:
        return 0, 0, []
    bits = max(1, (2 * len(entries) - 1).bit_length())
    rng = random.Random(state)
    while True:
        for _ in range(32):
            mult = rng.getrandbits(64) | 1
            slots: list[Any] = [None] * (1 << bits)
            ok = True
            for value, nxt in sorted(entries.items()):
                h = ((value * mult) & 0xFFFFFFFFFFFFFFFF) >> (64 - bits)
                for probe in range(MAX_PROBE):
                    i = (h + probe) & ((1 << bits) - 1)
                    if slots[i] is None:
                        slots[i] = (value, nxt)
                        break
                else:
                    ok = False
                    break
            if ok:
                return bits, mult, slots
        bits += 1
        if bits > 31:
            raise CapacityError(f"state {state}: cannot place {len(entries)} exact entries")


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


Desc = tuple[int, int, int, int, int, int, int]     # kind, var, bits, default, base, count, mult


def check_ports(ports: list[object], used: Any) -> None:
    """The port bits (`ports`) must name every port the rules use and fit the port words."""
    missing = set(used) - set(ports)
    if missing:
        raise BackendError(f"ports {sorted(map(str, missing))} used by the rules have no port mapping")
    if len(ports) > 64 * PORT_WORDS:
        raise CapacityError(f"{len(ports)} ports; an XDP broker serves at most {64 * PORT_WORDS}")


def leaf_flags(a: ActionSet) -> int:
    return ((LEAF_DROP if a.drop else 0) | (LEAF_CALL if a.calls else 0) | (LEAF_PORTS if a.ports else 0) |
            custom_flags(a))


def leaf_value(a: ActionSet, out: MapContents) -> tuple[tuple[int, ...], int, int, int]:
    """A leaf[] value: its ports as bits of `out.ports`, its flags, its multicast group, the value
    of the custom action XDP runs itself (ebpf_custom.py)."""
    return (out.port_mask(a.ports), leaf_flags(a), a.group or 0, custom_value(a))


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
    bits, mult, slots = _slot_table(s, points)
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
            _put(slice_, pos, 0)             # a gap: nobody subscribed
        _put(slice_, lo, n)
        pos = hi + 1
    if pos <= (1 << width) - 1:
        _put(slice_, pos, 0)
    return _range_desc(var, slice_, out)


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
    out = MapContents(st(c.root), ports=c.ports, svar_cfg=c.svar_cfg, cover_ports=c.cover_ports, cover_flags=c.cover_flags,
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
    out.bv_walk_all = c.bv_walk_all
    out.bv_words, out.bv_max_segs, out.bv_bits_base, out.bv_segs_base = c.bv_words, c.bv_max_segs, dbits, dsegs
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


def _contents(p: Pipeline, spec: Spec, lim: EbpfLimits, ports: list[object] | None) -> MapContents:
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
    out.ports = list(ports) if ports is not None else list(all_ports)
    check_ports(out.ports, all_ports)
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


def fitted_contents(p: Pipeline, spec: Spec, lim: EbpfLimits,
                    ports: list[object] | None = None) -> tuple[EbpfLimits, MapContents]:
    """`lim` with each diagram map grown where `p` needs more than it holds (one bank with a
    quarter to spare, for updates that grow the rule set; both banks), and `p`'s bank-0 contents.
    The layout does not depend on the map sizes, so one pass in maps too large to run out gives
    both; the defaults stay where they suffice (the usual program, unchanged)."""
    from dataclasses import replace
    room: dict[str, Any] = {key: 1 << 30 for key in DIAGRAM_MAPS} | {"max_states": STATE_FINAL // 2}
    out = _contents(p, spec, replace(_half(lim), **room), ports)
    grown: dict[str, Any] = {}
    for key, have in _needs(p, out).items():
        want = 2 * (1 << max(0, (have + have // 4 - 1).bit_length()))
        if want > getattr(lim, key):
            grown[key] = want
    if grown.get("max_states", 0) > STATE_FINAL:
        raise CapacityError(f"state id: {_needs(p, out)['max_states']} needed; an XDP program holds "
                            f"{STATE_FINAL // 2} per bank")
    out.bank = out.label_bank = 0
    return replace(lim, **grown), out
