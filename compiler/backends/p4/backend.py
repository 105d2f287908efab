"""The P4 back end: the P4_16 program (v1model or TNA) from the spec, and the entries,
multicast groups and P4Info that realise the tables, checked against a switch budget. Over the
budget it raises OverBudget and writes nothing; compiler/fitting.py decides what to give up."""
from __future__ import annotations

import json
import re

from ...compiled import Compiled
from ...semantics.explain import Engine
from ...semantics.interpreter import Step
from ...ir.pipeline import ActionSet, Pipeline
from ...language.rules_parser import SourceText
from ...structure.port_filters import EGRESS_PORT_BITS
from ..base import Artefacts, Backend, BackendError, OverBudget, TargetOptions
from .budget import Budget, over_budget, render_resources, schema_stages, sized_schema, switch_resources
from .entries import check_entries, check_program_fit, p4_tables, state_id_bits
from .formats import bfrt_python, simple_switch_cli
from .interp import EntryInterpreter
from .program import check_whole_program, program_text
from .control import control_text
from .runtime import Names, p4info_message, text, updates, write_request
from .schema import PF_PORT, P4Options, P4Schema, p4_schema
from .tofino import TOFINO2


def check_ports(p: Pipeline, source: SourceText | None = None) -> None:
    """Raise BackendError naming the first rule that forwards to a port no switch has.

    A copy's egress port is bit<9> on both archs (v1model's egress_spec, TNA's PortId_t: Tofino's
    device ports are pipe << 7 | port, 0-511), and the replication engine's port lists are keyed
    the same way: a rule naming port 512 or more names no port of a switch. Subscribers beyond
    the switch's own ports sit behind the hosts or switches it feeds (the controller places them)."""
    top = 1 << EGRESS_PORT_BITS
    actions = [*p.leaves.values(), *([p.default_action] if p.default_action else [])]
    named = {q for a in actions for q in a.ports} | {q for ps in p.groups.values() for q in ps}
    beyond = sorted(q for q in named if type(q) is int and not 0 <= q < top)
    if not beyond:
        return
    port, where = beyond[0], ""
    found = source and re.search(rf"\bfwd\s*\([^)]*?(?<![\w.]){port}(?![\w.])", source.text)
    if source and found:
        where = f"{source.position(found.start())}: "
    more = f" and {len(beyond) - 1} more up to {beyond[-1]}" if len(beyond) > 1 else ""
    raise BackendError(f"{where}port {port}{more}: a switch's egress port is {EGRESS_PORT_BITS} bits "
                       f"(ports 0-{top - 1}); subscribers beyond its own ports are reached through the "
                       f"hosts or switches behind it")


class P4Engine:
    """The switch: the P4 back end's entries executed with P4 match semantics."""

    def __init__(self, c: Compiled) -> None:
        self.c = c
        check_program_fit(c.pipeline, c.spec)          # a bit-vector pipeline has no switch entries
        self.sw = EntryInterpreter(p4_tables(c.pipeline, c.spec))

    def run(self, values: dict[str, int], now_us: int) -> tuple[ActionSet, list[Step] | None]:
        v = self.sw.run(values, now_us)
        calls = tuple((x.split("(")[0], tuple(a for a in x[x.index("(") + 1:-1].split(",") if a))
                      for x in v.calls)
        group = next((g for g, ps in self.c.pipeline.groups.items() if tuple(ps) == v.ports), None)
        path = [Step(table, before, 0, after, what) for table, before, after, what in v.trace
                if what != "miss" or before != after]
        return ActionSet(v.ports, group, v.drop, calls), path


def check_stages(schema: P4Schema, budget: Budget, query_fields: int) -> None:
    """A Tofino program whose dependent tables need more stages than the pipe has is refused
    with what to change (no fitting of entries changes the program's stages); bmv2 (v1model)
    runs any number, so there the count is only reported."""
    at = schema_stages(schema)
    need = 1 + max(at.values(), default=0)
    if schema.arch == "tna" and need > budget.stages:
        raise BackendError(f"the switch program needs {need} dependent stages (t_root, one per query field, the "
                           f"leaf), the pipe has {budget.stages}: each field's tables match the state the field "
                           f"before wrote. Declare at most {budget.stages - 2} query fields in the spec "
                           f"({query_fields} now), or give a budget file with `device: tofino2` "
                           f"({TOFINO2.stages} stages)")


class P4Backend(Backend):
    name = "p4"
    help = ("switch program (camus.p4), entries for simple_switch_CLI, P4Runtime (WriteRequest) and bfrt, "
            "P4Info and multicast groups")
    explain_as = "p4"

    def build(self, c: Compiled, options: TargetOptions) -> Artefacts:
        try:
            budget = Budget.load(options.budget_file) if options.budget_file else Budget()
        except (ValueError, TypeError, OSError) as exc:
            raise BackendError(str(exc)) from None
        p4opts = P4Options(arch=options.arch, state_bits=options.state_bits)
        # Camus's mode: a spec without the header stack a whole program parses (pragma-only
        # fields) gets the control block alone, for the user's own program; others get both.
        whole: str | None = None
        compat = c.spec.camus_control_file          # the spec is a program that includes Camus's control
        if compat:
            whole = (f"the spec is your program: it includes {compat!r} (written here, as the Camus compiler "
                     f"names it) and applies Camus.apply(hdr, standard_metadata)")
        else:
            try:
                check_whole_program(c.spec, options.arch)
            except BackendError as exc:
                whole = str(exc)
        check_program_fit(c.pipeline, c.spec, options.arch)
        check_ports(c.pipeline, c.source)
        schema = p4_schema(c.spec, p4opts)
        check_stages(schema, budget, len(c.spec.query_fields))
        # the replication engine first, from the IR alone: before group ids overflow 16 bits, and
        # before the entries are built for nothing (the fitting driver tries again)
        over = over_budget({"multicast_groups": len(c.pipeline.groups), "multicast_nodes": len(c.pipeline.groups),
                            "group_members": sum(map(len, c.pipeline.groups.values()))}, budget)
        if over:
            raise OverBudget(over)
        if whole is not None and c.pipeline.port_filters is not None:
            raise BackendError(f"the cover's egress port filters need the whole program, and there is none "
                               f"({whole}): compile with --port-filters 0")
        tables = p4_tables(c.pipeline, c.spec)
        tables.widths.update(schema.key_widths())          # the program's widths (meta.state: --state-bits)
        ids = state_id_bits(tables)
        if ids > schema.state_bits:          # fewer states (coarser constants, a cover) may fit
            raise OverBudget([f"state ids: {ids} bits needed, the program's meta.state has {schema.state_bits} "
                              f"(--state-bits)"])
        check_entries(tables, schema)
        # the program declares each table's size from its entries (a Tofino compiler reserves what
        # `size` says), and the whole program's route table is costed with them
        p4opts, schema = sized_schema(c.spec, p4opts, tables, whole_program=whole is None)
        report = switch_resources(tables, schema)
        over = over_budget(report, budget)
        if over:
            raise OverBudget(over)
        control = control_text(c.spec, p4opts)
        program = program_text(c.spec, p4opts) if whole is None else None
        info = p4info_message(c.spec, p4opts, whole_program=program is not None)
        files = {
            "camus_control.p4": control,
            "entries.cli": simple_switch_cli(tables),
            # P4Runtime, as p4runtime-shell and a switch's P4Runtime server read them
            "p4info.txtpb": text(info),
            "entries.txtpb": text(write_request(updates(Names(info), tables))),
            "entries.bfrt.py": bfrt_python(tables, f"camus_{c.spec.name}"),
            "calls.json": json.dumps({str(k): list(v) for k, v in sorted(tables.calls.items())}, indent=1) + "\n",
            "switch_resources.json": json.dumps(report, indent=1) + "\n",
        }
        if program is not None:
            files["camus.p4"] = program
        if compat:
            files[compat] = control_text(c.spec, p4opts, camus_compat=True)
        summary = render_resources(report, budget, tables.order + ([PF_PORT] + tables.egress if tables.egress else []))
        if compat:
            summary += f"\n  {compat}: control Camus(hdr, standard_metadata) for your program; {whole}"
        elif program is None:
            summary += (f"\n  control block only (camus_control.p4, to include in your program): no whole "
                        f"program because {whole}")
        return Artefacts(c, files, program if program is not None else control, summary)

    def engine(self, c: Compiled) -> Engine:
        return P4Engine(c)
