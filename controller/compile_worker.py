"""Compiling in a process of its own, so the controller's event loop answers requests while a
large rule set compiles (a thread would share the interpreter lock with it: API calls waited
tens of milliseconds behind the compiler).

The worker keeps its own per-device compile cache across calls (one worker, reused), and sends
back only the tables of devices whose digest differs from what the controller already holds.
"""
from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from camus.compiler.compile import CompileOptions
from camus.compiler.language.spec import Spec
from camus.compiler.language.rules_parser import SourceText
from camus.compiler.logic.lowering import Lowered, lower_rules
from camus.compiler.structure.diagram import DiagramBuilder

from .devices import DeviceCompiler, DeviceTables
from .routing import Routing, route
from .topology import Topology

_worker: dict[str, Any] = {}


def _init(topology: Topology, spec: Spec, policy: str, options: CompileOptions) -> None:
    _worker.update(topology=topology, policy=policy, compiler=DeviceCompiler(spec, options))


def _compile(snap: tuple[int, dict[str, list[str]]], held: dict[str, str]
             ) -> tuple[int, Routing, dict[str, DeviceTables | None]]:
    version, by_host = snap
    routing = route(_worker["topology"], by_host, _worker["policy"])
    tables = _worker["compiler"].compile(routing)
    return version, routing, {d: None if held.get(d) == t.digest else _slim(t) for d, t in tables.items()}


def _slim(t: DeviceTables) -> DeviceTables:
    """What the controller needs of a device's compile (the pipeline, the spec, the source for a
    refit), without what only the compiler uses: the rule syntax trees, the lowered rules and the
    diagram builder, whose memo and nodes grow with every incremental compile (a rule count stays)."""
    c = t.compiled
    empty = DiagramBuilder(c.builder.widths, c.options.max_nodes)
    fresh = lower_rules(c.spec, [], SourceText("", "<slim>"))         # an empty lowerer, not its caches
    lowered = Lowered(c.spec, c.lowered.variables, [], c.lowered.user_rule_count, fresh.lowerer)
    return dataclasses.replace(t, compiled=dataclasses.replace(c, rules=[], builder=empty, lowered=lowered),
                               rule_count=len(c.rules))


class CompileProcess:
    """One spawned worker process (not forked: the controller has gRPC and event-loop threads)."""

    def __init__(self, topology: Topology, spec: Spec, policy: str, options: CompileOptions) -> None:
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_init,
                                        initargs=(topology, spec, policy, options))

    async def compile(self, snap: tuple[int, dict[str, list[str]]], held: dict[str, DeviceTables]
                      ) -> tuple[int, Routing, dict[str, DeviceTables]]:
        """Routing and every device's tables for the snapshot; unchanged devices keep `held`'s."""
        digests = {d: t.digest for d, t in held.items()}
        version, routing, got = await asyncio.get_running_loop().run_in_executor(self.pool, _compile, snap, digests)
        return version, routing, {d: t if t is not None else held[d] for d, t in got.items()}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
