"""Subscription changes into an attached interface's maps as deltas, in milliseconds.

A long-lived process (the host agent, an edge broker) holds a `LiveClassifier` for an interface.
It keeps the rule set in an `IncrementalCompiler`'s live diagram, follows the diagram's root
with `LiveTables` and places states in one bank of the maps with an `EbpfLayout`. A change of
a few subscriptions is then: the diagram below the symbols it touches rebuilt, the new states
written under ids no live state uses (batched map writes), the root moved (one array write: a
packet sees the old tables or the new ones), and the states no longer reachable cleared and
reused once a grace period has passed (at a later change, or `close`).

Taking over an attachment, and any change the live bank cannot hold (its space used up, a table
kind the delta cannot keep, node ids renumbered after the compiler started afresh), writes the
whole set into the other bank instead, flips to it and clears the old bank: the atomic update of
`runtime.update`, which also compacts. What cannot take this path at all (state functions, topic
fields matched by labels) raises and stays with `camus-xdp update`.

Per-rule counters (attach --count-rules) take it too: a counted rule is a live line of its own
(incremental.counted_line), so its leaves name it; a removed leaf's hits are added to its rules'
carried totals before its id serves another state, and a new leaf starts from zero.

While a `LiveClassifier` holds an interface it owns its tables: the state file
(/run/camus/IFACE.json) is brought up to date on whole writes, at most every SAVE_S seconds after
changes, and on `close`; a process killed between leaves garbage in unreachable states of its
bank, which the next whole write into that bank overwrites.
"""
from __future__ import annotations

import bisect
import ctypes
import os
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from camus.compiler.backends.ebpf.delta import EbpfLayout, Held, MapDelta
from camus.compiler.ir.pipeline import ActionSet
from camus.compiler.backends.ebpf.contents import STATE_FINAL, STATE_MASK, CapacityError, Desc
from camus.compiler.backends.emit import BackendError
from camus.compiler.compile import CompileOptions
from camus.compiler.heap import HeapKeeper
from camus.compiler.incremental import IncrementalCompiler, NotLive, live_items, split_line
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.structure.live_tables import LiveTables, NeedsFullWrite
from camus.compiler.structure.slicing import sort_ports

from .counting import rule_totals, tables_key
from .faults import GRACE_S
from .installed import (Installed, UnitHold, contents_from_keys, forget_live_state, hold_unit, load_installed,
                        save)
from .journal import finish_or_undo
from .maps import CFG_ROOT, SLOT_BYTES, Bound, MapSet, RNode, RSub, lpm_key
from .maps import Desc as CDesc
from .preflight import port_specs
from .program import DataplaneError, require_root

# A save at 100K rules sorts and serialises every rule line (~100 ms, the process's own time):
# every 10 s it was the p99 of a thousand changes a second. A stale file only lags in rule
# lines and root: the bank is the same until the next whole write, which saves.
SAVE_S = 60.0


def _cdesc(d: Desc | None) -> CDesc:
    if d is None:
        return CDesc()
    kind, var, bits, default, base, count, mult = d
    return CDesc(kind, var, bits, 0, default, base, count, mult)


_EMPTY_SLOT = bytes(SLOT_BYTES.size)


def pack_slots(slots: Iterable[tuple[int, int] | None], descs: dict[int, Desc]) -> bytes:
    """Exact-table slots (value, next state; None: empty) as camus_slot bytes, each with a copy
    of its next state's descriptor (a final state has none)."""
    pack, out = SLOT_BYTES.pack, []
    for slot in slots:
        if slot is None:
            out.append(_EMPTY_SLOT)
            continue
        value, nxt = slot
        d = None if nxt & STATE_FINAL else descs.get(nxt & STATE_MASK)
        if d is None:
            out.append(pack(value, nxt, 1, 0, 0, 0, 0, 0, 0, 0, 0))
        else:
            kind, var, bits, default, base, count, mult = d
            out.append(pack(value, nxt, 1, kind, var, bits, 0, default, base, count, mult))
    return b"".join(out)


def write_delta(maps: MapSet, md: MapDelta, descs: dict[int, Desc]) -> None:
    """Write a delta's states (storage, descriptors, leaves), then move the root: nothing
    reaches the new states before the last write."""
    u32 = ctypes.c_uint32
    maps.update_packed("xslots", array("I", md.xslots), pack_slots(md.xslots.values(), descs))
    maps.update_many("rnodes", u32, RNode, [(u32(i), RNode(*r)) for i, r in md.rnodes.items()])
    maps.update_many("rsub", u32, RSub, [(u32(i), RSub(lo, b, last, shift)) for i, (lo, b, last, shift)
                                         in md.rsub.items()])
    maps.update_many("bounds", u32, Bound, [
        (u32(i), Bound((ctypes.c_uint64 * 8)(*keys), (ctypes.c_uint32 * 8)(*vals), nkeys, leaf))
        for i, (keys, vals, nkeys, leaf) in md.bounds.items()])
    for (plen, s, v), nxt in md.lpm.items():
        maps.update("lpm", lpm_key(plen, s, v), u32(nxt))
    maps.update_many("desc", u32, CDesc, [(u32(s), _cdesc(d)) for s, d in md.desc.items()])
    ps = maps.structs
    maps.update_many("leaf", u32, ps.Leaf, [(u32(s), ps.leaf(w, flags, group, value))
                                            for s, (w, flags, group, value) in md.leaf.items()])
    if md.cover is not None:
        maps.update("bypass", u32(md.bank), ps.bypass(md.cover, md.cover_flags))
    maps.cfg(CFG_ROOT, md.root)


def clear_states(maps: MapSet, held: list[Held]) -> None:
    """Take out states no packet reaches any more: descriptors, leaves, LPM entries (storage
    needs nothing: it is only read through a descriptor, and is overwritten when reused)."""
    u32 = ctypes.c_uint32
    maps.update_many("desc", u32, CDesc, [(u32(h.sid), CDesc()) for h in held if h.tests])
    blank = maps.structs.Leaf
    maps.update_many("leaf", u32, blank, [(u32(h.sid), blank()) for h in held if not h.tests])
    for h in held:
        for plen, s, v in h.lpm:
            maps.delete("lpm", lpm_key(plen, s, v))


class OneShotHeap(HeapKeeper):
    """A command's: its process ends in a moment, so the collector is never given the diagram."""

    def tick(self) -> None:
        pass

    def settle(self) -> None:
        pass


def sorted_has(lines: list[str], text: str) -> bool:
    """Whether sorted `lines` holds `text` (by bisection)."""
    i = bisect.bisect_left(lines, text)
    return i < len(lines) and lines[i] == text


def map_keys(desc: Iterable[int], leaf: Iterable[int], xslots: Iterable[int], lpm: Iterable[Any],
             bank: int) -> dict[str, Any]:
    """Map keys in installed.keys_of's form (what `MapSet.remove` takes out) of a live-path set."""
    return {"desc": sorted(desc), "leaf": sorted(leaf), "xslots": sorted(xslots), "lpm": sorted(list(k) for k in lpm),
            "updates": [], "labels": [], "label_bank": bank, "label_words": 0}


def held_keys(held: list[Held], bank: int) -> dict[str, Any]:
    """The map keys of states as the layout holds them."""
    return map_keys((h.sid for h in held if h.tests), (h.sid for h in held if not h.tests),
                    (i for h in held for region, off, size in h.storage if region == "xslots"
                     for i in range(off, off + size)), (k for h in held for k in h.lpm), bank)


@dataclass
class LiveReport:
    added: int
    removed: int
    writes: int               # map entries written
    compile_ms: float
    write_ms: float
    whole: bool = False       # a whole set was written into the other bank


class LiveClassifier:
    # Told of each write's plan before its first map write (dataplane/live_state.py journals it):
    # (the writes, the layout and tables after them, whether it is a whole set in the other bank).
    journal: Callable[[MapDelta, EbpfLayout, LiveTables, bool], None] | None = None

    def __init__(self, iface: str, options: CompileOptions | None = None,
                 compiler: IncrementalCompiler | None = None, holder: str = "",
                 hold: UnitHold | None = None) -> None:
        """`compiler`: one whose live diagram already holds the installed rules (the one that
        compiled them, same options) is taken over instead of building the set again. The unit
        is held until `close()` (`holder`: who commands that would rewrite it are told holds it;
        they are refused: deltas written against tables a whole update replaced would serve a
        mix of both); `hold`: the caller's own, kept past `close()` (a host agent holds its
        interface for as long as it runs)."""
        require_root()
        self.iface = iface
        self.inst = load_installed(iface)
        self._own_hold = hold is None
        self.hold = hold or hold_unit(self.inst.unit, holder or f"process {os.getpid()} (a live classifier)")
        try:
            self._take_over(options, compiler)
        except BaseException:
            if self._own_hold:
                self.hold.release()
            raise

    @classmethod
    def for_command(cls, inst: Installed) -> "LiveClassifier":
        """One without a hold of its own, for a command that holds the unit's lock and sets its
        parts itself (dataplane/live_state.py: `take_over` with a rules file's lines, or the
        parts saved by the last command)."""
        require_root()
        self = cls.__new__(cls)
        self.iface, self.inst, self._own_hold, self.hold = inst.unit, inst, False, None   # type: ignore[assignment]
        self.heap = OneShotHeap()
        return self

    def _take_over(self, options: CompileOptions | None, compiler: IncrementalCompiler | None,
                   items: set[str] | None = None) -> None:
        """Build the installed rules (or the live lines `items`: a command's new rules file) and
        write them as a whole set into the other bank."""
        iface = self.iface
        self.inst = load_installed(iface)          # as it is now that the unit is ours
        spec = load_spec(self.inst.spec)
        if spec.topics:
            raise DataplaneError(f"{iface}: topic and DNS name levels are matched by labels; "
                                 "their changes go through `camus-xdp update`")
        options = options or CompileOptions(count_rules=self.inst.count_rules)
        counted = self.inst.counted[:options.count_rules]
        installed = live_items(counted + self.inst.rule_lines, len(counted)) if items is None else items
        if items is not None:                      # the counted rules, in their order
            tagged = sorted((i, t) for t, i in map(split_line, items) if i is not None)
            counted = [t for _, t in tagged]
        holds = (compiler is not None and compiler.options == options and compiler.live is not None
                 and set(compiler.live_lines()) == installed)
        fresh = (compiler is not None and compiler.live is None and compiler.options == options
                 and compiler.spec.query_fields == spec.query_fields)     # a new one, its parses seeded
        self.compiler: IncrementalCompiler = (compiler if (holds or fresh) and compiler is not None
                                              else IncrementalCompiler(spec, options))
        self.limits = self.inst.limits()
        bits = self.inst.port_bits if self.inst.port_bits is not None else port_specs(self.inst.ports)[0]
        self.fixed_ports = bits is not None
        self.ports: list[object] = list(bits or [])
        self.widths = {v.index: v.width for v in self.compiler.variables}
        self.tables: LiveTables | None = None
        self.layout: EbpfLayout | None = None
        self.generation = -1
        self._saved = 0.0
        if self.hold is not None:                # (a command's process ends: nothing to keep collectable)
            self.heap = HeapKeeper()             # no full collections of the live diagram under churn
            forget_live_state(self.inst.unit)    # deltas of its own from here: a command's saved parts go stale
        self.base = dict(self.inst.rule_base)    # counted rules' totals carried from retired leaves
        self.counting: dict[int, tuple[str, ...]] = {}   # leaf id -> texts of the counted rules it feeds
        self.counted_at = dict(enumerate(counted))       # counted index -> rule text
        self.maps = MapSet.from_pins(self.inst.pins)
        try:
            finish_or_undo(self.inst, self.maps)
            if holds:
                assert self.compiler.live is not None
                root = self.compiler.live.root
            else:
                root = self.compiler.change(sorted(installed), [])     # the installed rules
            self._whole(root)
        except (NotLive, CompileErrors, CompileError, CapacityError, BackendError, KeyError) as exc:
            self.maps.close()             # (nothing written: a take-over plans before it writes)
            raise DataplaneError(f"{iface}: the installed rules do not take the delta path ({exc}); "
                                 "use `camus-xdp update`") from exc
        except BaseException:
            self.maps.close()
            raise

    # -- changes ----------------------------------------------------------------------------
    def apply(self, added: list[str], removed: list[str]) -> LiveReport:
        """Add and remove rule lines. A bad line or a removed line that is not live raises
        (CompileErrors, KeyError) and nothing changes; a change that does not fit anywhere
        raises DataplaneError and the old tables keep serving."""
        assert self.layout is not None
        t0 = time.perf_counter()
        self.retire(self.layout.reclaim())
        root = self.compiler.change(added, removed)
        self.note_counted(added, removed)
        t1 = time.perf_counter()
        try:
            writes, whole = self._write(root)
        except (CapacityError, BackendError) as exc:
            self.compiler.change(removed, added)              # undo: the live lines are the old ones
            self.note_counted(removed, added)
            raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
        report = LiveReport(len(added), len(removed), writes, (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3,
                            whole)
        if writes and time.monotonic() - self._saved > SAVE_S:
            self.save()
        if not whole:                             # a whole write has swept already
            self.heap.tick()
        return report

    def replay(self, added: list[str], removed: list[str]) -> int:
        """What `apply` of a change that was written as a delta (then its retired states cleared,
        as a command does) did to the live tables and the layout, without the maps: a command's
        saved parts brought up to the changes logged after them (live_state.py). Returns the
        root state it leads to; raises NeedsFullWrite, CapacityError, BackendError or NotLive
        when the change would not be a delta now (the log then does not describe these parts)."""
        assert self.tables is not None and self.layout is not None
        root = self.compiler.change(added, removed)
        self.note_counted(added, removed)
        if self.generation != self.compiler.generation:
            raise NeedsFullWrite("the diagram started afresh")
        delta = self.tables.move(root)
        md = self.layout.plan(delta, self.widths)
        self._counting(delta.leaves, self.layout)
        for h in self.layout.reclaim(everything=True):
            self.counting.pop(h.sid, None)
        return md.root

    def _write(self, root: int) -> tuple[int, bool]:
        """Move the maps to `root`: as a delta in the live bank when it can take it, else as a
        whole write into the other bank. Returns (entries written, whole). Raises what no bank
        can take (CapacityError; BackendError: a port the ports file does not name), with the
        maps and the live tables as they were."""
        assert self.tables is not None and self.layout is not None
        if self.generation == self.compiler.generation:     # else the node ids mean other nodes now
            try:
                delta = self.tables.move(root)
            except NeedsFullWrite:
                return self._whole(root), True
            if delta.empty:                                  # a refresh: nothing to write
                return 0, False
            try:
                md = self.layout.plan(delta, self.widths)
            except (CapacityError, BackendError) as exc:
                self.tables.move(delta.old_root)             # back where the maps are
                if self.fixed_ports and not isinstance(exc, CapacityError):
                    raise                                    # no whole write names that port either
                return self._whole(root), True
            self.count_new(delta.leaves, self.layout)
            if self.journal is not None:
                self.journal(md, self.layout, self.tables, False)
            write_delta(self.maps, md, self.layout.descs)
            return md.writes(), False
        return self._whole(root), True

    def _whole(self, root: int) -> int:
        """Write the whole live set into the other bank, flip to it, clear the old bank."""
        old_bank = self.layout.bank if self.layout is not None else self.inst.bank
        tables = LiveTables(self.compiler.live.builder, self.compiler.variables)   # type: ignore[union-attr]
        delta = tables.move(root)
        ports = self.ports
        if not self.fixed_ports:                     # no ports file: the rules' ports, in order
            ports = list(sort_ports({p for a in delta.leaves.values() for p in a.ports}))
        layout = EbpfLayout(self.limits, 1 - old_bank, ports, self.compiler.spec)
        md = layout.plan(delta, self.widths)
        self.count_new(delta.leaves, layout)
        if self.journal is not None:
            self.journal(md, layout, tables, True)
        write_delta(self.maps, md, layout.descs)
        time.sleep(GRACE_S)
        if self.layout is not None:
            self.retire(self.layout.holding() + self.layout.reclaim(everything=True))
        else:
            self.carry_installed()
            self.maps.remove(contents_from_keys(self.inst.keys))
        self.tables, self.layout, self.ports = tables, layout, ports
        self.generation = self.compiler.generation
        self.save()
        self.heap.settle()                        # a new set is built: freeze it
        return md.writes()

    # -- per-rule counters ---------------------------------------------------------------------
    def note_counted(self, added: list[str], removed: list[str]) -> None:
        """Which text each counted index names, after a change of live lines."""
        for ln in removed:
            text, index = split_line(ln)
            if index is not None and self.counted_at.get(index) == text:
                del self.counted_at[index]
        for ln in added:
            text, index = split_line(ln)
            if index is not None:
                self.counted_at[index] = text

    def count_new(self, leaves: dict[int, ActionSet], layout: EbpfLayout) -> None:
        """New leaves that count rules: which texts they feed, and hit counters from zero (their ids
        may have served other leaves)."""
        fresh = self._counting(leaves, layout)
        if fresh:
            self.maps.clear_leaf_hits(fresh)

    def _counting(self, leaves: dict[int, ActionSet], layout: EbpfLayout) -> list[int]:
        """Note which texts new leaves count; their ids."""
        fresh = []
        for n, a in leaves.items():
            if a.rules:
                sid = layout.held[n].sid
                self.counting[sid] = tuple(self.counted_at[i] for i in a.rules if i in self.counted_at)
                fresh.append(sid)
        return fresh

    def retire(self, held: list[Held]) -> None:
        """Take out states no packet reaches any more (clear_states), their counted hits first
        added to their rules' carried totals."""
        counting = [h.sid for h in held if not h.tests and h.sid in self.counting]
        if counting:
            hits = self.maps.leaf_hits(counting)
            for sid in counting:
                for text in self.counting.pop(sid):
                    self.base[text] = self.base.get(text, 0) + hits[sid]
        clear_states(self.maps, held)

    def carry_installed(self) -> None:
        """A whole write over tables `camus-xdp attach`/`update` wrote: their counted rules'
        totals (by the state file) become carried totals."""
        if self.inst.counted:
            totals = rule_totals(self.maps, self.inst)
            for i, text in enumerate(self.inst.counted):
                self.base[text] = self.base.get(text, 0) + totals[i]

    def record(self, tables: LiveTables, layout: EbpfLayout, lines: list[str]
               ) -> tuple[list[str], dict[str, list[int]], dict[str, int], str]:
        """What the state file says of the tables `tables` placed by `layout` with rule lines
        `lines`: the counted rules, live leaf -> counted rules, carried totals, the tables key."""
        counted = [self.counted_at[i] for i in sorted(self.counted_at)]
        held = layout.held
        leaf_rules = {str(held[n].sid): list(a.rules) for n, a in tables.leaf_actions.items() if a.rules}
        key = tables_key(self.compiler.options, lines, counted)
        if not self.compiler.options.count_rules:    # (an agent's: it counts no rule) the totals so far stay
            counted = self.inst.counted
        live = set(counted)
        return counted, leaf_rules, {t: n for t, n in self.base.items() if t in live}, key

    # -- the state file -----------------------------------------------------------------------
    def keys_of(self) -> dict[str, Any]:
        assert self.layout is not None
        return {**held_keys(self.layout.holding(), self.layout.bank), "ports": list(self.ports)}

    def rule_lines(self) -> list[str]:
        """The live rules' texts (the state file's rule lines)."""
        return sorted({split_line(ln)[0] for ln in self.compiler.live_slots})

    def rule_lines_after(self, before: list[str], added: list[str], removed: list[str]) -> list[str]:
        """rule_lines() after a change of live lines from rule lines `before` (sorted): found by
        the change, not by sorting every live text again (100K: 80 ms of a CLI update)."""
        counted = set(self.counted_at.values())
        live = self.compiler.live_slots
        lines = list(before)
        for text in {split_line(ln)[0] for ln in removed}:
            if text not in live and text not in counted and sorted_has(lines, text):   # no other line serves it
                del lines[bisect.bisect_left(lines, text)]
        for text in {split_line(ln)[0] for ln in added}:
            if not sorted_has(lines, text):
                bisect.insort(lines, text)
        return lines

    def save(self, lines: list[str] | None = None) -> None:
        """The state file brought up to date (`lines`: rule_lines(), when the caller has them)."""
        assert self.layout is not None and self.tables is not None
        lines = self.rule_lines() if lines is None else lines
        counted, leaf_rules, base, key = self.record(self.tables, self.layout, lines)
        self.inst.bank, self.inst.root, self.inst.keys = self.layout.bank, self.layout.root, self.keys_of()
        self.inst.counted, self.inst.leaf_rules, self.inst.rule_base = counted, leaf_rules, base
        self.inst.rule_lines, self.inst.tables_key = lines, key
        self.inst.pending = None
        save(self.inst)
        self._saved = time.monotonic()

    def close(self) -> None:
        """Clear what waits in quarantine, save the state file, release the maps."""
        if self.layout is not None and self.maps.fds:
            time.sleep(GRACE_S)
            self.retire(self.layout.reclaim(everything=True))
            self.save()
        self.maps.close()
        if self._own_hold:
            self.hold.release()

    def __enter__(self) -> "LiveClassifier":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

