"""The compiler's commands: compile, check, explain (and apps, demo)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from camus.compiler.backends.base import BackendError, OverBudget, TargetOptions
from camus.compiler.fitting import build_fitted, describe
from camus.compiler.backends.registry import BACKENDS, backend, explain_layers
from camus.compiler.compile import Compiled, CompileOptions, compile_files
from camus.compiler.language.errors import CompileError, CompileErrors
from camus.compiler.semantics.explain import Explained, explain_packets, explain_values
from camus.compiler.codec.packets import message_from_text
from camus.compiler.codec.pcap import PcapError, read_pcap
from camus.compiler.codec.render import format_message, format_value
from camus.compiler.ir.resources import render_report, resource_report
from camus.dataplane.program import DataplaneError

TARGET_HELP = "What to produce: " + "; ".join(f"{n}: {b.help}" for n, b in BACKENDS.items()) + "."


def _options(f):
    f = click.option("--order", type=click.Choice(["spec", "heuristic"]), default="spec",
                     show_default=True, help="Field order: the spec's, or fewest constants first.")(f)
    f = click.option("--alpha", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Round numeric constants to multiples of ALPHA (over-delivers, never under-delivers).")(f)
    f = click.option("--compress", "compress_max", type=click.IntRange(min=0), default=0,
                     show_default=True,
                     help="Compress fields with at most N distinct values to small codes (0: off).")(f)
    f = click.option("--strategy", type=click.Choice(["auto", "bdd", "bitvector", "switch"]), default="auto",
                     show_default=True,
                     help="Table strategy: the decision diagram (compact when an equality field splits "
                          "the rules; what switches run), bit vectors (linear in the filters, for many "
                          "attributes; XDP and the reference interpreter), switch (the exact diagram when it "
                          "builds within bounds, else a cover of bounded size), or auto: a cost estimate picks (the p4 target "
                          "gets the diagram).")(f)
    return f


def _say(message: str) -> None:
    click.echo(message, err=True)


def _compile(spec: str, rules: str, order: str, alpha: int, compress_max: int, strategy: str = "auto",
             port_filters: int = CompileOptions.port_filters) -> Compiled:
    try:
        return compile_files(spec, rules, CompileOptions(order=order, alpha=alpha, compress_max=compress_max,
                                                         strategy=strategy, port_filters=port_filters), progress=_say)
    except (CompileErrors, CompileError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)



@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.argument("rules", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", type=click.Choice(sorted(BACKENDS)), default="ir", show_default=True,
              help=TARGET_HELP)
@click.option("--emit", is_flag=True,
              help="Print the generated artefact to stdout: the IR as JSON, the XDP C program (ebpf), "
                   "the P4 program (p4) or the flat tables (userspace).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write pipeline.json, summary.txt and the target's files into this directory.")
@click.option("--arch", type=click.Choice(["v1model", "tna"]), default=None,
              help="P4 target architecture: bmv2 simple_switch (v1model) or Tofino (tna). Default: the one "
                   "whose intrinsic metadata the spec reads (ig_intr_md: tna), else v1model.")
@click.option("--budget", "budget_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="P4: switch resource budget (YAML: sram_words, tcam_block_rows, multicast_groups, "
                   "group_members); default: one Tofino-1 pipe.")
@click.option("--state-bits", type=click.IntRange(8, 32), default=32, show_default=True,
              help="P4: width of the state ids (meta.state) in the program; 16 packs three (state, code) or "
                   "two (state, 32-bit value) exact entries to a 128-bit RAM word instead of one. The rule "
                   "set's ids must fit (16 bits: 65,535 states), or it is fitted like any budget.")
@click.option("--exact", is_flag=True,
              help="P4: refuse rather than approximate when the entries exceed the budget (by default the "
                   "compile fits them: coarser numeric constants, alpha 2, 5, 10, 20, ..., until they fit; "
                   "over-delivers, never under-delivers, and says what it gave up).")
@click.option("--port-filters", type=click.IntRange(min=0), default=CompileOptions.port_filters, show_default=True,
              help="P4 cover: table entries the egress port filters may take. A port that a cover sends "
                   "more than its rules select gets its own rules run on its copies in egress (most extra "
                   "copies first, while they fit); 0: none.")
@click.option("--fit", is_flag=True, hidden=True, help="Kept for old scripts: the cover is the default now.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object (resources.json's fields, the target, timings).")
@click.option("--fit-alpha", is_flag=True, hidden=True, help="Kept for old scripts: fitting is the default now.")
@_options
def compile(spec: str, rules: str, target: str, emit: bool, out_dir: str | None, arch: str,
            budget_file: str | None, state_bits: int, port_filters: int, exact: bool, fit: bool, as_json: bool,
            fit_alpha: bool, order: str, alpha: int, compress_max: int, strategy: str) -> None:
    """Compile RULES against the message-format SPEC into staged tables.

    Prints a resource summary (entries per table, multicast groups, bits of state). A file
    with any bad rule is rejected whole, with the line and column of every mistake.

    \b
    --target p4 writes, with -o DIR: camus.p4 (the program, from the spec only), entries.cli
    (simple_switch_CLI), p4info.txtpb and entries.txtpb (P4Runtime: the P4Info and one
    WriteRequest as protobuf text, as p4runtime-shell reads them), entries.bfrt.py (Tofino
    bfrt_python), calls.json. Over the switch budget the rules are approximated until they fit
    (coarser constants; said on stderr and in the summary), or with --exact nothing is written.
    Rules whose exact diagram multiplies out (many attributes, wildcards between them) become a
    cover of bounded size: it forwards a superset of what the rules select (its over-delivery on
    sampled messages is in the summary); the XDP hosts behind the switch filter exactly.
    """
    if target == "p4" and strategy == "auto":
        strategy = "bdd" if exact else "switch"         # what a switch pipeline can run, bounded
    c = _compile(spec, rules, order, alpha, compress_max, strategy, port_filters)
    if arch is None:
        from camus.compiler.backends.p4.schema import spec_arch
        written_for = spec_arch(c.spec)
        arch = written_for or "v1model"
        if target == "p4" and written_for == "tna":
            click.echo("note: the spec reads Tofino's ig_intr_md: compiling for tna (--arch v1model to override)",
                       err=True)
    options = TargetOptions(arch=arch, budget_file=budget_file, state_bits=state_bits,
                            notice=lambda m: click.echo(m, err=True))
    try:
        fitted = build_fitted(c, backend(target), options, fit=not exact)
    except BackendError as exc:
        hint = ("\n  --exact refuses approximation: leave it out to fit, or give a larger --budget" if exact
                else "\n  even the coarsest approximation does not fit: give a larger --budget, or split the "
                     "subscriptions across switches")
        click.echo(f"error: {exc}" + (hint if isinstance(exc, OverBudget) else ""), err=True)
        sys.exit(1)
    art, c = fitted.artefacts, fitted.compiled           # fitting may have recompiled
    report = resource_report(c.pipeline)
    summary = render_report(report) + (f"\n{art.summary}" if art.summary else "")
    timing = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in c.timings.items())
    if emit:
        click.echo(art.emit)
    elif as_json:
        click.echo(json.dumps({"schema": 1, "target": target, "arch": arch if target == "p4" else None,
                               **report, "seconds": round(sum(c.timings.values()), 3),
                               "timings_ms": {k: round(v * 1000, 1) for k, v in c.timings.items()}}))
    else:
        click.echo(summary)
        click.echo(f"  compiled in {sum(c.timings.values()):.2f} s ({timing})")
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "pipeline.json").write_text(c.pipeline.dumps() + "\n")
        (out / "summary.txt").write_text(summary + "\n")
        (out / "resources.json").write_text(json.dumps(report, indent=1) + "\n")
        for name, text in art.files.items():
            (out / name).write_text(text)
        click.echo(f"wrote {out / 'pipeline.json'}, {out / 'summary.txt'}, {out / 'resources.json'}"
                   + "".join(f", {out / n}" for n in art.files), err=emit or as_json)


@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.argument("rules", type=click.Path(exists=True, dir_okay=False))
def check(spec: str, rules: str) -> None:
    """Validate SPEC and RULES without writing anything; exit 1 on any mistake. Warns (exit 0)
    about filters that can never match, such as `sensor == 5 and sensor == 6`."""
    from camus.compiler.logic.dnf import to_dnf
    c = _compile(spec, rules, "spec", 1, 0)
    fields = sorted({t.name for t in c.pipeline.tables})
    widths = [v.width for v in c.lowered.variables]
    for r in c.lowered.rules:
        if r.index >= 0 and r.formula[0] != "true" and not to_dnf(r.formula, widths):
            pos = c.source.position(r.offset)
            click.echo(f"warning: {pos}: this filter can never match (its "
                       "conditions contradict each other); its actions never run", err=True)
    if not c.rules:
        click.echo(f"warning: {rules}: no rules; attached, this would drop the whole feed (attach and update "
                   "refuse it without --allow-empty)", err=True)
    click.echo(f"ok: {len(c.rules)} rules over {len(fields)} field(s): {', '.join(fields) or '-'}")


@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.argument("rules", type=click.Path(exists=True, dir_okay=False))
@click.option("--message", "messages", multiple=True,
              help="A message as field=value pairs, e.g. 'stock=GOOGL price=60'. Repeatable.")
@click.option("--packet", "packets", multiple=True, help="A whole Ethernet frame in hex. Repeatable.")
@click.option("--pcap", type=click.Path(exists=True, dir_okay=False), help="A pcap file of frames.")
@click.option("--via", type=click.Choice(sorted(explain_layers())), default="ir", show_default=True,
              help="Which layer answers: filters (the rules evaluated directly), ir (the compiled "
                   "tables), p4 (the switch entries), userspace (the flat tables of a userspace "
                   "broker) or xdp (the program in this kernel, root; with --packet/--pcap it also "
                   "prints the packet each port would get).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@_options
def explain(spec: str, rules: str, messages: tuple[str, ...], packets: tuple[str, ...],
            pcap: str | None, via: str, as_json: bool, order: str, alpha: int, compress_max: int,
            strategy: str) -> None:
    """Show what happens to each message: its actions, ports and path through the tables."""
    if sum(bool(x) for x in (messages, packets, pcap)) != 1:
        raise click.UsageError("give exactly one of --message, --packet or --pcap")
    if via in ("p4", "userspace") and strategy == "auto":
        strategy = "switch" if via == "p4" else "bdd"   # those layers run the diagram's tables
    c = _compile(spec, rules, order, alpha, compress_max, strategy)
    notes, outputs = [], []
    try:
        if via == "p4":         # the entries `compile --target p4` writes: fitted (a cover, coarser constants)
            fitted = build_fitted(c, backend("p4"), TargetOptions(notice=lambda m: click.echo(m, err=True)))
            c = fitted.compiled
            if c.pipeline.cover is not None or c.options.alpha > 1:
                click.echo(f"note: the switch runs {describe(c)}; it over-delivers, never under-delivers", err=True)
        engine = explain_layers()[via](c)
        if messages:
            results = explain_values(c, [message_from_text(c.spec, m) for m in messages], engine)
        else:
            frames = ([(0, bytes.fromhex(p.replace(":", "").replace(" ", ""))) for p in packets]
                      if packets else list(read_pcap(pcap)))  # type: ignore[arg-type]
            results, notes = explain_packets(c, frames, engine)
            if hasattr(engine, "output"):     # the kernel path: what leaves, port by port
                outputs = [engine.output(i, data) for i, (_, data) in enumerate(frames)]
    except (ValueError, PcapError) as exc:
        raise click.BadParameter(str(exc)) from None
    except (DataplaneError, BackendError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for n in notes:
        if as_json:
            click.echo(json.dumps({"packet": n.packet, "error": n.note}))
        else:
            click.echo(f"packet {n.packet}: {n.note}")
    for r in results:
        click.echo(json.dumps(_json(r)) if as_json else _text(c, r))
    for o in outputs:
        click.echo(json.dumps(o.to_json()) if as_json else o.describe())


def _json(r: Explained) -> dict:
    out = {"message": r.message, "actions": r.actions.names(), "ports": list(r.actions.ports)}
    if r.packet is not None:
        out["packet"] = r.packet
    if r.actions.group is not None:
        out["group"] = r.actions.group
    if r.path is not None:
        out["path"] = [{"table": s.table, "state": s.state, "key": s.key, "next": s.next,
                        "match": s.match} for s in r.path]
    if r.note:
        out["note"] = r.note
    return out


def _match_text(c: Compiled, q, match: str) -> str:
    """A table step's match on a string or address field with its values as text, not numbers."""
    found = re.fullmatch(r"(exact) (\d+)|(range) \[(\d+), (\d+)\]", match)
    if not found:
        return match
    if found.group(1):
        return f"exact {format_value(c.spec, q, int(found.group(2)))}"
    lo, hi = (format_value(c.spec, q, int(found.group(i))) for i in (4, 5))
    return f"= {lo}" if lo == hi else f"range [{lo}, {hi}]"


def _text(c: Compiled, r: Explained) -> str:
    head = f"message {r.message}" + (f" (packet {r.packet})" if r.packet is not None else "")
    lines = [f"{head}: {format_message(c.spec, r.values)}"]
    if r.note:
        lines.append(f"  {r.note}")
    for s in r.path or []:
        q = c.spec.query_field(s.table)
        shown = format_value(c.spec, q, r.values[q.path]) if q else ""
        match = _match_text(c, q, s.match) if q is not None and q.vtype != "int" else s.match
        lines.append(f"  {s.table:<28} {shown:<16} state {s.state} -> {s.next}  ({match})")
    acts = ", ".join(r.actions.names()) or "none (dropped: nobody subscribed)"
    lines.append(f"  actions: {acts}" + (f"  [multicast group {r.actions.group}]" if r.actions.group else ""))
    return "\n".join(lines)


@click.command()
def apps() -> None:
    """List the shipped example applications: name, spec and rules (paths to compile them).

    \b
      camus-xdp compile $(camus-xdp apps | awk '$1 == "itch" {print $2, $3}')
    """
    from camus.data import shipped_apps
    found = shipped_apps()
    width = max([len(n) for n in found] + [4])
    click.echo(f"{'APP':<{width}}  SPEC  RULES")
    for name, (spec_path, rules_path) in found.items():
        click.echo(f"{name:<{width}}  {spec_path}  {rules_path}")


@click.command()
@click.option("--messages", "n_messages", type=click.IntRange(1, 100_000), default=40, show_default=True,
              help="How many ITCH messages the demo feed carries.")
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--no-lab", is_flag=True, help="Only the compile-and-explain part, even as root.")
def demo(n_messages: int, seed: int, no_lab: bool) -> None:
    """Run the shipped ITCH example end to end.

    Compiles apps/itch, builds MoldUDP64 packets with 1-12 Add Order messages and checks the
    compiled tables (and, as root, the kernel program) against the rules themselves. As root it
    then builds a namespace lab — publisher, broker interface with camus-xdp attached, three
    subscribers — sends the feed and reports what each subscriber received.
    """
    import os

    from camus.demo import run_demo, run_lab_demo
    code = run_demo(n_messages, seed)
    if code == 0 and not no_lab and os.geteuid() == 0:
        click.echo()
        code = run_lab_demo(max(n_messages, 400), seed)
    sys.exit(code)


COMMANDS = [compile, check, explain, apps, demo]
