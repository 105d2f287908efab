"""The Pipeline IR itself as a target: the JSON every other back end reads, and the reference
interpreter as its explain engine."""
from __future__ import annotations

from ..compiled import Compiled
from ..semantics.explain import Engine, IrEngine
from .base import Artefacts, Backend, TargetOptions


class IrBackend(Backend):
    name = "ir"
    help = "the Pipeline IR as JSON (what every back end reads)"
    explain_as = "ir"

    def build(self, c: Compiled, options: TargetOptions) -> Artefacts:
        return Artefacts(c, {}, c.pipeline.dumps())

    def engine(self, c: Compiled) -> Engine:
        return IrEngine(c)
