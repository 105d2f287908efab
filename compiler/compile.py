"""The compiler's driver: spec + rules -> lowered formulas -> DNF -> diagram -> Pipeline IR.

One direction only; each stage is its own module. `compile_rules` returns every intermediate
product (the CLI's explain and the tests use them) and the time each stage took.
"""
from __future__ import annotations

import dataclasses
import gc
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .logic.approx import discretise
from .structure.bitvector import build_bitvector
from .structure.diagram import DiagramBuilder, DiagramTooLarge
from .logic.dnf import DnfTooLarge, Term, to_dnf
from .logic.intervals import IntervalSet
from .language.errors import CompileError, CompileErrors, Position, read_source
from .logic.lowering import Atom, Lowered, lower_rules
from .ir.pipeline import Pipeline
from .language.rules_ast import Rule
from .language.rules_parser import SourceText, each_rule, parse_rules, rule_source
from .structure.slicing import default_action, slice_pipeline
from .language.spec import Spec
from .structure.port_filters import PortFigures, build_port_filters
from .structure.relaxed import CoverShape, build_relaxed
from .structure.strategy import CAP, bdd_estimate, choose
from .compiled import CompileOptions as CompileOptions, Compiled as Compiled  # the driver's own API too


# strategy "switch": the exact diagram is tried first, given up past twice the switch's entries in
# nodes or this many term visits (~1.4 us each: ~14 s at most; ITCH's 100K filters take 126K, 300
# filters over 5 fields with a few thousand entries 1.1M); a fifth of it when the estimate
# is over the budget, none when it is over LOOSE_ESTIMATE times that; past them, the
# bounded-width cover (structure/relaxed.py).
SWITCH_TRIAL_WORK = 10_000_000
LOOSE_ESTIMATE = 1000
# The cover's cost grows with its width times the terms live at a node: past COVER_WORK / terms
# states per field it is narrower (10K sensor filters: 256 states per field in 14 s, 1,024 in 69 s,
# both 1.26x the exact deliveries), never below COVER_MIN_WIDTH.
COVER_WORK = 2_500_000
COVER_MIN_WIDTH = 64


def variable_order(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]], how: str) -> list[int]:
    headers = [v.index for v in lowered.variables if v.state is None]
    states = [v.index for v in lowered.variables if v.state is not None]
    if how == "heuristic":
        # Fields constrained by the most conjunctions first: they split the rule set early,
        # so fewer terms stay alive below; ties go to fields with fewer distinct boundaries.
        uses: dict[int, int] = {v: 0 for v in headers}
        bounds: dict[int, set[int]] = {v: set() for v in headers}
        for cons, _ in terms:
            for var, iset in cons.items():
                if var in uses:
                    uses[var] += 1
                    bounds[var].update(lo for lo, _ in iset)
        headers.sort(key=lambda v: (-uses[v], len(bounds[v]), v))
    elif how != "spec":
        raise ValueError(f"unknown field order {how!r} (spec or heuristic)")
    return headers + states


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Compiling (and planning table deltas) allocates millions of small objects and frees few;
    the cyclic collector would rescan them all again and again (half the run time at 100K rules).
    Reference counting still frees everything; the collector is back on afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compile_rules(spec: Spec, text: str, source: str = "<rules>",
                  options: CompileOptions | None = None,
                  builder: DiagramBuilder | None = None,
                  progress: Callable[[str], None] | None = None, keep_rules: bool = True) -> Compiled:
    """Compile rule text against a spec. Raises CompileErrors (the rules are rejected whole).
    `progress`: told each stage as it ends (the CLI passes one for large files). `keep_rules`
    False, for a caller that wants tables and figures only: each rule's syntax tree is let go as
    soon as it is lowered, its lowered formula once its conjunctions are made (about 1.6 KB a
    rule: a million rules held 1.6 GB there). The result's `rules` and `lowered.rules` are then
    empty: it cannot be explained or checked rule by rule (a recompile parses its text again)."""
    with no_cyclic_gc():
        return _compile(spec, text, source, options or CompileOptions(), builder, progress, keep_rules)


def compile_parsed(spec: Spec, rules: list[Rule], src: SourceText, options: CompileOptions | None = None,
                   progress: Callable[[str], None] | None = None) -> Compiled:
    """compile_rules of rules already parsed (parse_rules: `rules` and their `src`), for a caller
    that parsed them for a reason of its own (100K rules take most of a second to parse)."""
    with no_cyclic_gc():
        return _compile_parsed(spec, rules, src, options or CompileOptions(), None, progress, {})   # (parsed elsewhere)


def _compile(spec: Spec, text: str, source: str, opts: CompileOptions,
             builder: DiagramBuilder | None, progress: Callable[[str], None] | None = None,
             keep_rules: bool = True) -> Compiled:
    t0 = time.perf_counter()
    if not keep_rules:          # each rule lowered as soon as it is parsed, its tree let go
        src = rule_source(text, source)
        exact = lower_rules(spec, each_rule(src), src)
        t1 = time.perf_counter()
        if progress:
            progress(f"{source}: {exact.user_rule_count:,} rules parsed and checked in {t1 - t0:.1f} s; "
                     "building the tables")
        out = _from_lowered(spec, [], src, exact, opts, builder, {"parse_lower": t1 - t0}, keep_rules=False)
        if progress:
            progress(f"{source}: tables built in {time.perf_counter() - t1:.1f} s")
        return out
    rules, src = parse_rules(text, source)
    t1 = time.perf_counter()
    if progress:
        progress(f"{source}: {len(rules):,} rules parsed in {t1 - t0:.1f} s; checking them against the spec")
    return _compile_parsed(spec, rules, src, opts, builder, progress, {"parse": t1 - t0})


def _compile_parsed(spec: Spec, rules: list[Rule], src: SourceText, opts: CompileOptions,
                    builder: DiagramBuilder | None, progress: Callable[[str], None] | None,
                    timings: dict[str, float]) -> Compiled:
    source = src.name
    t1 = time.perf_counter()
    exact = lower_rules(spec, rules, src)
    t2 = time.perf_counter()
    if progress:
        progress(f"{source}: checked in {t2 - t1:.1f} s; building the tables")
    out = _from_lowered(spec, rules, src, exact, opts, builder, {**timings, "lower": t2 - t1})
    if progress:
        progress(f"{source}: tables built in {time.perf_counter() - t2:.1f} s")
    return out


def recompile(c: Compiled, opts: CompileOptions) -> Compiled:
    """The rules of `c` compiled again with other options, from their lowering on (parsing and
    lowering do not depend on the options): what the fitting driver tries, step after step."""
    if c.exact_lowered is None:
        return compile_rules(c.spec, c.source.text, c.source.name, opts)
    with no_cyclic_gc():
        return _from_lowered(c.spec, c.rules, c.source, c.exact_lowered, opts, None, {})


def check_rules(spec: Spec, text: str, source: str = "<rules>", options: CompileOptions | None = None) -> None:
    """Every error compile_rules would raise for this text (CompileErrors, with positions),
    without building tables: parsed, checked against the spec, in disjunctive form. What the
    controller runs on each filter a subscriber sends (building the whole pipeline to throw it
    away was a quarter of its event loop under churn)."""
    opts = options or CompileOptions()
    with no_cyclic_gc():
        rules, src = parse_rules(text, source)
        _terms(src, discretise(lower_rules(spec, rules, src), opts.alpha, opts.exact_rules), opts)


def _terms(src: SourceText, lowered: Lowered, opts: CompileOptions) -> list[tuple[Term, frozenset[Atom]]]:
    """The rules' conjunctions with their actions (counted rules tagged); CompileErrors for a
    rule whose disjunctive form is too large."""
    widths = [v.width for v in lowered.variables]
    terms: list[tuple[Term, frozenset[Atom]]] = []
    errors: list[CompileError] = []
    for r in lowered.rules:
        atoms = r.atoms
        if 0 <= r.index < opts.count_rules:
            atoms = atoms | {("rule", r.index)}
        try:
            terms.extend((t, atoms) for t in to_dnf(r.formula, widths, opts.dnf_limit))
        except DnfTooLarge as exc:
            errors.append(src.error(f"rule expands to more than {opts.dnf_limit} conjunctions "
                                    f"({exc.args[0]} so far) in disjunctive form", r.offset,
                                    "a simpler filter, or split it into several rules"))
    if errors:
        raise CompileErrors(errors)
    return terms


def _from_lowered(spec: Spec, rules: list[Rule], src: SourceText, exact: Lowered, opts: CompileOptions,
                  builder: DiagramBuilder | None, timings: dict[str, float], keep_rules: bool = True) -> Compiled:
    t1 = time.perf_counter()
    lowered = discretise(exact, opts.alpha, opts.exact_rules)
    t2 = time.perf_counter()
    terms = _terms(src, lowered, opts)
    if not keep_rules:          # the conjunctions are all that follows reads (compile_rules' keep_rules)
        exact.rules.clear()
        lowered.rules.clear()
    c = assemble(spec, rules, src, lowered, terms, opts, builder,
                 timings={**timings, "discretise": t2 - t1, "dnf": time.perf_counter() - t2})
    c.exact_lowered = exact if keep_rules else None
    return c


def merge_equal_terms(terms: list[tuple[Term, frozenset[Atom]]]) -> list[tuple[Term, frozenset[Atom]]]:
    """Terms with the same constraints as one term with the union of their actions (what the
    diagram's leaf holds anyway): many subscribers with one filter (the same topic, the same
    symbol) then cost the diagram one path each, not one per subscriber. First occurrence
    order is kept."""
    merged: dict[tuple[tuple[int, IntervalSet], ...], tuple[Term, frozenset[Atom]]] = {}
    for cons, atoms in terms:
        key = tuple(sorted(cons.items()))
        hit = merged.get(key)
        merged[key] = (cons, atoms) if hit is None else (hit[0], hit[1] | atoms)
    return list(merged.values()) if len(merged) < len(terms) else terms


def assemble(spec: Spec, rules: list[Rule], src: SourceText, lowered: Lowered,
             terms: list[tuple[Term, frozenset[Atom]]], opts: CompileOptions, builder: DiagramBuilder | None,
             keys: list[int] | None = None, timings: dict[str, float] | None = None) -> Compiled:
    """From the rules' DNF terms on: field order, strategy, the diagram (or the bit vectors) and
    the tables. `keys`: a content key per term, for a builder reused across compiles
    (incremental.py: its memo then survives from one compile to the next)."""
    timings = dict(timings or {})
    source = src.name
    widths = [v.width for v in lowered.variables]
    t3 = time.perf_counter()
    order = variable_order(lowered, terms, opts.order)
    builder = builder or DiagramBuilder(widths, opts.max_nodes)
    if opts.strategy in ("switch", "cover") and not lowered.state_vars and not _exact_only(terms):
        return _switch(spec, rules, src, lowered, terms, order, opts, timings, t3, builder if keys else None, keys)
    merged = terms if keys is not None else merge_equal_terms(terms)
    strategy, _ = choose(lowered, merged, order, "bdd" if opts.strategy in ("switch", "cover") else opts.strategy)
    if strategy == "bitvector":
        if lowered.state_vars:
            raise CompileErrors([CompileError(
                "the bit-vector strategy has no state functions (count/sum/avg)", Position(source, 1, 1),
                "--strategy bdd (or auto) for rules with windows")])
        t4 = time.perf_counter()
        stage, leaves = build_bitvector(lowered, terms, opts.bv_layout)
        pipeline = Pipeline(spec.name, 0, [], leaves, {}, rule_count=lowered.user_rule_count, bitvector=stage,
                            default_action=default_action(spec.default_atoms))
        t5 = time.perf_counter()
        pipeline.validate()
        return Compiled(spec, rules, src, lowered, builder, 0, order, pipeline, {
            **timings, "choose": t4 - t3, "bitvector": t5 - t4, "validate": time.perf_counter() - t5}, opts)
    try:           # merged terms: the bit-vector stage keeps them apart (its prefix planes are per term)
        root = builder.build(merged, order, keys)
    except DiagramTooLarge as exc:
        raise CompileErrors([CompileError(
            f"the decision diagram grew past {opts.max_nodes} nodes ({exc.args[0]})",
            Position(source, 1, 1), "--order heuristic, --alpha N, or a smaller rule set")]) from None
    return _sliced(spec, rules, src, lowered, builder, root, order, opts, timings, t3)


def _exact_only(terms: list[tuple[Term, frozenset[Atom]]]) -> bool:
    """Rules a cover must not widen: custom actions (a call would run on messages it is not for)
    and per-rule counters. Those rule sets get the exact diagram."""
    return any(a[0] in ("call", "rule") for _, atoms in terms for a in atoms)


def _switch(spec: Spec, rules: list[Rule], src: SourceText, lowered: Lowered,
            terms: list[tuple[Term, frozenset[Atom]]], order: list[int], opts: CompileOptions,
            timings: dict[str, float], t3: float, reused: DiagramBuilder | None = None,
            keys: list[int] | None = None) -> Compiled:
    """What a switch runs: the exact diagram when it builds within bounds (whether it fits the
    switch's budget is the back end's verdict, and the fitting driver's next step), else (or with
    strategy "cover") the bounded-width cover. Never unbounded. `reused` and `keys`: an
    incremental compile's builder and term keys (the exact diagram then keeps its node ids from
    one compile to the next, which a switch's pushes build on: p4/live_delta.py)."""
    merged = merge_equal_terms(terms) if keys is None else terms
    headers = [v for v in order if lowered.variables[v].state is None]
    widths = [v.width for v in lowered.variables]
    estimate = bdd_estimate(merged, headers, LOOSE_ESTIMATE * opts.switch_entries) if opts.strategy == "switch" else CAP
    if estimate <= LOOSE_ESTIMATE * opts.switch_entries:
        # the estimate is loose both ways (13.2M paths for 300 filters whose diagram has 7,793
        # entries): within LOOSE_ESTIMATE times the budget the exact build is still tried, with less effort
        trial = reused or DiagramBuilder(widths, opts.max_nodes)
        trial.max_nodes = len(trial.nodes) + 2 * opts.switch_entries + 2
        trial.work, trial.max_work = 0, SWITCH_TRIAL_WORK if estimate <= opts.switch_entries else SWITCH_TRIAL_WORK // 5
        try:
            root = trial.build(merged, order, keys)
        except DiagramTooLarge:
            root = -1
        finally:
            trial.max_nodes, trial.max_work = opts.max_nodes, None     # it serves incremental updates later
        if root >= 0:
            return _sliced(spec, rules, src, lowered, trial, root, order, opts, timings, t3)
    if keys is not None:
        merged = merge_equal_terms(terms)
    builder = DiagramBuilder(widths, opts.max_nodes)
    width = min(opts.cover_width, max(COVER_MIN_WIDTH, COVER_WORK // max(1, len(merged))))
    root, stats = build_relaxed(builder, merged, order, CoverShape(width, opts.cover_fanout))
    out = _sliced(spec, rules, src, lowered, builder, root, order, opts, timings, t3)
    filters, figures = (build_port_filters(lowered, merged, order, builder, root, opts.port_filters)
                        if opts.port_filters > 0 else (None, PortFigures()))
    out.pipeline.port_filters = filters
    out.pipeline.cover = dataclasses.replace(stats.info(), port_median=figures.median, port_p90=figures.p90,
                                             port_worst=figures.worst, filtered_ports=figures.filtered)
    out.pipeline.validate()
    return out


def _sliced(spec: Spec, rules: list[Rule], src: SourceText, lowered: Lowered, builder: DiagramBuilder, root: int,
            order: list[int], opts: CompileOptions, timings: dict[str, float], t3: float) -> Compiled:
    """The diagram at `root` as tables."""
    t4 = time.perf_counter()
    pipeline = slice_pipeline(lowered, builder, root, order, opts.compress_max)
    t5 = time.perf_counter()
    pipeline.validate()
    return Compiled(spec, rules, src, lowered, builder, root, order, pipeline, {
        **timings, "diagram": t4 - t3, "slice": t5 - t4, "validate": time.perf_counter() - t5}, opts)


PROGRESS_BYTES = 4 << 20     # rule files past this (~100K rules) say what stage they are in


def compile_files(spec_path: str | Path, rules_path: str | Path,
                  options: CompileOptions | None = None,
                  progress: Callable[[str], None] | None = None) -> Compiled:
    """`compile_rules` on files; `progress` is told the stages of rule files over PROGRESS_BYTES."""
    from .language.spec_parser import load_spec
    spec = load_spec(spec_path)
    p = Path(rules_path)
    big = progress is not None and p.stat().st_size > PROGRESS_BYTES
    if big and progress is not None:
        progress(f"{p}: {p.stat().st_size / 1e6:.0f} MB of rules; parsing")
    return compile_rules(spec, read_source(p, "rules"), str(p), options, progress=progress if big else None)
