"""`camus-xdp explain --via xdp`: the real XDP program in the kernel answers (root)."""
from __future__ import annotations

from camus.compiler.backends.ebpf_tables import map_contents
from camus.compiler.compile import Compiled
from camus.compiler.explain import ENGINES
from camus.compiler.interpreter import Step
from camus.compiler.packets import build_packet
from camus.compiler.pipeline import ActionSet

from .program import XdpProgram


class XdpEngine:
    """The real XDP program, loaded in the kernel and run with BPF_PROG_TEST_RUN (root)."""

    def __init__(self, c: Compiled) -> None:
        self.c = c
        self.prog = XdpProgram.load(c.spec)
        self.prog.write(map_contents(c.pipeline, c.spec))

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        return self.run_packet(build_packet(self.c.spec, [values]))[0]

    def run_packet(self, frame: bytes) -> list[tuple[ActionSet, list[Step] | None]]:
        """The frame itself through the kernel program: per framed message, its verdict."""
        got = self.prog.classify(frame)
        return [(self.c.pipeline.leaves.get(state, ActionSet()),
                 [Step("xdp", self.c.pipeline.root, 0, state, f"kernel verdict {got.verdict}")])
                for state, _, _ in got.messages]


ENGINES.setdefault("xdp", XdpEngine)      # importing the data plane adds its layer to explain
