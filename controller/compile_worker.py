"""Compiling switches in a process of its own, so the controller's event loop answers requests
while a large rule set compiles (a thread would share the interpreter lock with it: API calls
waited tens of milliseconds behind the compiler).

The worker keeps each switch's incremental compiler across calls (one worker, reused). XDP
hosts never come here: their agents compile the rule lines they are sent.
"""
from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from camus.compiler.compile import Compiled, CompileOptions
from camus.compiler.language.spec import Spec
from camus.compiler.language.rules_parser import SourceText
from camus.compiler.logic.lowering import Lowered, lower_rules
from camus.compiler.structure.diagram import DiagramBuilder

from .devices import DeviceCompiler

_worker: dict[str, Any] = {}


def _init(spec: Spec, options: CompileOptions, parent: int) -> None:
    _worker.update(compiler=DeviceCompiler(spec, options))
    threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="parent-watch").start()


def _exit_with(parent: int) -> None:
    """End the worker when the controller is gone: a controller killed with SIGKILL (a crash, a
    takeover test) cannot shut its pool down, and the worker would wait for work forever."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _compile(switches: dict[str, tuple[str, frozenset[int]]]) -> dict[str, Compiled]:
    comp: DeviceCompiler = _worker["compiler"]
    return {d: _slim(comp.compile_device(d, "p4", text, exact)) for d, (text, exact) in switches.items()}


def _slim(c: Compiled) -> Compiled:
    """What the controller needs of a switch's compile (the pipeline, the spec, the source for a
    refit), without what only the compiler uses: the rule syntax trees, the lowered rules and the
    diagram builder, whose memo and nodes grow with every incremental compile."""
    empty = DiagramBuilder(c.builder.widths, c.options.max_nodes)
    fresh = lower_rules(c.spec, [], SourceText("", "<slim>"))         # an empty lowerer, not its caches
    lowered = Lowered(c.spec, c.lowered.variables, [], c.lowered.user_rule_count, fresh.lowerer)
    return dataclasses.replace(c, rules=[], builder=empty, lowered=lowered)


class CompileProcess:
    """One spawned worker process (not forked: the controller has gRPC and event-loop threads)."""

    def __init__(self, spec: Spec, options: CompileOptions) -> None:
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_init,
                                        initargs=(spec, options, os.getpid()))

    async def compile(self, switches: dict[str, tuple[str, frozenset[int]]]) -> dict[str, Compiled]:
        """The switches' tables for their rule texts (each incrementally from its last one)."""
        if not switches:
            return {}
        return await asyncio.get_running_loop().run_in_executor(self.pool, _compile, switches)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
