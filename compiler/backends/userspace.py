"""The userspace back end: the compiled tables in the simplest form a userspace broker can run:
per table and state, a sorted list of disjoint intervals [lo, hi] -> next state, plus a default
for the gaps.

Exact values are [v, v], an exact table's `any` entry is the default, nested LPM prefixes are cut
into the elementary intervals where the longest prefix wins. Both userspace brokers (Python and
C) execute these, so they run the same compiled tables as camus-xdp. A text file carries them to
the C broker (`write_flat`); the benchmark's brokers (bench/py_broker.py, bench/c/broker.c)
load it, and `explain --via userspace` runs messages through it.
"""
from __future__ import annotations

from typing import Any

import bisect
from dataclasses import dataclass
from pathlib import Path

from ..compiled import Compiled
from ..semantics.explain import Engine
from ..semantics.interpreter import Step
from ..codec.packets import encode_message
from ..ir.pipeline import ActionSet, FieldTable, Pipeline
from ..language.spec import Spec
from .base import Artefacts, Backend, BackendError, TargetOptions


class FlatError(BackendError):
    """The rule set or spec is outside what the flat userspace tables can carry."""


@dataclass
class FlatState:
    starts: list[int]
    spans: list[tuple[int, int, int]]       # (lo, hi, next), sorted, disjoint
    default: int

    def lookup(self, v: int) -> int:
        i = bisect.bisect_right(self.starts, v) - 1
        if i >= 0 and v <= self.spans[i][1]:
            return self.spans[i][2]
        return self.default


@dataclass
class FlatTable:
    field: str
    offset: int          # byte offset of the field in the message
    size: int            # bytes
    states: dict[int, FlatState]


@dataclass
class FlatTables:
    root: int
    tables: list[FlatTable]
    leaves: dict[int, tuple[int, ...]]       # state -> ports (drop-only leaves deliver nothing)
    msg_bytes: int
    mtype: tuple[int, int] | None           # (byte offset, value) of the message-type byte

    def classify(self, msg: bytes) -> tuple[int, ...]:
        """Ports one message goes to (what a Python user would write on these tables)."""
        state = self.root
        for t in self.tables:
            st = t.states.get(state)
            if st is not None:
                state = st.lookup(int.from_bytes(msg[t.offset:t.offset + t.size], "big"))
        return self.leaves.get(state, ())


def _flatten(t: FieldTable, state: int, entries: list[Any]) -> FlatState:
    default = 0
    spans: list[tuple[int, int, int]] = []
    prefixes: list[tuple[int, int, int, int]] = []          # (lo, hi, plen, next)
    w = t.key_width
    for e in entries:
        m = e.match
        if m[0] == "any":
            default = e.next
        elif m[0] == "exact":
            spans.append((m[1], m[1], e.next))
        elif m[0] == "range":
            spans.append((m[1], m[2], e.next))
        else:
            v, plen = m[1], m[2]
            lo = (v >> (w - plen)) << (w - plen) if plen else 0
            prefixes.append((lo, lo | ((1 << (w - plen)) - 1), plen, e.next))
    if prefixes:
        cuts = sorted({p[0] for p in prefixes} | {p[1] + 1 for p in prefixes if p[1] + 1 < (1 << w)} | {0})
        for i, a in enumerate(cuts):
            b = (cuts[i + 1] - 1) if i + 1 < len(cuts) else (1 << w) - 1
            best = max((p for p in prefixes if p[0] <= a <= p[1]), key=lambda p: p[2], default=None)
            if best is not None:
                spans.append((a, b, best[3]))
    spans.sort()
    merged: list[tuple[int, int, int]] = []
    for lo, hi, nxt in spans:
        if merged and merged[-1][1] + 1 == lo and merged[-1][2] == nxt:
            merged[-1] = (merged[-1][0], hi, nxt)
        else:
            merged.append((lo, hi, nxt))
    return FlatState([s[0] for s in merged], merged, default)


def flat_tables(p: Pipeline, spec: Spec) -> FlatTables:
    if p.state_vars:
        raise FlatError("the userspace brokers run stateless rule sets (no count/sum/avg)")
    if p.bitvector is not None:
        raise FlatError("the userspace brokers run the decision diagram's tables: compile with --strategy bdd")
    if p.default_action is not None:
        raise FlatError("the userspace brokers forward what rules select and nothing else: "
                        "remove query_default_action from the spec for them")
    msg = spec.message_instance
    if msg is None:
        raise FlatError("the spec has no message header")
    tables = []
    for t in p.tables:
        if t.compression is not None:
            raise FlatError("compile without --compress for the userspace brokers")
        q = spec.query_field(t.field or "")
        if q is None or q.instance != msg.name or q.offset % 8 or q.width % 8 or q.width > 64:
            raise FlatError(f"{t.name}: the userspace brokers read byte-aligned message fields of up to 64 bits")
        by_state: dict[int, list[Any]] = {}
        for e in t.entries:
            by_state.setdefault(e.state, []).append(e)
        states = {s: _flatten(t, s, by_state.get(s, [])) for s in t.states}
        tables.append(FlatTable(t.name, q.offset // 8, q.width // 8, states))
    mtype = None
    if spec.message_type is not None:
        found = spec.header_field(spec.message_type[0])
        if found is None or found[1].width != 8 or found[1].offset % 8:
            raise FlatError("the message type must be a byte of the message")
        mtype = (found[1].offset // 8, spec.message_type[1])
    if any(not isinstance(x, int) for a in p.leaves.values() for x in a.ports):
        raise FlatError("the userspace brokers forward to numbered ports only")
    leaves = {s: tuple(int(x) for x in a.ports) for s, a in p.leaves.items() if a.ports}
    return FlatTables(p.root, tables, leaves, spec.message_bytes, mtype)


def flat_text(ft: FlatTables) -> str:
    """The text form the C broker reads (see bench/c/broker.c)."""
    lines = ["camus-flat 1", f"root {ft.root}", f"msgbytes {ft.msg_bytes}",
             f"mtype {ft.mtype[0]} {ft.mtype[1]}" if ft.mtype else "mtype -1 0", f"tables {len(ft.tables)}"]
    for t in ft.tables:
        lines.append(f"table {t.offset} {t.size} {len(t.states)}")
        for s, st in sorted(t.states.items()):
            lines.append(f"state {s} {st.default} {len(st.spans)}")
            lines += [f"{lo} {hi} {nxt}" for lo, hi, nxt in st.spans]
    lines.append(f"leaves {len(ft.leaves)}")
    for s, ports in sorted(ft.leaves.items()):
        lines.append(f"leaf {s} {len(ports)} " + " ".join(map(str, ports)))
    return "\n".join(lines) + "\n"


def write_flat(ft: FlatTables, path: Path) -> Path:
    path.write_text(flat_text(ft))
    return path


def read_flat(path: Path) -> FlatTables:
    """The inverse of `write_flat` (the Python broker reads the same file as the C one)."""
    it = iter(path.read_text().split("\n"))
    head = [next(it) for _ in range(5)]
    if head[0] != "camus-flat 1":
        raise FlatError(f"{path}: not a camus-flat file")
    root, msg_bytes = int(head[1].split()[1]), int(head[2].split()[1])
    mt_off, mt_val = map(int, head[3].split()[1:])
    tables = []
    for _ in range(int(head[4].split()[1])):
        _, off, size, n = next(it).split()
        states = {}
        for _ in range(int(n)):
            _, s, default, k = next(it).split()
            spans: list[tuple[int, int, int]] = []
            for _ in range(int(k)):
                lo, hi, nxt = map(int, next(it).split())
                spans.append((lo, hi, nxt))
            states[int(s)] = FlatState([sp[0] for sp in spans], spans, int(default))
        tables.append(FlatTable("", int(off), int(size), states))
    leaves = {}
    for _ in range(int(next(it).split()[1])):
        parts = next(it).split()
        leaves[int(parts[1])] = tuple(int(x) for x in parts[3:])
    return FlatTables(root, tables, leaves, msg_bytes, None if mt_off < 0 else (mt_off, mt_val))


class FlatEngine:
    """Messages classified the way the userspace brokers do it: encoded to bytes, then looked
    up table by table in the flat intervals (ports only: the brokers forward, nothing more)."""

    def __init__(self, c: Compiled) -> None:
        self.c = c
        self.ft = flat_tables(c.pipeline, c.spec)
        self.groups = {tuple(ps): g for g, ps in c.pipeline.groups.items()}

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        ports = self.ft.classify(encode_message(self.c.spec, values))
        return ActionSet(ports, self.groups.get(ports) if len(ports) > 1 else None), None


class UserspaceBackend(Backend):
    name = "userspace"
    help = "flat interval tables for a userspace broker (the benchmark's C and Python brokers)"
    explain_as = "userspace"

    def build(self, c: Compiled, options: TargetOptions) -> Artefacts:
        ft = flat_tables(c.pipeline, c.spec)
        text = flat_text(ft)
        spans = sum(len(st.spans) for t in ft.tables for st in t.states.values())
        return Artefacts(c, {"flat_tables.txt": text}, text,
                         f"  userspace tables: {len(ft.tables)} tables, {spans} intervals, {len(ft.leaves)} leaves")

    def engine(self, c: Compiled) -> Engine:
        return FlatEngine(c)
