""""What will the network do with this packet?" through any layer.

An engine turns a message (or a whole packet) into an action set and, where it has one, the
path of states through the tables. Two engines are the reference semantics and live here:
`FilterEngine` evaluates the rules as written, `IrEngine` runs the reference interpreter on
the Pipeline IR. Every back end brings its own (backends/registry.py lists them by name);
this module imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from ..compile import Compiled
from .filter_eval import FilterEvaluator
from .interpreter import PipelineInterpreter, Step
from ..codec.packets import decode_packet
from ..ir.pipeline import ActionSet


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


class FilterEngine:
    """The rules evaluated directly (the meaning every compiled form must keep)."""

    def __init__(self, c: Compiled) -> None:
        self.e = FilterEvaluator(c.rules, c.lowered)

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        return self.e.run(values, now_us), None


class IrEngine:
    """The reference interpreter on the Pipeline IR, with the path of states."""

    def __init__(self, c: Compiled) -> None:
        self.i = PipelineInterpreter(c.pipeline)

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        v = self.i.run(values, now_us)
        return v.actions, v.path


def explain_values(c: Compiled, messages: Iterable[dict[str, int]], engine: Engine) -> list[Explained]:
    out = []
    for i, values in enumerate(messages):
        actions, path = engine.run(values, 0)
        out.append(Explained(i, None, values, actions, path))
    return out


def explain_packets(c: Compiled, packets: Iterable[tuple[int, bytes]],
                    engine: Engine) -> tuple[list[Explained], list[PacketNote]]:
    """Packets are (timestamp_ns, bytes); messages not subscribed to by type are shown with a
    note, and decoder complaints are returned per packet."""
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
