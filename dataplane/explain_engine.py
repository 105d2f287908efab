"""`camus-xdp explain --via xdp`: the real XDP program in the kernel answers (root).

Each frame runs through the loaded classifier (BPF_PROG_TEST_RUN) for its verdict and every
message's ports; then, for each output port, through the TC program that prunes and rewrites
the copies, so explain shows the very bytes each port would get. Nothing is transmitted.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from camus.compiler.backends.ebpf.bitvector import STATE_BV
from camus.compiler.backends.ebpf.tables import sized_contents
from camus.compiler.backends.ebpf.contents import LEAF_DROP, LEAF_CALL
from camus.compiler.compile import Compiled
from camus.compiler.semantics.interpreter import Step
from camus.compiler.codec.packets import decode_packet, message_frame
from camus.compiler.ir.pipeline import ActionSet

from .program import PacketResult, XdpProgram

TC_ACT_SHOT = 2


@dataclass
class PortCopy:
    port: object
    messages: list[int]              # positions of the frame's messages this copy keeps
    frame: bytes | None              # None: TC dropped the copy (it could not prune it honestly)


@dataclass
class FrameOutput:
    packet: int
    verdict: str                     # the XDP verdict
    copies: list[PortCopy] = field(default_factory=list)

    def describe(self) -> str:
        if self.verdict == "XDP_DROP":
            return f"packet {self.packet}: XDP_DROP (nobody subscribed to any of its messages)"
        if not self.copies:
            return f"packet {self.packet}: {self.verdict}, passed to the host stack unchanged"
        lines = [f"packet {self.packet}: {self.verdict} -> {len(self.copies)} cop{'y' if len(self.copies) == 1 else 'ies'}"]
        for cp in self.copies:
            if cp.frame is None:
                lines.append(f"  port {cp.port}: copy dropped by TC (could not be pruned)")
            else:
                lines.append(f"  port {cp.port}: messages {cp.messages}, {len(cp.frame)} bytes: {cp.frame.hex()}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"packet": self.packet, "verdict": self.verdict,
                "copies": [{"port": cp.port, "messages": cp.messages,
                            "frame": cp.frame.hex() if cp.frame is not None else None} for cp in self.copies]}


class XdpEngine:
    """The real XDP program, loaded in the kernel and run with BPF_PROG_TEST_RUN (root)."""

    def __init__(self, c: Compiled) -> None:
        self.c = c
        limits, self.contents = sized_contents(c.pipeline, c.spec)      # as attach sizes the program
        self.prog = XdpProgram.load(c.spec, limits)
        self.prog.write(self.contents)
        # run_packet's kernel answers, kept for output(): each frame runs once (stateful
        # predicates would otherwise see it twice), identical frames in order.
        self._answers: dict[bytes, deque[PacketResult]] = defaultdict(deque)

    def close(self) -> None:
        """Unload the program (its maps go with it)."""
        self.prog.close()

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        frame = message_frame(self.c.spec, values)
        return self._per_message(self.prog.classify(frame))[0]

    def run_packet(self, frame: bytes) -> list[tuple[ActionSet, list[Step] | None]]:
        """The frame itself through the kernel program: per framed message, its verdict."""
        got = self.prog.classify(frame)
        self._answers[frame].append(got)
        return self._per_message(got)

    def _per_message(self, got: PacketResult) -> list[tuple[ActionSet, list[Step] | None]]:
        return [(self._actions(state, flags, words),
                 [Step("xdp", self.c.pipeline.root, 0, state, f"kernel verdict {got.verdict}")])
                for state, flags, words in got.messages]

    def _actions(self, state: int, flags: int, words: tuple[int, ...]) -> ActionSet:
        if state != STATE_BV:
            a = self.c.pipeline.leaves.get(state, ActionSet())
        else:   # the bit-vector stage: the kernel united the matching terms' ports and flags itself
            ports = self.contents.ports_of(words)
            group = next((g for g, ps in self.c.pipeline.groups.items() if tuple(ps) == ports), None)
            a = ActionSet(ports, group, bool(flags & LEAF_DROP))
        d = self.c.pipeline.default_action
        # query_default_action: the kernel flagged the default's custom actions (a drop default
        # is what the kernel does with a message nobody takes anyway)
        if d is not None and not a.delivers and (flags & LEAF_CALL or (d.drop and not d.calls)):
            return self.c.pipeline.final_actions(a)
        return a

    def output(self, packet: int, frame: bytes) -> FrameOutput:
        """The verdict and, per port, the copy TC would send (pruned to that port's messages)."""
        kept = self._answers.get(frame)
        got = kept.popleft() if kept else self.prog.classify(frame)
        out = FrameOutput(packet, got.verdict)
        if got.verdict != "XDP_PASS" or not decode_packet(self.c.spec, frame).messages:
            return out
        for bit, port in enumerate(self.contents.ports):
            word, mask = bit // 64, 1 << (bit % 64)
            if not got.union[word] & mask:
                continue
            keep = [i for i, (_, _, ports) in enumerate(got.messages) if ports[word] & mask]
            run = self.prog.output_packet(frame, bit, sum(1 << i for i in keep))
            out.copies.append(PortCopy(port, keep, None if run.retval == TC_ACT_SHOT else run.packet))
        return out
