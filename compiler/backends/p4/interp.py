"""Executes P4 table entries with P4 match semantics: the switch's behaviour, checked against
the IR interpreter and the XDP data plane.

Per message: meta.state starts at the root; tables apply in pipeline order. Exact keys must be
equal; among matching range/ternary entries the highest P4Runtime priority wins (a tie is an
error: the switch's choice would be undefined); among LPM entries the longest prefix wins. A
miss runs the table's default action (no change, or the one the entries set). A guarded table
(`P4Tables.guards`: t_<f> after t_<f>_exact, t_<f>_any after t_<f>) applies only when its guard
was applied and missed.
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass

from .entries import Match, P4Entry, P4Tables
from .schema import ANSWER_DNS, ILA_REWRITE, PF_ACCEPT, PF_PORT, PF_STATE, SVAR_KEY, window_shift

MASK64 = (1 << 64) - 1
STATE_KEYS = ("meta.state", PF_STATE, "egress_port")   # the key an entry is indexed by


class AmbiguousMatch(AssertionError):
    pass


@dataclass
class P4Verdict:
    ports: tuple[Any, ...]
    drop: bool
    calls: tuple[Any, ...]
    trace: list[tuple[str, int, int, str]]          # table, state before, state after, what happened
    answer: int | None = None                       # answer_dns: the address a DNS query is answered with
    locator: int | None = None                      # ila_rewrite: the destination's new top 64 bits


def _matches(m: Match, v: int) -> bool:
    if m.kind == "exact":
        return v == m.value
    if m.kind == "range":
        return m.value <= v <= m.arg
    if m.kind == "ternary":
        return v & m.arg == m.value & m.arg
    return False   # lpm handled by the caller with the width


class EntryInterpreter:
    def __init__(self, tables: P4Tables) -> None:
        self.t = tables
        # the switch's window registers: counter -> register index -> [window number, count, sum]
        self.registers: dict[str, dict[int, list[int]]] = {c: {} for c in tables.windows}
        self.by_state: dict[str, dict[int, list[P4Entry]]] = {}
        self.unkeyed: dict[str, list[P4Entry]] = {}
        for e in tables.entries:
            st = next((m.value for m in e.matches if m.field in STATE_KEYS), None)
            if st is None:
                self.unkeyed.setdefault(e.table, []).append(e)
            else:
                self.by_state.setdefault(e.table, {}).setdefault(st, []).append(e)

    def _lookup(self, table: str, state: int, fields: dict[str, int]) -> P4Entry | None:
        cands = self.by_state.get(table, {}).get(state, []) + self.unkeyed.get(table, [])
        hits: list[tuple[int, P4Entry]] = []
        for e in cands:
            ok, rank = True, 0
            for m in e.matches:
                v = state if m.field in STATE_KEYS else fields[m.field]
                if m.kind == "lpm":
                    w = self.t.widths[m.field]
                    free = w - m.arg
                    ok = (v >> free) == (m.value >> free) if m.arg else True
                    rank = m.arg
                else:
                    ok = _matches(m, v)
                if not ok:
                    break
            if ok:
                hits.append((rank or e.priority, e))
        if not hits:
            return None
        hits.sort(key=lambda h: -h[0])
        if len(hits) > 1 and hits[0][0] == hits[1][0]:
            raise AmbiguousMatch(f"{table}: {len(hits)} entries match state {state} with the same priority")
        return hits[0][1]

    def _register(self, counter: str, index: int, now_us: int) -> list[int]:
        shift = window_shift(self.t.windows[counter])
        window = 0 if shift is None else now_us >> shift                # endless: one window
        reg = self.registers[counter].setdefault(index, [window, 0, 0])
        if reg[0] != window:                                           # a new window starts empty
            reg[:] = [window, 0, 0]
        return reg

    def run(self, values: dict[str, int], now_us: int = 0) -> P4Verdict:
        state = self.t.root
        fields = dict(values)
        fields.setdefault(SVAR_KEY, 0)
        for key in self.t.codes.values():
            fields[key] = 0                            # the default action of a _code table
        trace: list[tuple[str, int, int, str]] = []
        missed: set[str] = set()
        ports: tuple[Any, ...] = ()
        drop = False
        calls: tuple[Any, ...] = ()
        answer: int | None = None
        locator: int | None = None
        for table in self.t.order:
            guard = self.t.guards.get(table)
            if guard is not None and guard not in missed:
                continue
            e = self._lookup(table, state, fields)
            before = state
            if e is None:
                missed.add(table)
                if table not in self.t.defaults:
                    trace.append((table, before, state, "miss"))
                    continue
                action, params = self.t.defaults[table]       # the table's default action
                e = P4Entry(table, (), action, params)
            if e.action == "set_state":
                state = e.params[0]
            trace.append((table, before, state, f"{e.action}({', '.join(map(str, e.params))})"))
            if table in self.t.codes:                  # t_<f>_code: the value's code, for t_<f>
                fields[self.t.codes[table]] = e.params[0]
            elif e.action == "set_mgid":
                ports = tuple(self.t.groups[e.params[0]])
            elif e.action == "set_port":
                ports = (e.params[0],)
            elif e.action == "drop_msg":
                drop = True
            elif e.action in self.t.updates:
                counter, fname = self.t.updates[e.action]
                reg = self._register(counter, e.params[0], now_us)
                reg[1] += 1
                if not fname:                          # every(n): the count wraps at the modulus
                    reg[1] = 0 if reg[1] == e.params[1] else reg[1]
                else:
                    reg[2] = (reg[2] + fields[fname]) & MASK64
            elif e.action in self.t.loads:
                counter, fn = self.t.loads[e.action]
                reg = self._register(counter, e.params[0], now_us)
                fields[SVAR_KEY] = reg[1] if fn == "count" else reg[2]
            elif e.action == "call":
                calls = self.t.calls[e.params[0]]
            elif e.action == ANSWER_DNS.name:
                calls, answer = self.t.calls[e.params[0]], e.params[1]
            elif e.action == ILA_REWRITE.name:
                calls, locator = self.t.calls[e.params[0]], e.params[1]
        if self.by_state.get(PF_PORT) and ports:
            ports = tuple(p for p in ports if self._egress_keeps(p, fields))
        return P4Verdict(ports, drop, calls, trace, answer, locator)

    def _egress_keeps(self, port: Any, fields: dict[str, int]) -> bool:
        """The egress port filter on a copy to `port`: kept unless t_pf_port gives the port a
        filter and its walk does not end in a state t_pf_accept holds."""
        e = self._lookup(PF_PORT, port, fields) if isinstance(port, int) else None
        if e is None:
            return True
        state = e.params[0]
        missed: set[str] = set()
        for table in self.t.egress:
            guard = self.t.guards.get(table)
            if guard is not None and guard not in missed:
                continue
            e = self._lookup(table, state, fields)
            if table == PF_ACCEPT:
                return e is not None
            if e is None:
                missed.add(table)
            else:
                state = e.params[0]
        return False
