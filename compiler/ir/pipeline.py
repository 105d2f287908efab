"""The Pipeline IR: staged match tables, the leaf table, multicast groups, state variables.

This is the contract between the compiler and every back end (eBPF maps, P4 entries) and the
reference interpreter. A packet's message walks the tables in order carrying one state id,
starting at `root`:

  * a table applies only to the states listed in `states` (a state tests exactly one
    variable); other states pass through unchanged;
  * a match of (state, key) sets the next state; a miss sets state 0 (nobody subscribed);
    exact tables may hold a per-state `any` entry used when no exact entry matches;
    LPM entries follow longest-prefix-wins; range entries of one state never overlap;
  * after the header-field tables, `state_updates[state]` lists the state variables to update
    (their windowed aggregates feed the state-variable tables that follow);
  * the final state is looked up in `leaves`; a state without a leaf delivers nothing.

Each table's shape is described once, as data (`TableSchema`), and `validate` checks every
entry against it, so a back end can trust what it reads.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .bitvector import (COLUMN_CHUNK as COLUMN_CHUNK, BitvectorColumns as BitvectorColumns,  # re-exported
                        BitvectorField as BitvectorField, BitvectorPlane as BitvectorPlane,
                        BitvectorStage as BitvectorStage)

_PLACEHOLDER = re.compile(r'"(@@\d+@@)"')   # Pipeline.dumps' one-line rows

MatchSpec = tuple[Any, ...]  # ("exact", v) | ("range", lo, hi) | ("lpm", v, plen) | ("any",)


def ident(name: str) -> str:
    """A field path or state variable as an identifier part: ipv6.dst/hi -> ipv6_dst_hi,
    count(latency)@w -> count_latency_at_w."""
    return name.replace(".", "_").replace("/", "_").replace("(", "_").replace(")", "").replace("@", "_at_")


@dataclass(frozen=True)
class Entry:
    state: int
    match: MatchSpec
    next: int


@dataclass
class Compression:
    """Low-resolution domain: the field's value is first mapped to a small code (`kind` exact
    or range over the raw value; unmatched values get code 0) and the table matches codes."""
    kind: str
    width: int                                  # bits of the code
    codes: list[tuple[MatchSpec, int]]          # (match on raw value, code)


@dataclass(frozen=True)
class TableSchema:
    name: str
    key: tuple[tuple[str, int], ...]            # (column, bits)
    match_kind: str                             # exact | range | lpm
    action: str = "set_state"


@dataclass
class FieldTable:
    name: str                 # field path, or a state variable's label
    var: int                  # variable index in the compiler's order
    kind: str                 # exact | range | lpm
    field_width: int          # bits of the raw value
    states: list[int]
    entries: list[Entry]
    field: str | None = None          # query-field path (None for state variables)
    state_var: int | None = None      # state variable id (None for header fields)
    compression: Compression | None = None

    @property
    def key_width(self) -> int:
        return self.compression.width if self.compression else self.field_width

    def schema(self, state_bits: int) -> TableSchema:
        return TableSchema(f"t_{ident(self.name)}",
                           (("state", state_bits), (self.name, self.key_width)), self.kind)


@dataclass
class ActionSet:
    ports: tuple[Any, ...] = ()                   # ints or names, sorted
    group: int | None = None            # multicast group when more than one port
    drop: bool = False                  # an explicit drop rule matched
    calls: tuple[Any, ...] = ()                   # ((name, (args...)), ...) custom actions
    updates: tuple[int, ...] = ()       # internal: state variables updated on this path
    rules: tuple[int, ...] = ()         # counted rules (CompileOptions.count_rules) that matched

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ports": list(self.ports)}
        if self.group is not None:
            out["group"] = self.group
        if self.drop:
            out["drop"] = True
        if self.calls:
            out["calls"] = [[n, list(a)] for n, a in self.calls]
        if self.rules:
            out["rules"] = list(self.rules)
        return out

    @property
    def delivers(self) -> bool:
        """Whether a rule decided this message's fate (ports, drop or a custom action); a
        leaf that only counts or updates windows does not, so the default action applies."""
        return bool(self.ports or self.drop or self.calls)

    def names(self) -> list[str]:
        """Human-readable actions, e.g. ['fwd(1,2)', 'answerDNS(10.0.0.1)']."""
        out = []
        if self.ports:
            out.append("fwd(" + ",".join(str(p) for p in self.ports) + ")")
        if self.drop:
            out.append("drop")
        out += [f"{n}({','.join(a)})" for n, a in self.calls]
        return out


@dataclass
class StateVarInfo:
    id: int
    fn: str
    field: str              # "" for every(n), which reads no field
    counter: str
    window_us: int          # 0: never resets
    modulus: int = 0        # every(n): n


@dataclass(frozen=True)
class CoverInfo:
    """The tables are a cover of the rules (structure/relaxed.py): they over-deliver, never
    under-deliver; the hosts behind the switch filter exactly."""
    width: int               # states per field at most
    fanout: int              # edges per state at most
    over_delivery: float     # deliveries of the cover / of the exact rules, on sampled messages
    samples: int
    # per subscriber port on the same messages, with the egress port filters: its copies over what
    # its rules select (median, 90th percentile, worst), and how many ports have a filter
    port_median: float = 1.0
    port_p90: float = 1.0
    port_worst: float = 1.0
    filtered_ports: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"width": self.width, "fanout": self.fanout, "over_delivery": round(self.over_delivery, 4),
                "samples": self.samples, "port_median": self.port_median, "port_p90": self.port_p90,
                "port_worst": self.port_worst, "filtered_ports": self.filtered_ports}

    def describe(self) -> str:
        return (f"at most {self.width} states per field and {self.fanout} edges per state; "
                f"{self.over_delivery:.2f}x the exact rules' deliveries on {self.samples} sampled messages "
                f"before port filters; per port with {self.filtered_ports} filtered in egress: median "
                f"{self.port_median:.2f}x, p90 {self.port_p90:.2f}x, worst {self.port_worst:.2f}x")


@dataclass
class PortFilters:
    """Per-port filters run on each copy in the switch's egress (after replication a copy is for
    one port, so a port's own rules are a small diagram even where the ingress one is a cover).
    A copy to a port in `roots` walks `tables` from that port's root state under the same rules as
    the ingress tables (a table applies to the states it lists; a miss is state 0) and is kept
    only when it ends in an `accept` state; copies to other ports are kept."""
    roots: dict[int, int]          # port -> root state of its filter
    tables: list[FieldTable]       # header fields only, in the ingress order
    accept: list[int]              # final states that keep the copy

    def state_ids(self) -> set[int]:
        ids = {0} | set(self.roots.values()) | set(self.accept)
        for t in self.tables:
            ids.update(t.states)
        return ids

    @property
    def entry_count(self) -> int:
        return len(self.roots) + len(self.accept) + sum(len(t.entries) for t in self.tables)


@dataclass
class Pipeline:
    spec: str
    root: int
    tables: list[FieldTable]
    leaves: dict[int, ActionSet]
    groups: dict[int, tuple[Any, ...]]
    state_vars: list[StateVarInfo] = field(default_factory=list)
    state_updates: dict[int, tuple[int, ...]] = field(default_factory=dict)
    rule_count: int = 0
    bitvector: BitvectorStage | None = None     # set: the classifier is this stage, not tables
    cover: CoverInfo | None = None              # set: the tables over-approximate the rules
    default_action: ActionSet | None = None     # the spec's query_default_action: what a message
                                                # no rule delivers gets (the leaf table's default)
    port_filters: PortFilters | None = None     # set: egress keeps a listed port's copies only
                                                # when its own rules select the message

    def final_actions(self, reached: ActionSet | None) -> ActionSet:
        """The actions of a message whose walk ended at `reached` (None: no leaf): the default
        action where no rule delivered it, keeping the leaf's counters."""
        a = reached or ActionSet()
        d = self.default_action
        if d is None or a.delivers:
            return a
        return ActionSet(d.ports, d.group, d.drop, d.calls, a.updates, a.rules)

    # -- derived -----------------------------------------------------------------------------
    @property
    def state_ids(self) -> set[int]:
        ids = {0, self.root} | set(self.leaves)
        for t in self.tables:
            ids.update(t.states)
        return ids

    @property
    def state_bits(self) -> int:
        return max(1, max(self.state_ids).bit_length())

    @property
    def entry_count(self) -> int:
        if self.bitvector is not None:              # one entry per (field, interval)
            return self.bitvector.interval_count
        return sum(len(t.entries) for t in self.tables)

    # -- checking ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Check every entry against its table's schema; raise ValueError on the first fault."""
        _check_tables(self.tables, self.state_ids, self.state_bits)
        for gid, ports in self.groups.items():
            if len(ports) < 2:
                raise ValueError(f"group {gid} has fewer than two ports")
        for s, a in self.leaves.items():
            if a.group is not None and tuple(self.groups.get(a.group, ())) != tuple(a.ports):
                raise ValueError(f"leaf {s}: group {a.group} does not hold its ports")
        d = self.default_action
        if d is not None and d.group is not None and tuple(self.groups.get(d.group, ())) != tuple(d.ports):
            raise ValueError(f"default action: group {d.group} does not hold its ports")
        if self.port_filters is not None:
            _validate_port_filters(self.port_filters)
        if self.bitvector is not None:
            if self.tables or self.state_vars:
                raise ValueError("a bit-vector pipeline has no state tables and no state variables")
            self.bitvector.validate(self.leaves)

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        def match_json(m: MatchSpec) -> dict[str, Any]:
            return {"any": True} if m[0] == "any" else {m[0]: list(m[1:]) if len(m) > 2 else m[1]}

        def table_json(t: FieldTable) -> dict[str, Any]:
            return {
                "name": t.name, "var": t.var, "kind": t.kind, "field": t.field,
                "state_var": t.state_var, "field_width": t.field_width,
                "key_width": t.key_width, "states": sorted(t.states),
                "compression": None if t.compression is None else {
                    "kind": t.compression.kind, "width": t.compression.width,
                    "codes": [[match_json(m), c] for m, c in t.compression.codes]},
                "entries": [[e.state, match_json(e.match), e.next] for e in t.entries],
            }

        return {
            "format": "camus-pipeline/1",
            "spec": self.spec,
            "rules": self.rule_count,
            "root": self.root,
            "state_bits": self.state_bits,
            "tables": [table_json(t) for t in self.tables],
            "leaves": {str(s): a.to_json() | ({"updates": list(a.updates)} if a.updates else {})
                       for s, a in sorted(self.leaves.items())},
            "groups": {str(g): list(p) for g, p in sorted(self.groups.items())},
            "state_vars": [vars(v) for v in self.state_vars],
            "state_updates": {str(s): list(u) for s, u in sorted(self.state_updates.items())},
        } | ({"bitvector": self.bitvector.to_json()} if self.bitvector is not None else {}) \
          | ({"cover": self.cover.to_json()} if self.cover is not None else {}) \
          | ({"default_action": self.default_action.to_json()} if self.default_action is not None else {}) \
          | ({"port_filters": {"roots": [[p, r] for p, r in sorted(self.port_filters.roots.items())],
                               "accept": sorted(self.port_filters.accept),
                               "tables": [table_json(t) for t in self.port_filters.tables]}}
             if self.port_filters is not None else {})

    def dumps(self) -> str:
        """Indented JSON with one table entry, code, leaf or group per line (reviewable diffs)."""
        doc = self.to_json()
        rows: dict[str, str] = {}

        def compact(items: list[Any]) -> list[str]:
            keys = []
            for item in items:
                key = f"@@{len(rows)}@@"
                rows[key] = json.dumps(item, separators=(",", ":"))
                keys.append(key)
            return keys

        for t in doc["tables"] + doc.get("port_filters", {}).get("tables", []):
            t["entries"] = compact(t["entries"])
            if t["compression"]:
                t["compression"]["codes"] = compact(t["compression"]["codes"])
        for section in ("leaves", "groups"):
            doc[section] = {k: compact([v])[0] for k, v in doc[section].items()}
        if "bitvector" in doc:                      # one row per field, bitmap and term list
            bv = doc["bitvector"]
            bv["fields"] = compact(bv["fields"])
            bv["bitmaps"] = compact(bv["bitmaps"])
            bv["term_leaf"] = compact([bv["term_leaf"]])[0]
        text = json.dumps(doc, indent=1)
        # One pass over the text: a replace per row rescans it (quadratic: 20 s at 10K rules).
        return _PLACEHOLDER.sub(lambda m: rows[m.group(1)], text)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Pipeline":
        if doc.get("format") != "camus-pipeline/1":
            raise ValueError("not a camus pipeline (format camus-pipeline/1)")

        def match(m: dict[str, Any]) -> MatchSpec:
            (k, v), = m.items()
            if k == "any":
                return ("any",)
            return (k, *v) if isinstance(v, list) else (k, v)

        def field_table(t: dict[str, Any]) -> FieldTable:
            comp = t.get("compression")
            return FieldTable(
                t["name"], t["var"], t["kind"], t["field_width"], list(t["states"]),
                [Entry(s, match(m), n) for s, m, n in t["entries"]], t.get("field"),
                t.get("state_var"),
                None if comp is None else Compression(comp["kind"], comp["width"],
                                                      [(match(m), c) for m, c in comp["codes"]]))

        tables = [field_table(t) for t in doc["tables"]]
        pf = doc.get("port_filters")
        def action_set(a: dict[str, Any]) -> ActionSet:
            return ActionSet(tuple(a["ports"]), a.get("group"), a.get("drop", False),
                             tuple((n, tuple(x)) for n, x in a.get("calls", [])),
                             tuple(a.get("updates", [])), tuple(a.get("rules", [])))

        leaves = {int(s): action_set(a) for s, a in doc["leaves"].items()}
        return cls(doc["spec"], doc["root"], tables, leaves,
                   {int(g): tuple(p) for g, p in doc["groups"].items()},
                   [StateVarInfo(**v) for v in doc.get("state_vars", [])],
                   {int(s): tuple(u) for s, u in doc.get("state_updates", {}).items()},
                   doc.get("rules", 0),
                   BitvectorStage.from_json(doc["bitvector"]) if doc.get("bitvector") else None,
                   CoverInfo(**doc["cover"]) if doc.get("cover") else None,
                   action_set(doc["default_action"]) if doc.get("default_action") else None,
                   None if pf is None else PortFilters({p: r for p, r in pf["roots"]},
                                                       [field_table(t) for t in pf["tables"]], list(pf["accept"])))


def _validate_port_filters(pf: PortFilters) -> None:
    """Port filters test header fields under the ingress tables' entry rules; their states are
    their own (egress keeps its own state variable)."""
    for t in pf.tables:
        if t.field is None or t.state_var is not None or t.compression is not None:
            raise ValueError(f"port filter table {t.name}: a port filter tests header fields, uncompressed")
    known = pf.state_ids()
    _check_tables(pf.tables, known, max(1, max(known).bit_length()))
    for p, r in pf.roots.items():
        if type(p) is not int:
            raise ValueError(f"port filter for port {p!r}: only numbered ports have an egress port")


def _check_tables(tables: list[FieldTable], known: set[int], bits: int) -> None:
    """Every entry against its table's schema; a state belongs to one table."""
    owner: dict[int, str] = {}
    for t in tables:
        schema = t.schema(bits)
        if t.kind not in ("exact", "range", "lpm"):
            raise ValueError(f"{schema.name}: unknown match kind {t.kind}")
        width = dict(schema.key)[t.name]
        states = set(t.states)
        for s in states:
            if s in owner:
                raise ValueError(f"state {s} belongs to both {owner[s]} and {schema.name}")
            owner[s] = schema.name
        seen: dict[tuple[Any, ...], int] = {}
        ranges: dict[int, list[tuple[int, int]]] = {}
        for e in t.entries:
            where = f"{schema.name} entry {e}"
            if e.state not in states:
                raise ValueError(f"{where}: state is not one of the table's states")
            if e.next not in known:
                raise ValueError(f"{where}: next state {e.next} does not exist")
            kind = e.match[0]
            if kind == "any":
                if t.kind != "exact":
                    raise ValueError(f"{where}: 'any' entries only in exact tables")
            elif kind != t.kind:
                raise ValueError(f"{where}: {kind} match in a {t.kind} table")
            vals = e.match[1:]
            if kind == "exact" and not 0 <= vals[0] < 1 << width:
                raise ValueError(f"{where}: value wider than {width} bits")
            if kind == "range":
                lo, hi = vals
                if not 0 <= lo <= hi < 1 << width:
                    raise ValueError(f"{where}: bad range for {width} bits")
                ranges.setdefault(e.state, []).append((lo, hi))
            if kind == "lpm":
                v, plen = vals
                if not 0 <= plen <= width or v >> (width - plen) << (width - plen) != v:
                    raise ValueError(f"{where}: bad prefix for {width} bits")
            k = (e.state,) + tuple(e.match)
            if k in seen:
                raise ValueError(f"{where}: duplicate key")
            seen[k] = e.next
        for s, spans in ranges.items():
            spans.sort()
            for (_, b), (c, _) in zip(spans, spans[1:]):
                if c <= b:
                    raise ValueError(f"{schema.name}: overlapping ranges for state {s}")
