"""eBPF back end: what every table kind's map contents are made of, shared by the diagram's
tables (tables.py) and the bit-vector stage (bitvector.py): the contents container, the capacity
error, descriptor kinds, and the builders of range, radix and direct descriptors and leaf values.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ...ir.pipeline import ActionSet
from ..emit import BackendError
from .custom import custom_flags, custom_value
from .program import MAX_PORT_WORDS, PORT_WORDS, RADIX_LEVELS

KIND = {"exact": 1, "range": 2, "lpm": 3, "radix": 4, "direct": 6}
MAX_PROBE = 4          # bpf/camus_xdp.h CAMUS_MAX_PROBE
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
    port_words: int = PORT_WORDS                # words of a port set in the program these are for
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
    # port columns: (the group's ports still to deliver, word, group, the next group's first entry)
    bv_cols: list[tuple[int, int, int, int]] = field(default_factory=list)
    # port runs: pieces (mask, word); per port bit with a run, (first piece, pieces)
    bv_runs: list[tuple[int, int]] = field(default_factory=list)
    bv_port_runs: dict[int, tuple[int, int]] = field(default_factory=dict)
    bv_walk_all: bool = False                                                       # a leaf in no plane
    bv_fields: int = 0                                                              # query fields (interval tables)
    bv_words: int = 0                                                               # words per bv_bits value
    bv_max_segs: int = 0                                                            # segments per bv_segs value
    bv_columns: int = 0                                     # port-column quads and port-run pieces per value
    bv_bits_base: int = 0
    bv_segs_base: int = 0                                                           # the bank's bv_segs index
    _port_index: tuple[tuple[Any, ...], dict[Any, int]] = field(default_factory=lambda: ((), {}), repr=False,
                                                                 compare=False)   # (ports, port -> bit)

    def port_mask(self, ports: tuple[Any, ...]) -> tuple[int, ...]:
        words = [0] * self.port_words
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


def put_start(starts: list[tuple[int, int]], lo: int, nxt: int) -> None:
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


def range_desc(var: int, slice_: list[tuple[int, int]], out: "MapContents") -> tuple[int, int, int, int, int, int, int]:
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


def slot_table(state: int, entries: dict[int, int]) -> tuple[int, int, list[Any]]:
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


Desc = tuple[int, int, int, int, int, int, int]     # kind, var, bits, default, base, count, mult


def check_ports(ports: list[object], used: Any, words: int = PORT_WORDS) -> None:
    """The port bits (`ports`) must name every port the rules use and fit the port words."""
    missing = set(used) - set(ports)
    if missing:
        raise BackendError(f"ports {sorted(map(str, missing))} used by the rules have no port mapping")
    if len(ports) > 64 * MAX_PORT_WORDS:
        raise CapacityError(f"{len(ports)} ports; an XDP broker serves at most {64 * MAX_PORT_WORDS} (split the "
                            "subscribers across hosts)")
    if len(ports) > 64 * words:
        raise CapacityError(f"{len(ports)} ports; this program serves at most {64 * words}")


def port_words_for(n_ports: int) -> int:
    """The words of a port set for a program serving `n_ports` ports: 4 (256 ports) at least, a
    power of two."""
    words = PORT_WORDS
    while 64 * words < n_ports and words < MAX_PORT_WORDS:
        words *= 2
    return words


def leaf_flags(a: ActionSet) -> int:
    return ((LEAF_DROP if a.drop else 0) | (LEAF_CALL if a.calls else 0) | (LEAF_PORTS if a.ports else 0) |
            custom_flags(a))


def leaf_value(a: ActionSet, out: MapContents) -> tuple[tuple[int, ...], int, int, int]:
    """A leaf[] value: its ports as bits of `out.ports`, its flags, its multicast group, the value
    of the custom action XDP runs itself (ebpf_custom.py)."""
    return (out.port_mask(a.ports), leaf_flags(a), a.group or 0, custom_value(a))


