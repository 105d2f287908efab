"""Fitting a rule set to a target: compile, ask the back end for its verdict, recompile with the
next policy. The one place that decides what to give up for a target to hold the rules.

A back end reads only its `Compiled` (backends/base.py): when the tables do not fit the target it
raises `OverBudget`, naming each resource over and by how much, and writes nothing. This driver,
above the back ends, then tries the next policy and says what it did:

    1. the rules as compiled (exact; or the switch cover, `CompileOptions(strategy="switch")`,
       which drops the fields that multiply the diagram out: structure/fit.py);
    2. numeric constants discretised to multiples of alpha (Camus's approximation), alpha from
       ALPHA_STEPS above the one asked for, coarsest last.

Each step over-delivers, never under-delivers: a message the exact rules select is still
forwarded, and an XDP host (or the subscriber) behind the switch filters exactly. The policies
are tried in order until one fits; with `fit=False` the first verdict stands.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .backends.base import Artefacts, Backend, OverBudget, TargetOptions
from .compile import Compiled, no_cyclic_gc
from .compile import recompile as recompile_with

ALPHA_STEPS = (2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000)


@dataclass
class Fitted:
    """A build that fits, the compile it came from and what was given up for it."""
    compiled: Compiled
    artefacts: Artefacts
    steps: list[str] = field(default_factory=list)     # each policy tried past the first, and why

    @property
    def approximated(self) -> bool:
        return self.compiled.options.alpha > 1 or bool(self.compiled.pipeline.covers_without)


def recompile(c: Compiled, **changes: object) -> Compiled:
    """The same rules compiled again with some options changed."""
    return recompile_with(c, dataclasses.replace(c.options, **changes))  # type: ignore[arg-type]


def coarser(alpha: int) -> Callable[[Compiled], Compiled]:
    def policy(base: Compiled) -> Compiled:
        return recompile(base, alpha=alpha)
    return policy


def policies(c: Compiled) -> list[Callable[[Compiled], Compiled]]:
    """The policies after the first, in order: coarser alpha steps."""
    return [coarser(a) for a in ALPHA_STEPS if a > c.options.alpha]


def describe(c: Compiled) -> str:
    parts = []
    if c.options.alpha > 1:
        parts.append(f"numeric constants discretised to multiples of {c.options.alpha} (--alpha {c.options.alpha})")
    if c.pipeline.covers_without:
        parts.append(f"fields left to the hosts: {', '.join(c.pipeline.covers_without)}")
    return "; ".join(parts) or "exact"


def build_fitted(c: Compiled, backend: Backend, options: TargetOptions, fit: bool = True) -> Fitted:
    """Build `c` for `backend`; when it is over the target's budget and `fit` holds, recompile
    with each next policy until one fits. Raises OverBudget (from the last try) when none does,
    or the back end's BackendError for anything else."""
    with no_cyclic_gc():        # a back end's build allocates entries by the hundred thousand: the
        return _build_fitted(c, backend, options, fit)     # collector rescanned them all (half its time)


def _build_fitted(c: Compiled, backend: Backend, options: TargetOptions, fit: bool) -> Fitted:
    steps: list[str] = []
    try:
        return Fitted(c, backend.build(c, options), steps)
    except OverBudget as exc:
        if not fit:
            raise
        last = exc
    for policy in policies(c):
        options.notice(f"over the {backend.name} budget ({last.headline()}); trying coarser constants")
        trial = policy(c)
        steps.append(f"{describe(trial)}: after {last.headline()}")
        try:
            art = backend.build(trial, options)
        except OverBudget as exc:
            last = exc
            continue
        art.summary += f"\n  fitted: {describe(trial)} (over-delivers; hosts behind the switch filter exactly)"
        return Fitted(trial, art, steps)
    raise last
