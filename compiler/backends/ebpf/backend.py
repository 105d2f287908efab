"""The XDP/TC back end: the C program specialised from the spec and the map contents that
realise the tables; its explain engine is the real program in this kernel (root)."""
from __future__ import annotations

from ...compiled import Compiled
from ...semantics.explain import Engine
from ..base import Artefacts, Backend, TargetOptions
from .program import program_text
from .tables import sized_contents


class EbpfBackend(Backend):
    name = "ebpf"
    help = "the XDP/TC program (C) and its BPF map contents"
    explain_as = "xdp"

    def build(self, c: Compiled, options: TargetOptions) -> Artefacts:
        limits, contents = sized_contents(c.pipeline, c.spec)
        source = program_text(c.spec, limits)
        summary = (f"  XDP maps: {len(contents.desc)} state descriptors, {len(contents.exact)} exact, "
                   f"{len(contents.bounds)} range bounds, {len(contents.lpm)} LPM, {len(contents.leaf)} leaves; "
                   f"{len(contents.ports)} ports")
        return Artefacts(c, {"camus_xdp.c": source}, source, summary)

    def engine(self, c: Compiled) -> Engine:
        # the kernel side lives in the data plane (BCC, BPF_PROG_TEST_RUN): imported on use only
        from camus.dataplane.explain_engine import XdpEngine
        engine: Engine = XdpEngine(c)
        return engine

