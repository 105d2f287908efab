"""Switch resources of a set of entries, against a budget (default: one Tofino-1 pipe).

Every capacity and cost comes from compiler/backends/p4/tofino.py, where each figure stands next
to its public source; this module adds them up per table, in the program's own terms:
  * exact tables (and t_<f>_exact, t_<f>_any, t_leaf) in SRAM, entries packed into 128-bit words;
  * range, LPM and ternary tables in TCAM: rows (a range expands to several, Tofino's range
    encoding), blocks side by side for a wide key, and their action data in SRAM;
  * multicast groups and the replication engine's nodes (a node carries a port bitmap);
  * stages: the chain of dependent tables the program applies (from the schema).
Figures are estimates (no compiler placement here): they say early, before anything is written,
that a rule set will not fit. The Camus paper's Table I gives shares of "the switch" without
its capacities: bench/p4_resources.py --table1 sets ours beside them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ...language.spec import Spec
from .entries import P4Tables
from .schema import (ANSWER_DNS, BASE_ACTIONS, ILA_REWRITE, PF_PORT, PF_SET, PF_STATE, SVAR_KEY, P4Options, P4Schema,
                     TableDecl, p4_schema, with_route_table)
from .tofino import (DEVICES, MULTICAST_GROUP_IDS, SRAM_DEPTH, TCAM_DEPTH, TOFINO1, StageTable, exact_words, rams,
                     range_rows, replication, tcams,
                     stages, tcam_blocks_wide, ternary_action_words)

_PARAM_BITS = {a.name: sum(b for _, b in a.params) for a in (*BASE_ACTIONS, ANSWER_DNS, ILA_REWRITE)}


def action_bits(action: str) -> int:
    """Action data of one entry: its parameters' bits (window actions: a 32-bit index, every(n)
    with its 64-bit modulus)."""
    if action in _PARAM_BITS:
        return _PARAM_BITS[action]
    return 96 if action.endswith("_every") else 32


@dataclass(frozen=True)
class Budget:
    """What one pipe offers; a YAML budget file may set any field, or `device: tofino2`."""
    sram_words: int = TOFINO1.sram_words
    tcam_block_rows: int = TOFINO1.tcam_block_rows
    multicast_groups: int = MULTICAST_GROUP_IDS
    multicast_nodes: int = 0          # 0: no limit (the node memory's size is not public)
    group_members: int = 0            # per-port copies; 0: no limit (a node's ports are a bitmap)
    stages: int = TOFINO1.stages

    @classmethod
    def load(cls, path: str | Path) -> "Budget":
        """A YAML (or JSON) mapping with any of the field names (or `device: tofino|tofino2`,
        whose capacities the other keys then adjust); the rest keep their defaults."""
        import yaml
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a budget is a mapping of names to numbers")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"device"})
        if unknown:
            raise ValueError(f"{path}: unknown budget keys {unknown}; known: {sorted(known | {'device'})}")
        base: dict[str, int] = {}
        if "device" in data:
            d = DEVICES.get(str(data.pop("device")))
            if d is None:
                raise ValueError(f"{path}: device must be one of {sorted(DEVICES)}")
            base = {"sram_words": d.sram_words, "tcam_block_rows": d.tcam_block_rows, "stages": d.stages}
        return cls(**{**base, **{k: int(v) for k, v in data.items()}})


def schema_stages(schema: P4Schema) -> dict[str, int]:
    """The stage of each table the program applies (tofino.stages): keys read, meta.state written by
    set_state, the loaded aggregate written by load actions; a fallback runs on its owner's miss."""
    guards = schema.guards()
    at = _chain_stages(schema.tables, schema, guards)
    # egress has its own dependency chain (each stage holds ingress and egress tables side by side)
    at.update(_chain_stages(schema.egress, schema, guards))
    return at


def _chain_stages(tables: tuple[TableDecl, ...], schema: P4Schema, guards: dict[str, str]) -> dict[str, int]:
    chain = []
    for t in tables:
        writes = set()
        if "set_state" in t.actions:
            writes.add("meta.state")
        if PF_SET in t.actions:
            writes.add(PF_STATE)
        if any(a.startswith("load_") for a in t.actions):
            writes.add(SVAR_KEY)
        if t.name in schema.codes:
            writes.add(schema.codes[t.name].key.name)
        chain.append(StageTable(t.name, frozenset(k.name for k in t.keys), frozenset(writes), guards.get(t.name)))
    return stages(chain)


def switch_resources(tables: P4Tables, schema: P4Schema | None = None) -> dict[str, Any]:
    """Per table: kind, entries, SRAM words, TCAM rows and block-rows; totals; the replication
    engine; with the schema, the stages its tables take."""
    per: dict[str, dict[str, Any]] = {}
    exact: dict[str, list[int]] = {}                  # table -> [entries, key bits, action bits]
    tcam_action: dict[str, list[int]] = {}            # table -> [rows, action bits]
    # the program's own parameter widths where the schema is known (set_state's follows --state-bits,
    # a code action its domain's bits)
    declared = param_bits(schema) if schema is not None else {}
    for e in tables.entries:
        key_bits = sum(tables.widths.get(m.field, 32) for m in e.matches)
        row = per.setdefault(e.table, {"kind": "exact", "entries": 0, "sram_words": 0, "tcam_rows": 0,
                                       "tcam_block_rows": 0, "sram_rams": 0, "tcams": 0})
        row["entries"] += 1
        abits = declared.get(e.action) or action_bits(e.action)
        if all(m.kind == "exact" for m in e.matches):
            x = exact.setdefault(e.table, [0, key_bits, 0])
            x[0] += 1
            x[2] = max(x[2], abits)
            continue
        rows, range_bits = 1, 0
        for m in e.matches:
            if m.kind == "range":
                w = tables.widths.get(m.field, 32)
                rows *= range_rows(m.value, m.arg, w)
                range_bits += w
        row["kind"] = next(m.kind for m in e.matches if m.kind != "exact")
        wide = tcam_blocks_wide(key_bits, range_bits)
        row["tcam_rows"] += rows
        row["tcam_block_rows"] += rows * wide
        t = tcam_action.setdefault(e.table, [0, 0, 0])
        t[0] += rows
        t[1] = max(t[1], abits)
        t[2] = max(t[2], wide)
    if schema is not None and schema.sized:
        _reserve(per, schema, declared, {n: x[0] for n, x in exact.items()})
        exact, tcam_action = {}, {}
    # [alloc]: a table holds whole memories, a RAM of SRAM_DEPTH words, a TCAM of TCAM_DEPTH rows
    for name, (n, kbits, abits) in exact.items():
        words = exact_words(n, kbits, abits)
        per[name]["sram_words"] += words
        per[name]["sram_rams"] += rams(words)
    for name, (rows, abits, wide) in tcam_action.items():
        words = ternary_action_words(rows, abits)
        per[name]["sram_words"] += words
        per[name]["sram_rams"] += rams(words)
        per[name]["tcams"] += tcams(rows, wide)
    if schema is not None:
        for decl in schema.tables + schema.egress + schema.fixed:   # the program's declared kinds
            if decl.name in per:
                per[decl.name]["kind"] = "/".join(k.match for k in decl.keys if k.name != "meta.state") or "exact"
    totals = {k: sum(r[k] for r in per.values())
              for k in ("entries", "sram_words", "tcam_rows", "tcam_block_rows", "sram_rams", "tcams")}
    report: dict[str, Any] = {"tables": per, **totals, **replication(tables.groups.values())}
    # what the budget holds against: the memories the tables take, in words and block-rows
    report["sram_alloc_words"] = report["sram_rams"] * SRAM_DEPTH
    report["tcam_alloc_block_rows"] = report["tcams"] * TCAM_DEPTH
    report["group_members"] = report["multicast_copies"]
    if schema is not None:
        at = schema_stages(schema)
        report["stages"] = 1 + max(at.values(), default=0)
        report["table_stages"] = at
    return report


def sized_schema(spec: Spec, opts: P4Options, tables: P4Tables, whole_program: bool = True) -> tuple[P4Options, P4Schema]:
    """The options and schema of the program for these entries, as switch_resources should cost
    it: each table declares the `size` its entries' memories hold ([alloc]: whole RAMs and TCAMs
    are reserved anyway, so that room costs nothing and lets the rule set grow before the program
    must be compiled again), egress port filter tables only when there are filters, and, for a
    whole program, the template's route table."""
    opts = replace(opts, port_filters=bool(tables.egress) and any(e.table == PF_PORT for e in tables.entries))
    schema = p4_schema(spec, opts)
    used = switch_resources(tables, schema)["tables"]
    declared = param_bits(schema)
    sizes = []
    for decl in schema.tables + schema.egress:
        if decl.keys:
            row = used.get(decl.name, {})
            sizes.append((decl.name, _capacity(decl, row.get("entries", 0), row.get("tcam_rows", 0), declared)))
    opts = replace(opts, sizes=tuple(sizes))
    schema = p4_schema(spec, opts)
    return opts, (with_route_table(schema, spec) if whole_program else schema)


def param_bits(schema: P4Schema) -> dict[str, int]:
    """Each action's parameter bits, as the program declares them (set_state's follow
    --state-bits, a code action its domain's bits)."""
    return {a.name: sum(b for _, b in a.params) for a in schema.actions.values()}


def _bits(decl: TableDecl, declared: dict[str, int]) -> tuple[int, int]:
    """A declared table's key bits and its widest action's parameter bits."""
    return sum(k.bits for k in decl.keys), max((declared.get(a, 0) for a in decl.actions), default=0)


def _capacity(decl: TableDecl, entries: int, rows: int, declared: dict[str, int]) -> int:
    """The entries the memories `entries` entries take hold: an exact table's whole RAMs filled
    (the most entries whose words take no more RAMs), a TCAM table's rows up to its whole TCAMs'
    depth (an added entry a row at least)."""
    kbits, abits = _bits(decl, declared)
    n = max(entries, 1)
    if all(k.match == "exact" for k in decl.keys):
        room = rams(exact_words(n, kbits, abits))
        lo, hi = n, room * SRAM_DEPTH * 9 + 1            # at most 9 entries a word ([pack])
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if rams(exact_words(mid, kbits, abits)) <= room:
                lo = mid
            else:
                hi = mid - 1
        return lo
    rows = max(rows, n)
    return n + (-(-rows // TCAM_DEPTH) * TCAM_DEPTH - rows)


def _reserve(per: dict[str, dict[str, Any]], schema: P4Schema, declared: dict[str, int],
             exact_entries: dict[str, int]) -> None:
    """The memories each declared table reserves ([alloc]) for its declared size (a Tofino
    compiler reserves what `size` says, entries or not; schema.sized: the sizes follow the
    entries), or for what its entries take where that is more; and the template's own tables
    (the route table) at theirs. Keyless tables (t_root) take no match memory."""
    for decl in schema.tables + schema.egress + schema.fixed:
        if not decl.keys:
            continue
        row = per.setdefault(decl.name, {"kind": "exact", "entries": 0, "sram_words": 0, "tcam_rows": 0,
                                         "tcam_block_rows": 0, "sram_rams": 0, "tcams": 0})
        row["size"] = decl.size
        kbits, abits = _bits(decl, declared)
        if all(k.match == "exact" for k in decl.keys):
            words = exact_words(max(exact_entries.get(decl.name, 0), decl.size), kbits, abits)
            row["sram_words"], row["sram_rams"] = words, rams(words)
            continue
        rows = max(row["tcam_rows"], decl.size)            # each entry takes a row at least
        wide = tcam_blocks_wide(kbits, sum(k.bits for k in decl.keys if k.match == "range"))
        words = ternary_action_words(rows, abits)
        row["sram_words"], row["sram_rams"], row["tcams"] = words, rams(words), tcams(rows, wide)


ALLOCATED = {"sram_words": "sram_alloc_words", "tcam_block_rows": "tcam_alloc_block_rows"}   # budget -> report


def over_budget(report: dict[str, Any], budget: Budget) -> list[str]:
    """What exceeds the budget, one line each (empty: it fits). Stages are the program's, not
    the entries': the back end checks them itself (schema_stages)."""
    out = []
    for name, limit in asdict(budget).items():
        if name == "stages" or limit <= 0 and name in ("multicast_nodes", "group_members"):
            continue
        used = report.get(ALLOCATED.get(name, name), 0)
        if used > limit:
            out.append(f"{name.replace('_', ' ')}: {used:,} needed, budget {limit:,}")
    return out


def render_resources(report: dict[str, Any], budget: Budget, order: list[str]) -> str:
    lines = ["  switch tables:                      kind     entries  SRAM words  TCAM rows  (x44-bit blocks)"]
    for name in order:
        r = report["tables"].get(name)
        if r:
            lines.append(f"    {name:<34} {r['kind']:<7} {r['entries']:>8} {r['sram_words']:>11} {r['tcam_rows']:>10} "
                         f"{r['tcam_block_rows']:>10}")
    b = asdict(budget)
    lines.append(f"    {'total':<34} {'':<7} {report['entries']:>8} {report['sram_words']:>11} {report['tcam_rows']:>10} "
                 f"{report['tcam_block_rows']:>10}")
    lines.append(f"    budget: SRAM {report['sram_alloc_words'] / b['sram_words']:.1%} ({report['sram_rams']:,} RAMs), "
                 f"TCAM {report['tcam_alloc_block_rows'] / b['tcam_block_rows']:.1%} ({report['tcams']:,} TCAMs), "
                 f"multicast groups {report['multicast_groups']:,}/{b['multicast_groups']:,} "
                 f"({report['multicast_nodes']:,} nodes, {report['multicast_copies']:,} port copies)")
    if "stages" in report:
        lines.append(f"    stages: {report['stages']} dependent of the pipe's {b['stages']}")
    return "\n".join(lines)
