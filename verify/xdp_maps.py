"""What an attached unit's XDP classifier holds, read from its pinned maps and interpreted the
way bpf/camus_xdp.c walks them (classify/walk, exact_slot, range_next, radix_next, lpm_next,
deliver), as a machine the checker walks.

Nothing here comes from the compiler: the maps are read raw (the ctypes mirrors of
bpf/camus_xdp.h in dataplane/maps.py) and every lookup is the kernel's, so a slot the probe
sequence cannot reach, a search-tree node past the program's levels, a stale copy of a
descriptor in a slot or a leaf's port bits are what a packet would meet. The state file gives
only what the maps cannot: which port each leaf bit stands for, the field order of the variables
(the program's parser fills v[i] with the spec's i-th query field) and the map sizes the
program was built with.
"""
from __future__ import annotations

import ctypes
import ipaddress
from collections import deque
from typing import Any, Callable

from camus.compiler.language.actions import ANSWER_DNS, ILA
from camus.compiler.language.spec import Spec

from .machines import Machine, Piece, pieces
from .rules import Outcome, TableDefect, Undecidable, outcome_of
from .state_rules import STATE_BITS, state_path

# bpf/camus_xdp.h (and the generated program's constants)
KIND_NONE, KIND_EXACT, KIND_RANGE, KIND_LPM, KIND_RADIX, KIND_BV, KIND_DIRECT = range(7)
STATE_FINAL, STATE_MASK = 0x40000000, 0x3FFFFFFF
RADIX_SUB = 0x80000000
MAX_PROBE = 4
FANOUT = 8
LEAF_DROP, LEAF_CALL, LEAF_ANSWER, LEAF_ILA = 1, 2, 32, 64
U64 = (1 << 64) - 1
AGGREGATE_FNS = ("count", "sum", "avg", "every")     # camus_svar_cfg.fn (update_svars)
LABEL_BITS = 64          # bpf/camus_topic.h: a topic level wider than this is matched by its label,
OTHER_LONG = 1 << 8      # a long level no entry names by this one


class LiveReader:
    """Reads one unit's maps on demand (a 100K-rule unit has ~10^5 slots; only the states the
    root reaches are read)."""

    def __init__(self, maps: Any, range_levels: int, radix_levels: int) -> None:
        from camus.dataplane import maps as m
        self.maps, self.m = maps, m
        self.range_levels, self.radix_levels = range_levels, radix_levels
        self._desc: dict[int, Any] = {}
        self._lpm: dict[int, list[tuple[int, int, int, str]]] | None = None

    def desc(self, state: int) -> Any:
        """desc[state], or None where the map holds none (the walk stops there)."""
        if state not in self._desc:
            d = self.m.Desc()
            self._desc[state] = d if self.maps.lookup("desc", ctypes.c_uint32(state), d) else None
        return self._desc[state]

    def _get(self, name: str, index: int, value: Any) -> Any:
        return value if self.maps.lookup(name, ctypes.c_uint32(index), value) else None

    # -- one state's transition over its field's whole domain -------------------------------
    def transition(self, state: int, d: Any, width: int) -> list[Piece]:
        if d.kind == KIND_EXACT:
            return self._exact(state, d, width)
        if d.kind == KIND_RANGE:
            return _merge(self._range(d.base, 0, (1 << width) - 1, 0))
        if d.kind == KIND_RADIX:
            return _merge(self._radix(d.mult, d.bits & 63, d.count, d.base, 0, (1 << width) - 1, 0))
        if d.kind == KIND_LPM:
            prefixes = []
            for raw, plen, nxt, what in self.lpm_entries().get(state, []):
                # lpm_next puts the key left-aligned in 64 bits: bits past the field are 0 there
                if plen > width and raw & (((1 << (plen - width)) - 1) << (64 - plen)):
                    continue                                   # a prefix no key of this width matches
                prefixes.append((raw >> (64 - width) if width < 64 else raw, min(plen, width), nxt, what))
            return pieces({}, [], prefixes, (0, "no lpm entry: state 0"), width)
        raise Undecidable(f"state {state}: table kind {d.kind} (bit-vector stage) is not read back yet")

    def _exact(self, state: int, d: Any, width: int) -> list[Piece]:
        """exact_slot: hash into the state's slice, probe MAX_PROBE slots, stop at an unused one."""
        default = (d.default_next, f"desc[{state}]: default {d.default_next}")
        bits = d.bits & 31
        if bits == 0:
            return pieces({}, [], [], default, width)
        size = 1 << bits
        slots = [self._get("xslots", d.base + i, self.m.Slot()) for i in range(size)]
        points: dict[int, tuple[int, str]] = {}
        for i, slot in enumerate(slots):
            if slot is None or not slot.used or slot.value >> width or slot.value in points:
                continue
            home = ((slot.value * d.mult) & U64) >> (64 - bits)
            for p in range(MAX_PROBE):
                j = (home + p) & (size - 1)
                probe = slots[j]
                if probe is None or not probe.used:
                    break                                    # the kernel misses: never reached
                if probe.value == slot.value:
                    self._same_desc(d.base + j, probe)
                    points[slot.value] = (probe.next, f"xslots[{d.base + j}]: {slot.value} -> {probe.next}")
                    break
        return pieces(points, [], [], default, width)

    def _same_desc(self, index: int, slot: Any) -> None:
        """A hit walks on with the slot's copy of the next state's descriptor, not desc[]: the two
        must agree or the kernel walks tables the maps do not name."""
        nxt = slot.next
        if nxt & STATE_FINAL:
            return
        d = self.desc(nxt & STATE_MASK)
        nd = slot.nd
        want = (d.kind, d.var, d.bits, d.default_next, d.base, d.count, d.mult) if d is not None else (0,) * 7
        have = (nd.kind, nd.var, nd.bits, nd.default_next, nd.base, nd.count, nd.mult)
        if (want[0] or have[0]) and want != have:
            raise TableDefect(f"xslots[{index}] carries a copy of state {nxt & STATE_MASK}'s descriptor {have} "
                              f"that differs from desc[{nxt & STATE_MASK}] {want}: the kernel walks the copy")

    def _range(self, node: int, lo: int, hi: int, level: int) -> list[tuple[int, int, int, str]]:
        """range_next over [lo, hi]: c = how many of the node's 8 keys are <= key, capped at
        nkeys; vals[(c - 1) & 7]; a leaf node gives the next state, others the child node."""
        if level >= self.range_levels:
            return [(lo, hi, 0, f"bounds: deeper than the program's {self.range_levels} levels: state 0")]
        b = self._get("bounds", node, self.m.Bound())
        if b is None:
            return [(lo, hi, 0, f"bounds[{node}] missing: state 0")]
        keys = list(b.keys)
        cuts = sorted({lo} | {k for k in keys if lo < k <= hi})
        out: list[tuple[int, int, int, str]] = []
        for i, a in enumerate(cuts):
            e = cuts[i + 1] - 1 if i + 1 < len(cuts) else hi
            c = min(sum(1 for k in keys if k <= a), b.nkeys)
            v = b.vals[(c - 1) & (FANOUT - 1)]
            if b.leaf:
                out.append((a, e, v, f"bounds[{node}] key {keys[(c - 1) & 7]} -> {v}"))
            else:
                out += self._range(v, a, e, level + 1)
        return out

    def _radix(self, lo_key: int, shift: int, last: int, base: int, lo: int, hi: int,
               level: int) -> list[tuple[int, int, int, str]]:
        """radix_next over [lo, hi]: bucket min((key - lo) >> shift, last) (0 below lo), one split
        per bucket, a bucket marked RADIX_SUB continues in rsub[] (at most the program's levels)."""
        if level >= self.radix_levels:
            return [(lo, hi, 0, f"rnodes: deeper than the program's {self.radix_levels} levels: state 0")]

        def bucket(key: int) -> int:
            return 0 if key < lo_key else min((key - lo_key) >> shift, last)
        out: list[tuple[int, int, int, str]] = []
        for k in range(bucket(lo), bucket(hi) + 1):
            start = lo if k == 0 else max(lo, lo_key + (k << shift))
            end = hi if k == last else min(hi, lo_key + ((k + 1) << shift) - 1)
            if start > end:
                continue
            n = self._get("rnodes", base + k, self.m.RNode())
            if n is None:
                out.append((start, end, 0, f"rnodes[{base + k}] missing: state 0"))
                continue
            for a, e, r in ((start, min(end, n.split - 1), n.below), (max(start, n.split), end, n.above)):
                if a > e:
                    continue
                if not r & RADIX_SUB:
                    out.append((a, e, r, f"rnodes[{base + k}] split {n.split} -> {r}"))
                    continue
                t = self._get("rsub", r & ~RADIX_SUB, self.m.RSub())
                if t is None:
                    out.append((a, e, 0, f"rsub[{r & ~RADIX_SUB}] missing: state 0"))
                else:
                    out += self._radix(t.lo, t.shift & 63, t.last, t.base, a, e, level + 1)
        return out

    def lpm_entries(self) -> dict[int, list[tuple[int, int, int, str]]]:
        """lpm[]: (32 + the field's prefix length, state big endian, value left-aligned) -> next,
        as per-state prefixes (value, length, next) over the field."""
        if self._lpm is None:
            self._lpm = {}
            for k in self.maps.keys("lpm", self.m.LpmKey):
                nxt = ctypes.c_uint32()
                if not self.maps.lookup("lpm", k, nxt):
                    continue
                raw = bytes(k.data)
                st, value, plen = int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:], "big"), k.prefixlen - 32
                if plen < 0:
                    raise Undecidable(f"an lpm entry of prefix length {k.prefixlen} covers part of a state id")
                self._lpm.setdefault(st, []).append((value, plen, nxt.value,
                                                     f"lpm state {st} prefix {value:#018x}/{plen} -> {nxt.value}"))
        return self._lpm

    def leaf(self, state: int) -> Any:
        return self._get("leaf", state, self.maps.structs.Leaf())


def _merge(ps: list[tuple[int, int, int, str]]) -> list[Piece]:
    out: list[Piece] = []
    for p in ps:
        if out and out[-1][2] == p[2] and out[-1][1] + 1 == p[0]:
            out[-1] = (out[-1][0], p[1], p[2], out[-1][3])
        else:
            out.append(p)
    return out


def live_machine(spec: Spec, maps: Any, root: int, port_bits: list[Any], range_levels: int,
                 radix_levels: int, leaf_rules: dict[int, list[int]] | None = None, max_states: int = 0) -> Machine:
    """The machine of the tables the root leads to. `port_bits`: the port each leaf bit stands for;
    `leaf_rules`: the rule counters each leaf state's hits go to (the state file's), compared;
    `max_states`: the program's CAMUS_MAX_STATES (which bank of topic labels the root reads)."""
    fields = spec.query_fields
    wide = {i for i, q in enumerate(fields) if q.width > LABEL_BITS}
    if any(fields[i].topic is None for i in wide):
        raise Undecidable("fields over 64 bits other than topic levels are not read back")
    if wide and not max_states:
        raise Undecidable("topic levels are read by label: the program's state count is needed")
    longs = _long_labels(maps, spec, wide, int((root & STATE_MASK) >= max_states // 2)) if wide else {}
    r = LiveReader(maps, range_levels, radix_levels)
    n = len(fields)

    def transition(s: int, d: Any) -> list[Piece]:
        if d.var >= n:                                   # an aggregate: its 64-bit value
            return r.transition(s & STATE_MASK, d, STATE_BITS)
        if d.var in wide:
            if d.kind != KIND_EXACT:
                raise Undecidable(f"state {s}: topic level {fields[d.var].path} matched by table kind {d.kind}, "
                                  "not by exact labels")
            return _level_pieces(r.transition(s & STATE_MASK, d, LABEL_BITS), d.default_next,
                                 fields[d.var].width // 8, longs[d.var])
        return r.transition(s & STATE_MASK, d, fields[d.var].width)

    # classify(): walk the header fields' tables from the root ...
    trans, ends = _walk_states(r, [root], lambda var: var < n, transition)
    nsvars = maps.cfg(r.m.CFG_NSVARS)
    agg_trans: dict[int, tuple[int, list[Piece]]] = {}
    entry: dict[int, int] = {}
    if not nsvars:
        finals = ends
    else:
        # ... then add this message to the aggregates its state's `updates` mask names and walk the
        # aggregates' tables from that state (masked: a final flag does not stop this walk)
        entry = {s: s & STATE_MASK for s in ends}
        agg_trans, finals = _walk_states(r, sorted(set(entry.values())), lambda var: var >= n, transition)
        for s, (var, _) in agg_trans.items():
            if var - n >= nsvars:
                raise Undecidable(f"state {s} tests aggregate {var - n}; the unit keeps {nsvars}")
    order = _variable_order(trans, n)
    agg_order = [n + k for k in _variable_order({s: (v - n, ps) for s, (v, ps) in agg_trans.items()}, nsvars)]
    names = _aggregate_names(r, spec, nsvars)
    paths = [fields[v].path for v in order] + [names[v - n] for v in agg_order]
    widths = [fields[v].width for v in order] + [STATE_BITS] * len(agg_order)
    level = {var: i for i, var in enumerate(order + agg_order)}
    m = Machine(paths, widths, root, [{} for _ in paths])
    for s, (var, ps) in [*trans.items(), *agg_trans.items()]:
        m.steps[level[var]][s] = ps
    default = xdp_view(outcome_of(frozenset(spec.default_atoms)))    # the program's CAMUS_DEFAULT_FLAGS
    for s in finals:
        o = _outcome(r, s & STATE_MASK, port_bits, default, max_states)
        if leaf_rules is not None:
            o = Outcome(o.ports, o.drop, o.calls, frozenset(leaf_rules.get(s & STATE_MASK, ())))
        m.outcomes[s] = o
    if nsvars:
        m.aggregates_from, m.entry = len(order), entry
        m.updates = {s: frozenset(names[k] for k in _updates(r, s & STATE_MASK, nsvars)) for s in ends}
    m.counts = leaf_rules is not None
    m.view = xdp_view
    return m


HOST_STACK = ("<custom actions: host stack>", ())


def xdp_view(o: Outcome) -> Outcome:
    """What an XDP leaf can say of an outcome (bpf/camus_xdp.h): custom actions are one flag (the
    packet goes to the host stack, which runs them); of the two XDP runs itself, answerDNS and
    ila, the lowest address or locator (compiler/backends/ebpf/custom.py's choice when several
    rules give one: the same every time)."""
    if not o.calls:
        return o
    calls: set[Any] = {HOST_STACK}
    answers = [ipaddress.IPv4Address(args[0]) for name, args in o.calls if name == ANSWER_DNS and args]
    if answers:
        calls.add((ANSWER_DNS, (str(min(answers)),)))
    locators = [int(ipaddress.IPv6Address(args[0].split("/")[0])) >> 64 for name, args in o.calls if name == ILA and args]
    if locators:
        calls.add((ILA, (f"locator {min(locators):#018x}",)))
    return Outcome(o.ports, o.drop, frozenset(calls), o.counted, o.updates)


def _walk_states(r: LiveReader, starts: list[int], tests: Callable[[int], bool],
                 transition: Callable[[int, Any], list[Piece]]) -> tuple[dict[int, tuple[int, list[Piece]]], set[int]]:
    """walk(): the states reachable from `starts` through tables whose variable `tests` accepts
    (state -> (variable, pieces)), and where the walk stops (a final state, no descriptor, or a
    variable it does not test)."""
    trans: dict[int, tuple[int, list[Piece]]] = {}
    ends: set[int] = set()
    seen, todo = set(starts), deque(starts)
    while todo:
        s = todo.popleft()
        d = None if s & STATE_FINAL else r.desc(s & STATE_MASK)
        if d is None or d.kind == KIND_NONE or not tests(d.var):
            ends.add(s)
            continue
        ps = transition(s, d)
        trans[s] = (d.var, ps)
        for _, _, nxt, _ in ps:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return trans, ends


def _aggregate_names(r: LiveReader, spec: Spec, nsvars: int) -> list[str]:
    """Each aggregate's level name from its svar_cfg (function, field, window), as the rules
    name theirs (state_rules.state_path): the window's counter is the spec's of that length."""
    names = []
    ranks: dict[str, int] = {}
    for k in range(nsvars):
        c = r._get("svar_cfg", k, r.m.SvarCfg())
        if c is None or c.fn >= len(AGGREGATE_FNS):
            raise TableDefect(f"svar_cfg[{k}] is missing or names no function ({c.fn if c else 'none'})")
        counters = [ct.name for ct in spec.counters if ct.window_us * 1000 == c.window_ns]
        if len(counters) != 1:
            raise Undecidable(f"svar_cfg[{k}]: a {c.window_ns} ns window is {len(counters)} of the spec's counters")
        q = spec.query_fields[c.field] if c.field < len(spec.query_fields) else None
        fn = AGGREGATE_FNS[c.fn]
        if q is None and fn != "every":
            raise TableDefect(f"svar_cfg[{k}] reads variable {c.field}, not a field")
        rank = ranks.get(counters[0], 0)
        ranks[counters[0]] = rank + 1
        names.append(state_path(counters[0], rank, fn, (q.whole or q.path) if q is not None else "", c.modulus))
    return names


def _updates(r: LiveReader, state: int, nsvars: int) -> frozenset[int]:
    """update_svars(): the aggregates the `updates` mask of `state` adds to (those in use)."""
    mask = ctypes.c_uint64()
    if not r.maps.lookup("updates", ctypes.c_uint32(state), mask):
        return frozenset()
    return frozenset(k for k in range(nsvars) if mask.value >> k & 1)


def _long_labels(maps: Any, spec: Spec, wide: set[int], bank: int) -> dict[int, dict[int, int]]:
    """Per topic level variable, {label: level value} of the long levels the root's bank of
    `labels` holds (bpf/camus_topic.h: key {bank << 16 | var, level bytes NUL-padded})."""
    from camus.dataplane.maps import label_key_type
    fields = spec.query_fields
    key_type = label_key_type(max((fields[i].width // 8 + 7) // 8 for i in wide))
    out: dict[int, dict[int, int]] = {i: {} for i in wide}
    for key in maps.keys("labels", key_type):
        var = key.var & 0xFFFF
        if key.var >> 16 != bank or var not in out:
            continue
        label = ctypes.c_uint64()
        if not maps.lookup("labels", key, label):
            continue                                     # deleted since it was listed
        nbytes = fields[var].width // 8
        if label.value in out[var]:
            raise TableDefect(f"labels: two long levels of {fields[var].path} have label {label.value:#x}")
        out[var][label.value] = int.from_bytes(bytes(key.w)[:nbytes], "big")
    return out


def _label_level(label: int, nbytes: int, longs: dict[int, int]) -> int | None:
    """The level value whose label this is (camus_topic.h): None when no level has it."""
    if label == 0:
        return 0                                         # the empty level (and levels past the depth)
    if label & 0xFF == 0:                                # a long level's id: its low byte is 0
        if label == OTHER_LONG:
            raise Undecidable("an entry on the label every unnamed long level shares (1 << 8) is not modelled")
        return longs.get(label)
    data = label.to_bytes(8, "little").rstrip(b"\0")    # a short level: its bytes, little-endian
    if b"\0" in data or len(data) > nbytes:
        return None                                      # (a level holds no NUL)
    return int.from_bytes(data.ljust(nbytes, b"\0"), "big")


def _level_pieces(ps: list[Piece], miss: int, nbytes: int, longs: dict[int, int]) -> list[Piece]:
    """A topic level's transition over its level values, from the one over labels: each label an
    entry names goes back to the level it stands for; every other level gets what the table
    gives a label it does not hold (`miss`, the default next state)."""
    points: dict[int, tuple[int, str]] = {}
    miss_what = f"no entry for the level's label: {miss}"
    for lo, hi, nxt, what in ps:
        if nxt == miss:
            miss_what = what
            continue
        if hi - lo > 1 << 16:
            raise Undecidable(f"labels [{lo:#x}, {hi:#x}] lead to {nxt}: a topic level's table holds single labels")
        for label in range(lo, hi + 1):
            level = _label_level(label, nbytes, longs)
            if level is not None:
                points[level] = (nxt, f"{what} (label {label:#x})")
    return pieces(points, [], [], (miss, miss_what), 8 * nbytes)


def _variable_order(trans: dict[int, tuple[int, list[Piece]]], n: int) -> list[int]:
    """The variables in an order every path respects (a state's successors test later ones), so
    the walk's levels are the kernel's steps; the ones no state tests last."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for var, ps in trans.values():
        for _, _, nxt, _ in ps:
            if nxt in trans and trans[nxt][0] != var:
                g.add_edge(var, trans[nxt][0])
            elif nxt in trans:
                raise Undecidable(f"two states in a row test variable {var}: not a table order the checker models")
    try:
        return list(nx.lexicographical_topological_sort(g))
    except nx.NetworkXUnfeasible:
        raise Undecidable("the tables test the fields in no one order (a cycle between states)") from None


def _outcome(r: LiveReader, state: int, port_bits: list[Any], default: Outcome, max_states: int) -> Outcome:
    """deliver(): leaf[state]'s port bits (as the state file numbers them), drop flag, custom
    actions (the host stack's flag; a DNS answer's address or an ILA locator from leaf.value),
    and the program's default when the leaf delivers nothing. leaf[] is an array: an index never
    written reads as zeros (state 0, where a message no rule wants ends, included); only past its
    end does deliver() return with nothing, not even the default."""
    leaf = r.leaf(state)
    if leaf is None:
        if max_states and state >= max_states:
            return Outcome()
        return Outcome().or_default(default)
    ports = set()
    for w, word in enumerate(leaf.ports):
        while word:
            low = word & -word
            bit = w * 64 + low.bit_length() - 1
            if bit >= len(port_bits):
                raise TableDefect(f"leaf[{state}] names port bit {bit}; the unit numbers {len(port_bits)} ports")
            ports.add(port_bits[bit])
            word ^= low
    calls: set[Any] = {HOST_STACK} if leaf.flags & LEAF_CALL else set()
    value = leaf.value.to_bytes(8, "little")                  # packet byte order (custom.py)
    if leaf.flags & LEAF_ANSWER:
        calls.add((ANSWER_DNS, (str(ipaddress.IPv4Address(value[:4])),)))
    if leaf.flags & LEAF_ILA:
        calls.add((ILA, (f"locator {int.from_bytes(value, 'big'):#018x}",)))
    return Outcome(frozenset(ports), bool(leaf.flags & LEAF_DROP), frozenset(calls)).or_default(default)


def written_maps(c: Any) -> Any:
    """The maps exactly as dataplane/maps.py's MapSet.write would fill them for map contents `c`
    (the same ctypes values, byte for byte), kept in memory: what `attach` would write, for
    `verify --target ebpf` without a kernel. A key never written reads as absent."""
    from camus.dataplane.maps import MapSet

    class WrittenMaps(MapSet):
        def __init__(self) -> None:
            super().__init__({})
            self.store: dict[str, dict[bytes, bytes]] = {}

        def update(self, name: str, key: Any, value: Any) -> None:
            self.store.setdefault(name, {})[bytes(key)] = bytes(value)

        def delete(self, name: str, key: Any) -> None:
            self.store.get(name, {}).pop(bytes(key), None)

        def lookup(self, name: str, key: Any, value: Any) -> bool:
            raw = self.store.get(name, {}).get(bytes(key))
            if raw is None:
                return False
            ctypes.memmove(ctypes.addressof(value), raw, len(raw))
            return True

        def keys(self, name: str, key_type: Any) -> list[Any]:
            return [key_type.from_buffer_copy(k) for k in self.store.get(name, {})]

    maps = WrittenMaps()
    maps._port_words = c.port_words        # no leaf map to read them off
    maps.write(c)
    return maps
