""""What will the network do with this packet?" through any layer.

An engine turns a message (or a whole packet) into an action set and, where it has one, the
path of states through the tables. `filters` evaluates the rules directly, `ir` runs the
reference interpreter; the back ends register their own engines (`xdp`, `p4`) in ENGINES.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from .compile import Compiled
from .filter_eval import FilterEvaluator
from .interpreter import PipelineInterpreter, Step
from .packets import decode_packet
from .pipeline import ActionSet


@dataclass
class Explained:
    message: int                       # running message number
    packet: int | None                 # packet number when the input was packets
    values: dict[str, int]
    actions: ActionSet
    path: list[Step] | None = None
    note: str | None = None


@dataclass
class PacketNote:
    packet: int
    note: str


class Engine(Protocol):
    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]: ...


class _FilterEngine:
    def __init__(self, c: Compiled) -> None:
        self.e = FilterEvaluator(c.rules, c.lowered)

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        return self.e.run(values, now_us), None


class _IrEngine:
    def __init__(self, c: Compiled) -> None:
        self.i = PipelineInterpreter(c.pipeline)

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        v = self.i.run(values, now_us)
        return v.actions, v.path


class _P4Engine:
    """The switch: the P4 back end's entries executed with P4 match semantics."""

    def __init__(self, c: Compiled) -> None:
        from .backends.p4_entries import p4_tables
        from .backends.p4_interp import EntryInterpreter
        self.c = c
        self.sw = EntryInterpreter(p4_tables(c.pipeline, c.spec))

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        v = self.sw.run(values, now_us)
        calls = tuple((x.split("(")[0], tuple(a for a in x[x.index("(") + 1:-1].split(",") if a))
                      for x in v.calls)
        group = next((g for g, ps in self.c.pipeline.groups.items() if tuple(ps) == v.ports), None)
        path = [Step(table, before, 0, after, what) for table, before, after, what in v.trace
                if what != "miss" or before != after]
        return ActionSet(v.ports, group, v.drop, calls), path


# The data plane registers "xdp" (dataplane/explain_engine.py): the compiler does not import it.
ENGINES: dict[str, Callable[[Compiled], Engine]] = {"filters": _FilterEngine, "ir": _IrEngine,
                                                    "p4": _P4Engine}


def explain_values(c: Compiled, messages: Iterable[dict[str, int]], via: str = "ir") -> list[Explained]:
    engine = ENGINES[via](c)
    out = []
    for i, values in enumerate(messages):
        actions, path = engine.run(values, 0)
        out.append(Explained(i, None, values, actions, path))
    return out


def explain_packets(c: Compiled, packets: Iterable[tuple[int, bytes]], via: str = "ir",
                    engine: object | None = None) -> tuple[list[Explained], list[PacketNote]]:
    """Packets are (timestamp_ns, bytes); messages not subscribed to by type are shown with a
    note, and decoder complaints are returned per packet. `engine`: one made by the caller
    (who wants more of it afterwards), else ENGINES[via]."""
    engine = engine or ENGINES[via](c)
    out: list[Explained] = []
    notes: list[PacketNote] = []
    whole = getattr(engine, "run_packet", None)      # engines that take the frame itself
    for p, (ts_ns, data) in enumerate(packets):
        decoded = decode_packet(c.spec, data)
        if decoded.error:
            notes.append(PacketNote(p, decoded.error))
        per_frame = whole(data) if whole is not None and decoded.messages else None
        for m in decoded.messages:
            if not m.subscribable:
                out.append(Explained(len(out), p, m.values, ActionSet(), None,
                                     "message type is not subscribed to"))
                continue
            if per_frame is not None:
                actions, path = per_frame[m.index] if m.index < len(per_frame) else (ActionSet(), None)
            else:
                actions, path = engine.run(m.values, ts_ns // 1000)
            out.append(Explained(len(out), p, m.values, actions, path))
    return out, notes
