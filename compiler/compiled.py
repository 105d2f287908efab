"""What a compile is given and what it gives: the options and the compiled product (every
intermediate stage, the Pipeline IR, timings). Its own module so that the back ends, which read
only a `Compiled`, never import the driver that makes one (compile.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .language.rules_ast import Rule
from .language.rules_parser import SourceText
from .language.spec import Spec
from .logic.lowering import Lowered
from .ir.pipeline import Pipeline
from .structure.diagram import DiagramBuilder


@dataclass
class CompileOptions:
    order: str = "spec"          # "spec": field order of the spec; "heuristic": fewest constants first
    alpha: int = 1               # >1: discretise numeric constants to multiples of alpha
    exact_rules: frozenset[int] = frozenset()   # rule indices alpha leaves exact (last-hop ports)
    compress_max: int = 0        # >0: compress fields with at most this many distinct codes
    max_nodes: int = 2_000_000   # diagram size limit
    dnf_limit: int = 4096        # conjunctions one rule may expand to
    count_rules: int = 0         # >0: the first N rules get their own counters (leaves say
                                 # which of them matched; keeps apart states that differ only there)
    strategy: str = "auto"       # auto | bdd | bitvector (structure/strategy.py decides auto) |
                                 # switch: the exact diagram when it builds within switch_entries,
                                 # else a cover of bounded width (structure/relaxed.py)
    switch_entries: int = 100_000  # strategy switch: diagram size the exact build may reach
    cover_width: int = 1024      # strategy switch's cover: states per field at most,
    cover_fanout: int = 32       # and edges per state
    port_filters: int = 32768    # a cover's egress port filters: table entries at most (0: none;
                                 # structure/port_filters.py)
    bv_layout: str = "auto"      # the bit-vector stage's prefix: auto | planes | columns
                                 # (structure/bv_layout.py: auto models both and keeps the cheaper)


@dataclass
class Compiled:
    spec: Spec
    rules: list[Rule]
    source: SourceText
    lowered: Lowered
    builder: DiagramBuilder
    root: int
    order: list[int]
    pipeline: Pipeline
    timings: dict[str, float] = field(default_factory=dict)
    options: CompileOptions = field(default_factory=CompileOptions)
    exact_lowered: Lowered | None = None    # the lowering before alpha widened it: a recompile with
                                            # other options starts here (recompile())
