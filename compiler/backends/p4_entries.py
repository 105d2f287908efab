"""P4 back end, dynamic part: the Pipeline IR as switch table entries and multicast groups.

Table layout (the P4 program declares the same tables; `meta.state` carries the state id):
  t_<field>          key (meta.state: exact, <field>: exact | range | lpm) -> set_state(next)
  t_<field>_any      key (meta.state: exact) -> set_state(next), applied when t_<field> misses
                     (the per-state default of exact tables: SRAM instead of TCAM)
  t_<field>_code     compressed fields: raw value -> code (exact or range), before t_<field>
  t_leaf             key (meta.state: exact) -> set_mgid(g) | set_port(p) | drop_msg() | <custom>
Range entries carry a priority; P4Runtime says higher wins, simple_switch_CLI says lower wins:
`Entry.priority` follows P4Runtime and `cli_priority` converts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..intervals import to_prefixes
from ..pipeline import FieldTable, Pipeline
from ..spec import MatchKind, Spec

MAX_PRIORITY = 1 << 24


def table_name(t: FieldTable, suffix: str = "") -> str:
    return "t_" + t.name.replace(".", "_").replace("(", "_").replace(")", "").replace("@", "_at_") + suffix


@dataclass(frozen=True)
class Match:
    field: str
    kind: str                 # exact | range | lpm | ternary
    value: int
    arg: int = 0              # range: hi; lpm: prefix length; ternary: mask


@dataclass(frozen=True)
class P4Entry:
    table: str
    matches: tuple[Match, ...]
    action: str
    params: tuple = ()
    priority: int = 0         # P4Runtime convention: higher wins (0: table needs none)

    @property
    def cli_priority(self) -> int:
        """simple_switch_CLI convention: lower wins."""
        return MAX_PRIORITY - self.priority if self.priority else 0


@dataclass
class P4Tables:
    root: int = 0                                               # meta.state when parsing ends
    entries: list[P4Entry] = field(default_factory=list)
    groups: dict[int, tuple] = field(default_factory=dict)      # mgid -> ports
    order: list[str] = field(default_factory=list)              # tables in pipeline order
    widths: dict[str, int] = field(default_factory=dict)        # key field -> bits

    def by_table(self) -> dict[str, list[P4Entry]]:
        out: dict[str, list[P4Entry]] = {t: [] for t in self.order}
        for e in self.entries:
            out.setdefault(e.table, []).append(e)
        return out


def declared_kind(spec: Spec | None, t: FieldTable) -> str:
    """The key kind the (static) P4 program declares for a field: from the spec's pragma, so
    one program serves every rule set. query_field / query_field_range -> range (which also
    holds exact values as [v, v]); exact -> exact; lpm -> lpm. Without a spec: the IR's kind."""
    if spec is None or t.field is None:
        return "range" if t.state_var is not None else t.kind
    q = spec.query_field(t.field)
    if q is None:
        return t.kind
    return {MatchKind.EXACT: "exact", MatchKind.LPM: "lpm"}.get(q.kind, "range")


def p4_tables(p: Pipeline, spec: Spec | None = None) -> P4Tables:
    out = P4Tables(root=p.root, groups=dict(p.groups))
    state_bits = p.state_bits
    for t in p.tables:
        name = table_name(t)
        key = t.name
        if t.compression is not None:
            code_table = table_name(t, "_code")
            out.order.append(code_table)
            out.widths[t.name] = t.field_width
            for m, code in t.compression.codes:
                if m[0] == "exact":
                    out.entries.append(P4Entry(code_table, (Match(t.name, "exact", m[1]),), "set_code", (code,)))
                else:
                    out.entries.append(P4Entry(code_table, (Match(t.name, "range", m[1], m[2]),), "set_code",
                                               (code,), priority=1))
            key = f"{t.name}#code"
        out.order.append(name)
        out.widths[key] = t.key_width
        out.widths["meta.state"] = state_bits
        kind = declared_kind(spec, t) if t.compression is None else t.kind
        if t.kind == "exact":
            out.order.append(table_name(t, "_any"))
        for e in t.entries:
            st = Match("meta.state", "exact", e.state)
            if e.match[0] == "any":
                out.entries.append(P4Entry(table_name(t, "_any"), (st,), "set_state", (e.next,)))
            elif kind == "exact" and e.match[0] == "exact":
                out.entries.append(P4Entry(name, (st, Match(key, "exact", e.match[1])), "set_state", (e.next,)))
            elif kind == "range" and e.match[0] == "exact":      # an exact value in a range key
                out.entries.append(P4Entry(name, (st, Match(key, "range", e.match[1], e.match[1])), "set_state",
                                           (e.next,), priority=1))
            elif e.match[0] == "range":
                out.entries.append(P4Entry(name, (st, Match(key, "range", e.match[1], e.match[2])), "set_state",
                                           (e.next,), priority=1))
            else:
                out.entries.append(P4Entry(name, (st, Match(key, "lpm", e.match[1], e.match[2])), "set_state",
                                           (e.next,)))
    out.order.append("t_leaf")
    for s, a in sorted(p.leaves.items()):
        st = (Match("meta.state", "exact", s),)
        if a.drop and not a.ports:
            out.entries.append(P4Entry("t_leaf", st, "drop_msg"))
        elif a.group is not None:
            out.entries.append(P4Entry("t_leaf", st, "set_mgid", (a.group,)))
        elif a.ports:
            out.entries.append(P4Entry("t_leaf", st, "set_port", (a.ports[0],)))
        if a.calls:      # custom actions: one entry per state, the calls as parameters
            out.entries.append(P4Entry("t_leaf_calls", st, "call",
                                       tuple(f"{name}({','.join(args)})" for name, args in a.calls)))
    if any(e.table == "t_leaf_calls" for e in out.entries):
        out.order.append("t_leaf_calls")
    return out


def tcam_rows(tables: P4Tables) -> dict[str, int]:
    """Rows each table needs once range keys become ternary (prefix expansion of each range)."""
    rows: dict[str, int] = {}
    for e in tables.entries:
        n = 1
        for m in e.matches:
            if m.kind == "range":
                n *= len(to_prefixes(m.value, m.arg, tables.widths[m.field]))
        rows[e.table] = rows.get(e.table, 0) + n
    return rows


# -- formats --------------------------------------------------------------------------------

def _cli_match(m: Match) -> str:
    if m.kind == "exact":
        return str(m.value)
    if m.kind == "range":
        return f"{m.value}->{m.arg}"
    if m.kind == "lpm":
        return f"{m.value}/{m.arg}"
    return f"{m.value}&&&{m.arg}"


def simple_switch_cli(tables: P4Tables) -> str:
    """Commands for bmv2's simple_switch_CLI (priorities: lower wins)."""
    lines = ["# generated by camus-xdp; feed to simple_switch_CLI"]
    for e in tables.entries:
        keys = " ".join(_cli_match(m) for m in e.matches)
        params = " ".join(str(x) for x in e.params)
        prio = f" {e.cli_priority}" if e.priority else ""
        lines.append(f"table_add {e.table} {e.action} {keys} => {params}{prio}".rstrip())
    node = 0
    for gid, ports in sorted(tables.groups.items()):
        lines.append(f"mc_mgrp_create {gid}")
        lines.append(f"mc_node_create {node} {' '.join(str(p) for p in ports)}")
        lines.append(f"mc_node_associate {gid} {node}")
        node += 1
    return "\n".join(lines) + "\n"


def p4runtime_json(tables: P4Tables) -> list[dict[str, Any]]:
    """P4Runtime-style entries (priorities: higher wins)."""
    out = []
    for e in tables.entries:
        match = {}
        for m in e.matches:
            if m.kind == "exact":
                match[m.field] = m.value
            elif m.kind == "range":
                match[m.field] = {"low": m.value, "high": m.arg}
            elif m.kind == "lpm":
                match[m.field] = [m.value, m.arg]
            else:
                match[m.field] = {"value": m.value, "mask": m.arg}
        entry = {"table": e.table, "match": match, "action_name": e.action,
                 "action_params": list(e.params)}
        if e.priority:
            entry["priority"] = e.priority
        out.append(entry)
    for gid, ports in sorted(tables.groups.items()):
        out.append({"multicast_group_id": gid, "replicas": [{"egress_port": p, "instance": 1} for p in ports]})
    return out
