"""Reference interpreter of the Pipeline IR: the verdict every back end must reproduce.

It reads only the IR (plus, for raw packets, the spec's layout) and follows the execution
model documented in `pipeline.py`, recording the path of states for `explain`.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from ..structure.bitvector import union_actions
from ..codec.packets import decode_packet
from ..ir.pipeline import ActionSet, FieldTable, Pipeline, PortFilters
from ..language.spec import Spec
from .state_store import StateStore

NO_ACTIONS = ActionSet()


@dataclass
class Step:
    table: str
    state: int
    key: int
    next: int
    match: str


@dataclass
class Verdict:
    actions: ActionSet
    final_state: int
    path: list[Step] = field(default_factory=list)
    updates: tuple[int, ...] = ()


class _TableIndex:
    def __init__(self, t: FieldTable) -> None:
        self.t = t
        self.states = set(t.states)
        self.exact: dict[tuple[int, int], int] = {}
        self.any: dict[int, int] = {}
        self.ranges: dict[int, tuple[list[int], list[tuple[int, int, int]]]] = {}
        self.lpm: dict[int, dict[int, dict[int, int]]] = {}
        spans: dict[int, list[tuple[int, int, int]]] = {}
        for e in t.entries:
            m = e.match
            if m[0] == "exact":
                self.exact[(e.state, m[1])] = e.next
            elif m[0] == "any":
                self.any[e.state] = e.next
            elif m[0] == "range":
                spans.setdefault(e.state, []).append((m[1], m[2], e.next))
            else:
                self.lpm.setdefault(e.state, {}).setdefault(m[2], {})[m[1]] = e.next
        for s, lst in spans.items():
            lst.sort()
            self.ranges[s] = ([lo for lo, _, _ in lst], lst)
        self.lpm_lens = {s: sorted(d, reverse=True) for s, d in self.lpm.items()}
        comp = t.compression
        self.code_exact: dict[int, int] = {}
        self.code_bounds: list[int] = []
        self.code_vals: list[int] = []
        if comp is not None:
            for m, code in comp.codes:
                if m[0] == "exact":
                    self.code_exact[m[1]] = code
                else:
                    self.code_bounds.append(m[1])
                    self.code_vals.append(code)

    def key(self, value: int) -> int:
        comp = self.t.compression
        if comp is None:
            return value
        if comp.kind == "exact":
            return self.code_exact.get(value, 0)
        return self.code_vals[bisect.bisect_right(self.code_bounds, value) - 1]

    def lookup(self, state: int, key: int) -> tuple[int, str]:
        kind = self.t.kind
        if kind == "exact":
            nxt = self.exact.get((state, key))
            if nxt is not None:
                return nxt, f"exact {key}" if key >> 64 == 0 else "exact: the value above"   # (topic levels)
            nxt = self.any.get(state)
            return (nxt, "any") if nxt is not None else (0, "miss")
        if kind == "range":
            found = self.ranges.get(state)
            if found:
                starts, spans = found
                i = bisect.bisect_right(starts, key) - 1
                if i >= 0 and spans[i][1] >= key:
                    return spans[i][2], f"range [{spans[i][0]}, {spans[i][1]}]"
            return 0, "miss"
        width = self.t.key_width
        by_len = self.lpm.get(state, {})
        for plen in self.lpm_lens.get(state, ()):
            prefix = (key >> (width - plen)) << (width - plen) if plen else 0
            nxt = by_len[plen].get(prefix)
            if nxt is not None:
                return nxt, f"lpm /{plen}"
        return 0, "miss"


class PortFilterIndex:
    """The egress port filters (Pipeline.port_filters): a copy to a listed port walks that port's
    tables from its root and is kept when it ends in an accepting state."""

    def __init__(self, pf: PortFilters) -> None:
        self.pf = pf
        self.tables = [_TableIndex(t) for t in pf.tables]
        self.accept = set(pf.accept)

    def keeps(self, port: object, values: dict[str, int]) -> bool:
        state = self.pf.roots.get(port)       # type: ignore[call-overload]
        if state is None:
            return True
        for idx in self.tables:
            if state in idx.states:
                state = idx.lookup(state, values[idx.t.field])[0]   # type: ignore[index]
        return state in self.accept

    def apply(self, actions: ActionSet, values: dict[str, int]) -> ActionSet:
        ports = tuple(p for p in actions.ports if self.keeps(p, values))
        return actions if len(ports) == len(actions.ports) else replace(actions, ports=ports)


class PipelineInterpreter:
    def __init__(self, pipeline: Pipeline) -> None:
        self.p = pipeline
        self.header_tables = [_TableIndex(t) for t in pipeline.tables if t.state_var is None]
        self.state_tables = [_TableIndex(t) for t in pipeline.tables if t.state_var is not None]
        self.store = StateStore([v.window_us for v in pipeline.state_vars], [v.modulus for v in pipeline.state_vars])
        self.port_filters = PortFilterIndex(pipeline.port_filters) if pipeline.port_filters is not None else None

    def run(self, values: dict[str, int], now_us: int = 0) -> Verdict:
        if self.p.bitvector is not None:
            return self._run_bitvector(values)
        state = self.p.root
        path: list[Step] = []
        for idx in self.header_tables:
            if state in idx.states:
                key = idx.key(values[idx.t.field])  # type: ignore[index]
                nxt, how = idx.lookup(state, key)
                path.append(Step(idx.t.name, state, key, nxt, how))
                state = nxt
        updates = self.p.state_updates.get(state, ())
        for var in updates:
            info = self.p.state_vars[var]
            self.store.update(var, values[info.field] if info.field else 0, now_us)
        for idx in self.state_tables:
            if state in idx.states:
                info = self.p.state_vars[idx.t.state_var]  # type: ignore[index]
                key = self.store.read(info.id, info.fn, now_us)
                nxt, how = idx.lookup(state, key)
                path.append(Step(idx.t.name, state, key, nxt, how))
                state = nxt
        actions = self.p.final_actions(self.p.leaves.get(state))
        if self.port_filters is not None and actions.ports:
            actions = self.port_filters.apply(actions, values)
        return Verdict(actions, state, path, updates)

    def _run_bitvector(self, values: dict[str, int]) -> Verdict:
        """The bit-vector stage: one interval per field, bitmaps ANDed, matching terms' actions
        united. The path shows, per field, the interval (as `state`) and its bitmap (`next`)."""
        bv = self.p.bitvector
        assert bv is not None
        matched, steps = bv.matching(values)
        path = [Step(name, interval, key, bitmap, f"interval {interval}: {bin(bv.bitmaps[bitmap]).count('1')} terms")
                for name, key, interval, bitmap in steps]
        actions = self.p.final_actions(union_actions(bv, matched, self.p.leaves))
        return Verdict(actions, 0, path)

    def run_packet(self, spec: Spec, data: bytes, now_us: int = 0) -> tuple[list[Verdict], str | None]:
        """Verdicts for each message of a raw packet, and the decoder's complaint if any."""
        decoded = decode_packet(spec, data)
        out = []
        for m in decoded.messages:
            out.append(self.run(m.values, now_us) if m.subscribable else Verdict(NO_ACTIONS, 0))
        return out, decoded.error
