"""Fitting a rule set to a target: compile, ask the back end for its verdict, recompile with the
next policy. The one place that decides what to give up for a target to hold the rules.

A back end reads only its `Compiled` (backends/base.py): when the tables do not fit the target it
raises `OverBudget`, naming each resource over and by how much, and writes nothing. This driver,
above the back ends, then tries the next policy and says what it did:

    1. the rules as compiled (exact; or, with `CompileOptions(strategy="switch")` and a diagram
       too large to build, the bounded-width cover: structure/relaxed.py);
    2. an exact compile: numeric constants discretised to multiples of alpha (Camus's
       approximation), alpha from ALPHA_STEPS above the one asked for, coarsest last; then,
       for strategy "switch", the cover;
    3. a cover: narrower covers (fewer states per field, fewer edges per state), down to one
       state per field (every message to every port a rule names: that always fits).

Each step over-delivers, never under-delivers: a message the exact rules select is still
forwarded, and an XDP host (or the subscriber) behind the switch filters exactly. The policies
are tried in order until one fits; with `fit=False` the first verdict stands.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from .backends.base import Artefacts, Backend, OverBudget, TargetOptions
from .compile import CompileOptions, Compiled, no_cyclic_gc, recompile
from .structure.relaxed import CoverShape

ALPHA_STEPS = (2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000)


@dataclass
class Fitted:
    """A build that fits and the compile it came from (the one asked for, or a coarser one)."""
    compiled: Compiled
    artefacts: Artefacts


def describe(c: Compiled) -> str:
    parts = []
    if c.options.alpha > 1:
        parts.append(f"numeric constants discretised to multiples of {c.options.alpha} (--alpha {c.options.alpha})")
    if c.pipeline.cover is not None:
        parts.append(f"a cover: {c.pipeline.cover.describe()}")
    return "; ".join(parts) or "exact"


def _next_options(c: Compiled) -> Iterator[CompileOptions]:
    """The policies after the compile `c`, in the order they are tried."""
    opts = c.options
    if c.pipeline.cover is None:
        if any(t.kind == "range" for t in c.pipeline.tables):      # else no constant to discretise:
            yield from (dataclasses.replace(opts, alpha=a) for a in ALPHA_STEPS if a > opts.alpha)  # same tables
        if opts.strategy != "switch":
            return
        yield dataclasses.replace(opts, strategy="cover")
    shape = CoverShape(opts.cover_width, opts.cover_fanout).narrower()
    filters = opts.port_filters
    while shape is not None:
        filters //= 2               # the egress port filters' entries too may be what is over
        yield dataclasses.replace(opts, strategy="cover", cover_width=shape.width, cover_fanout=shape.fanout,
                                  port_filters=filters)
        shape = shape.narrower()


def build_fitted(c: Compiled, backend: Backend, options: TargetOptions, fit: bool = True) -> Fitted:
    """Build `c` for `backend`; when it is over the target's budget and `fit` holds, recompile
    with each coarser alpha until one fits. Raises OverBudget (from the last try) when none does,
    or the back end's BackendError for anything else."""
    with no_cyclic_gc():        # a back end's build allocates entries by the hundred thousand: the
        return _build_fitted(c, backend, options, fit)     # collector rescanned them all (half its time)


def _build_fitted(c: Compiled, backend: Backend, options: TargetOptions, fit: bool) -> Fitted:
    try:
        return Fitted(c, backend.build(c, options))
    except OverBudget as exc:
        if not fit:
            raise
        last = exc
    for opts in _next_options(c):
        step = (f"--alpha {opts.alpha}" if opts.strategy != "cover" else
                f"a cover of at most {opts.cover_width} states per field")
        options.notice(f"over the {backend.name} budget ({last.headline()}); trying {step}")
        trial = recompile(c, opts)
        try:
            art = backend.build(trial, options)
        except OverBudget as exc:
            last = exc
            continue
        art.summary += f"\n  fitted: {describe(trial)} (over-delivers; hosts behind the switch filter exactly)"
        return Fitted(trial, art)
    raise last
