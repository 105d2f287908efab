"""eBPF back end, deltas: a `PipelineDelta` as the map entries to write, the root to move to,
and what to take out afterwards, inside one bank of the maps.

`EbpfLayout` is what one bank holds: a map state id per live diagram node (ids are allocated,
not the node ids, so they stay dense however long the diagram churns) and, per state, the slots,
range buckets, sub-tables or search-tree nodes it occupies. New states get ids and storage no
live state uses; a state's entries never change once written (it is immutable, like the node it
stands for), so an exact slot may keep inlining its child's descriptor. Storage and ids of
removed states wait in quarantine until in-flight packets are done (`reclaim`), then serve new
states (free lists by size: exact tables are powers of two, and a symbol's price table is
about the size it was before the change).

`plan` checks capacity before it returns: a delta that does not fit raises CapacityError and
leaves the layout as it was (the caller writes a whole set into the other bank instead, which
also compacts).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...ir.delta import PipelineDelta
from ...ir.pipeline import ActionSet, MatchSpec
from ...language.spec import Spec
from .program import EbpfLimits
from .contents import KIND, LEAF_CALL, RADIX_SUB, STATE_FINAL, CapacityError, Desc, MapContents, check_ports, leaf_value
from .tables import exact_state, lpm_key_of, range_state
from .custom import check_custom
from ..emit import BackendError

QUARANTINE_S = 0.05      # runtime.GRACE_S: in-flight packets finish well within it


class Region:
    """A span [lo, hi) of one array map: bump allocation, then free lists by size."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi, self.top = lo, hi, lo
        self.free: dict[int, list[int]] = {}

    def alloc(self, size: int) -> int:
        if size == 0:
            return self.lo
        spare = self.free.get(size)
        if spare:
            return spare.pop()
        if self.top + size > self.hi:
            raise CapacityError(f"{self.hi - self.lo} entries in this bank are in use")
        off = self.top
        self.top += size
        return off

    def release(self, off: int, size: int) -> None:
        if size:
            self.free.setdefault(size, []).append(off)


CALLS = ("custom actions",)     # in a leaf's counted ports: it calls custom actions (a tuple: never a port)


@dataclass
class MapDelta:
    """Entries to write before the root moves (children first), and the root."""
    root: int
    desc: dict[int, Desc] = field(default_factory=dict)
    xslots: dict[int, tuple[int, int] | None] = field(default_factory=dict)      # None: an empty slot
    rnodes: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    rsub: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    bounds: dict[int, tuple[tuple[Any, ...], tuple[Any, ...], int, int]] = field(default_factory=dict)
    lpm: dict[tuple[int, int, int], int] = field(default_factory=dict)
    leaf: dict[int, tuple[tuple[int, ...], int, int, int]] = field(default_factory=dict)
    cover: tuple[int, ...] | None = None         # the bypass cover, when the forwarded ports changed
    cover_flags: int = 0                         # with it: LEAF_CALL when a live rule has custom actions
    bank: int = 0

    def writes(self) -> int:
        return (len(self.desc) + len(self.xslots) + len(self.rnodes) + len(self.rsub) + len(self.bounds)
                + len(self.lpm) + len(self.leaf))


@dataclass
class Held:
    """One state's id and storage in the bank."""
    sid: int
    storage: list[tuple[str, int, int]]          # (region, offset, size)
    lpm: list[tuple[int, int, int]]
    ports: tuple[Any, ...] = ()                  # a leaf's ports (the bypass cover counts them), and
                                                 # CALLS when it has custom actions (the stack is in the cover)
    tests: bool = False                          # a state that tests a field (not a final one)


class EbpfLayout:
    def __init__(self, limits: EbpfLimits, bank: int, ports: list[object], spec: Spec | None = None) -> None:
        self.spec = spec                     # checks leaves' custom actions against the program's spec
        half_states = limits.max_states // 2
        lo = bank * half_states
        self.bank = bank
        self.ids = Region(max(lo, 1), lo + half_states)        # id 0 is "nobody" in both banks
        self.regions = {
            "xslots": Region(bank * (limits.max_exact // 2), (bank + 1) * (limits.max_exact // 2)),
            "rnodes": Region(bank * (limits.max_rnodes // 2), (bank + 1) * (limits.max_rnodes // 2)),
            "rsub": Region(bank * (limits.max_rsub // 2), (bank + 1) * (limits.max_rsub // 2)),
            "bounds": Region(bank * (limits.max_bounds // 2), (bank + 1) * (limits.max_bounds // 2)),
        }
        self.lpm_free = limits.max_lpm // 2
        self.port_words = limits.port_words
        check_ports(ports, (), self.port_words)
        self.ports = ports
        self._mask = MapContents(0, ports=list(ports), port_words=self.port_words)   # port bits of a port set
        self.held: dict[int, Held] = {}                         # node -> its id and storage
        self.descs: dict[int, Desc] = {}                         # id -> descriptor (exact slots inline it)
        self.port_refs: Counter[Any] = Counter()                 # ports of live leaves: the bypass cover
        self.quarantine: list[tuple[float, list[Held]]] = []
        self.root = 0

    # -- ids and flags --------------------------------------------------------------------
    def ref(self, node: int) -> int:
        """A transition into `node`: its id, flagged final unless it tests something."""
        if node == 0:
            return STATE_FINAL
        h = self.held[node]
        return h.sid if h.tests else h.sid | STATE_FINAL

    def reclaim(self, now: float | None = None, everything: bool = False) -> list[Held]:
        """Free what removed states held once their quarantine is over (all of it with
        `everything`); returns them: the caller clears their entries before the next write
        can reuse their ids and storage."""
        now = time.monotonic() if now is None else now
        due: list[Held] = []
        while self.quarantine and (everything or now - self.quarantine[0][0] >= QUARANTINE_S):
            for h in self.quarantine.pop(0)[1]:
                self._free(h)
                due.append(h)
        return due

    def _free(self, h: Held) -> None:
        self.ids.release(h.sid, 1)
        for region, off, size in h.storage:
            self.regions[region].release(off, size)
        self.lpm_free += len(h.lpm)

    def holding(self) -> list[Held]:
        """Every live state's id and storage (to take a whole bank out)."""
        return list(self.held.values())

    # -- planning -------------------------------------------------------------------------
    def plan(self, delta: PipelineDelta, widths: dict[int, int]) -> MapDelta:
        """The map writes for `delta` (`widths`: each variable's bits). Raises CapacityError or
        BackendError with the layout unchanged. Call `reclaim` first (and clear what it
        returns), or removed states' space is not reused."""
        taken: list[tuple[int, Held]] = []
        md = MapDelta(0, bank=self.bank)
        try:
            for n in list(delta.added) + list(delta.leaves):
                taken.append((n, Held(self.ids.alloc(1), [], [], tests=n in delta.added)))
                self.held[n] = taken[-1][1]
            for n, rows in delta.added.items():
                self._state(n, rows.var, rows.kind, rows.entries, widths[rows.var], md)
            leaf_values = {n: self._leaf(a) for n, a in delta.leaves.items()}
        except (CapacityError, BackendError):
            for n, h in reversed(taken):          # nothing of the delta stays allocated
                del self.held[n]
                self.descs.pop(h.sid, None)
                self._free(h)
            raise
        ports_before = set(self.port_refs)
        for n, a in delta.leaves.items():
            h = self.held[n]
            md.leaf[h.sid] = leaf_values[n]
            h.ports = a.ports + ((CALLS,) if a.calls else ())
            self.port_refs.update(h.ports)
        md.root = self.ref(delta.root)
        retired: list[Held] = []
        for n in delta.removed:
            h = self.held.pop(n)
            retired.append(h)
            self.port_refs.subtract(h.ports)
            self.descs.pop(h.sid, None)
        self.port_refs = +self.port_refs
        if set(self.port_refs) != ports_before or not delta.old_root:
            md.cover = self._mask.port_mask(tuple(p for p in self.port_refs if p is not CALLS))
            md.cover_flags = LEAF_CALL if CALLS in self.port_refs else 0
        if retired:
            self.quarantine.append((time.monotonic(), retired))
        self.root = md.root
        return md

    def _leaf(self, a: ActionSet) -> tuple[tuple[int, ...], int, int, int]:
        check_ports(self.ports, a.ports, self.port_words)
        if self.spec is not None:            # an ila()/answerDNS the program cannot run: refused
            check_custom(self.spec, a, diagram=True)
        return leaf_value(a, self._mask)

    def _state(self, n: int, var: int, kind: str, entries: tuple[Any, ...], width: int, md: MapDelta) -> None:
        h = self.held[n]
        sid = h.sid
        rows: list[tuple[int, MatchSpec, int]] = [(sid, e.match, self.ref(e.next)) for e in entries]
        if kind == "lpm":
            if len(rows) > self.lpm_free:
                raise CapacityError(f"LPM entries: {len(rows)} needed, {self.lpm_free} free in this bank")
            self.lpm_free -= len(rows)
            for _, m, nxt in rows:
                key = lpm_key_of(sid, m, width)
                md.lpm[key] = nxt
                h.lpm.append(key)
            desc: Desc = (KIND["lpm"], var, 0, 0, 0, 0, 0)
        else:
            scratch = MapContents(0)
            desc = (exact_state(sid, var, rows, scratch) if kind == "exact"
                    else range_state(var, rows, width, scratch))
            desc = self._place(h, desc, scratch, md)
        md.desc[sid] = desc
        self.descs[sid] = desc

    def _place(self, h: Held, desc: Desc, c: MapContents, md: MapDelta) -> Desc:
        """Move a state's storage, built at offset 0 in `c`, to space allocated for it."""
        kind, var, bits, default, base, count, mult = desc
        sizes = {"xslots": c.xslot_count, "rnodes": len(c.rnodes), "rsub": len(c.rsub), "bounds": len(c.bounds)}
        off: dict[str, int] = {}
        for region, size in sizes.items():
            off[region] = self.regions[region].alloc(size)
            h.storage.append((region, off[region], size))
        dx, dr, ds, db = off["xslots"], off["rnodes"], off["rsub"], off["bounds"]
        for i in range(sizes["xslots"]):        # every slot: an empty one may hold a freed state's key
            md.xslots[i + dx] = c.xslots.get(i)
        for i, (split, below, above) in enumerate(c.rnodes):
            md.rnodes[i + dr] = (split, below, above + ds if above & RADIX_SUB else above)
        for i, (lo, rbase, last, shift) in enumerate(c.rsub):
            md.rsub[i + ds] = (lo, rbase + dr, last, shift)
        for i, (keys, vals, nkeys, leaf) in enumerate(c.bounds):
            md.bounds[i + db] = (keys, vals if leaf else tuple(v + db for v in vals), nkeys, leaf)
        moved = {KIND["exact"]: dx, KIND["radix"]: dr, KIND["direct"]: dr, KIND["range"]: db}
        return (kind, var, bits, default, base + moved.get(kind, 0), count, mult)
