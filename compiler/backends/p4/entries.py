"""P4 back end, dynamic part: the Pipeline IR as switch table entries and multicast groups.

The tables are the ones `p4_schema` declares (the program declares the same ones); every entry
is checked against that declaration (`check_entries`) before anything is written. One more
kind exists only for the entry interpreter: t_<field>_code over an IR compiled with --compress,
compressed fields' raw value -> code (the program refuses that compression, `check_program_fit`);
a field the spec gives a lower-resolution domain (query_field_domain) has a t_<field>_code the
program declares, and its codes are chosen here, from the rule set's boundaries (`domain_tables`).
Range entries carry a priority; P4Runtime says higher wins, simple_switch_CLI says lower wins:
`Entry.priority` follows P4Runtime and `cli_priority` converts (formats.py writes the CLI and
bfrt forms).
"""
from __future__ import annotations

import bisect
import ipaddress
from dataclasses import dataclass, field, replace
from typing import Any

from ...ir.pipeline import Entry, FieldTable, Pipeline, ident
from ...language.spec import Spec
from ..base import OverBudget
from ..emit import BackendError
from ..ebpf.custom import dns_answer, ila_locator
from .layout import dns_topic
from .ila import ila_rewrites
from .layout import refuse_topics
from .schema import (ANSWER_DNS, CODE_SUFFIX, DEFAULT_CALL_ID, CodeDecl, code_decl,
                     EXACT_SUFFIX, ILA_REWRITE, STATE_KEY_BITS, SVAR_BITS, SVAR_KEY, SVAR_STAGES,
                     UPDATE_SLOTS, P4Schema, PF_ACCEPT, PF_KEEP, PF_PORT, PF_PREFIX, PF_SET, PF_STATE, key_kind,
                     load_action, update_action, window_shift)

MAX_PRIORITY = 1 << 24


def table_name(t: FieldTable, suffix: str = "") -> str:
    return "t_" + ident(t.name) + suffix


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
    params: tuple[Any, ...] = ()
    priority: int = 0         # P4Runtime convention: higher wins (0: table needs none)

    @property
    def cli_priority(self) -> int:
        """simple_switch_CLI convention: lower wins."""
        return MAX_PRIORITY - self.priority if self.priority else 0


@dataclass
class P4Tables:
    root: int = 0                                               # meta.state when parsing ends
    entries: list[P4Entry] = field(default_factory=list)
    groups: dict[int, tuple[Any, ...]] = field(default_factory=dict)      # mgid -> ports
    order: list[str] = field(default_factory=list)              # tables in pipeline order
    widths: dict[str, int] = field(default_factory=dict)        # key field -> bits
    calls: dict[int, tuple[str, ...]] = field(default_factory=dict)   # call id -> custom actions
    updates: dict[str, tuple[str, str]] = field(default_factory=dict)  # update action -> (counter, field)
    loads: dict[str, tuple[str, str]] = field(default_factory=dict)    # load action -> (counter, fn)
    windows: dict[str, int] = field(default_factory=dict)              # counter -> window (us)
    defaults: dict[str, tuple[str, tuple[Any, ...]]] = field(default_factory=dict)  # table -> its
                                                  # default action and parameters (query_default_action)
    guards: dict[str, str] = field(default_factory=dict)   # table -> the table whose miss it runs on
    codes: dict[str, str] = field(default_factory=dict)    # t_<f>_code -> the code key its action sets
    egress: list[str] = field(default_factory=list)        # port filter tables after t_pf_port, in order

    def by_table(self) -> dict[str, list[P4Entry]]:
        out: dict[str, list[P4Entry]] = {t: [] for t in self.order}
        for e in self.entries:
            out.setdefault(e.table, []).append(e)
        return out


def schema_tables(schema: P4Schema) -> P4Tables:
    """Empty tables shaped as a program declares them: order, key widths, which table runs on
    another's miss (what a switch that holds entries of this program executes)."""
    return P4Tables(order=[t.name for t in schema.tables if t.name != "t_root"], widths=schema.key_widths(),
                    guards=schema.guards(), codes={name: c.key.name for name, c in schema.codes.items()},
                    egress=[t.name for t in schema.egress if t.name != PF_PORT])


def declared_kind(spec: Spec | None, t: FieldTable) -> str:
    """A table's key kind: the program's for a query field, else (no spec) the IR's."""
    if spec is None or t.field is None:
        return "range" if t.state_var is not None else t.kind
    q = spec.query_field(t.field)
    return t.kind if q is None else key_kind(q)


def check_program_fit(p: Pipeline, spec: Spec, arch: str = "v1model") -> None:
    """Raise BackendError when the IR needs something the static switch program does not have."""
    refuse_topics(spec, arch)
    if p.bitvector is not None:
        raise BackendError("this rule set compiled to the bit-vector stage (XDP hosts run it); a switch runs "
                           "the decision diagram: compile with --strategy bdd (the budget is fitted automatically)")
    order = [q.path for q in spec.query_fields]
    seen = [t.field for t in p.tables if t.field is not None]
    if seen != sorted(seen, key=order.index):
        raise BackendError("the switch program applies its tables in the spec's field order; "
                           "compile with --order spec for the P4 target")
    if any(t.compression is not None for t in p.tables):
        raise BackendError("the switch tables match raw field values; compile without --compress for the P4 target")
    if p.state_vars and arch != "v1model":
        raise BackendError("state functions need window registers updated and read in one pass, which "
                           "Tofino allows once per register: use --arch v1model or an XDP host for them")
    if p.state_vars:
        _state_layout(p, spec)          # raises when the windows or functions do not fit


@dataclass(frozen=True)
class StateLayout:
    slot: dict[int, tuple[str, int]]       # state var id -> (counter, register index)
    stage: dict[int, int]                  # state var id -> t_svar<stage>


def _state_layout(p: Pipeline, spec: Spec) -> StateLayout:
    slot: dict[int, tuple[str, int]] = {}
    used: dict[str, int] = {}
    for v in p.state_vars:
        c = spec.counter(v.counter)
        if c is None:
            raise BackendError(f"state variable {v.fn}({v.field}) uses an undeclared window {v.counter!r}")
        if v.fn not in ("count", "sum", "every"):
            raise BackendError(f"{v.fn}({v.field}) needs a division the switch cannot do; use count/sum "
                               f"rules on the switch, or place this subscription on an XDP host")
        if c.window_us and window_shift(c.window_us) is None:
            lo = 1 << (c.window_us.bit_length() - 1)
            raise BackendError(f"query_counter {c.name}: the switch numbers windows with a shift, so the window "
                               f"must be a power of two microseconds (is {c.window_us}; use {lo} or {lo * 2})")
        slot[v.id] = (c.name, used.get(c.name, 0))
        used[c.name] = used.get(c.name, 0) + 1
        if used[c.name] > c.size:
            raise BackendError(f"query_counter {c.name} holds {c.size} state variables; the rules need {used[c.name]}")
    for s, vars_ in p.state_updates.items():
        if len(vars_) > UPDATE_SLOTS:
            raise BackendError(f"a message would update {len(vars_)} state variables; the switch updates at most "
                               f"{UPDATE_SLOTS} per message")
    # Stages: a state-variable table follows every table whose transitions lead into it.
    tables = [t for t in p.tables if t.state_var is not None]
    owner = {st: t.state_var for t in tables for st in t.states}
    stage: dict[int, int] = {}
    for t in tables:
        stage.setdefault(t.state_var, 0)               # type: ignore[arg-type]
        for e in t.entries:
            nxt = owner.get(e.next)
            if nxt is not None:
                stage[nxt] = max(stage.get(nxt, 0), stage[t.state_var] + 1)   # type: ignore[index]
    if stage and max(stage.values()) >= SVAR_STAGES:
        raise BackendError(f"a message would pass {max(stage.values()) + 1} state-variable tests; the switch "
                           f"program has {SVAR_STAGES} stages for them")
    return StateLayout(slot, stage)


EXACT_SPAN_MAX = 1 << 16   # an interval on an exact key becomes that many exact entries at most


def exact_from_intervals(t: FieldTable) -> list[Entry]:
    """A range table of the IR as exact entries plus one `any` entry per state, for a field the
    spec declares exact (`query_field_exact`): the diagram merges adjacent equalities with the
    same outcome into one interval (`id == 1001 or id == 1002`, or values whose subtrees are
    equal), and the gaps between them into wide ones. Per state, the next state holding the
    most values (values no interval holds miss: next state 0) becomes the default (`_any`);
    every other interval, one exact entry per value. An interval wider than EXACT_SPAN_MAX that
    is not the default cannot be listed: refused."""
    by_state: dict[int, list[Entry]] = {}
    for e in t.entries:
        by_state.setdefault(e.state, []).append(e)
    out: list[Entry] = []
    top = (1 << t.field_width) - 1
    for state, es in by_state.items():
        spans = [(e.match[2] - e.match[1] + 1 if e.match[0] == "range" else 1, e) for e in es if e.match[0] != "any"]
        default = next((e.next for e in es if e.match[0] == "any"), None)
        if default is None and spans:
            # values no interval holds miss (state 0): they take part like an interval of their own,
            # so that the default is never stretched over them
            held = sorted((e.match[1], e.match[1] + n - 1) for n, e in spans)
            gaps, at = [], 0
            for lo, hi in held:
                if lo > at:
                    gaps.append((at, lo - 1))
                at = max(at, hi + 1)
            if at <= top:
                gaps.append((at, top))
            spans += [(hi - lo + 1, Entry(state, ("range", lo, hi), 0)) for lo, hi in gaps]
            mass: dict[int, int] = {}
            for n, e in spans:
                mass[e.next] = mass.get(e.next, 0) + n
            default = max(mass, key=lambda nxt: (mass[nxt], nxt == 0))
        for span, e in spans:
            if e.next == default:
                continue
            if span > EXACT_SPAN_MAX:
                raise BackendError(f"{t.name}: an interval of {span:,} values on the exact key (a range filter on a "
                                   "query_field_exact field): declare it query_field for a switch")
            lo = e.match[1]
            out.extend(Entry(state, ("exact", v), e.next) for v in range(lo, lo + span))
        if default is not None:
            out.append(Entry(state, ("any",), default))
    return out


def domain_tables(t: FieldTable, code: CodeDecl, root: int) -> tuple[list[P4Entry], list[Entry]]:
    """A range field with a lower-resolution domain (query_field_domain): the code table's entries
    (each interval between two consecutive boundaries of the rule set, over all states, is one
    code; values below the lowest boundary are code 0, the table's default), keyed by the root
    state (a push inserts its codes under its new root, the flip of t_root selects them, the old
    root's go with the old states: make-before-break as for every other table), and the field's
    entries over codes, as exact entries plus one `any` per state (exact_from_intervals): the
    TCAM holds one row set per boundary, the (state, code) entries sit in SRAM. More boundaries
    than codes: OverBudget (the fitting driver then discretises the constants)."""
    top = (1 << t.field_width) - 1
    bounds = {0}
    for e in t.entries:
        if e.match[0] == "any":
            continue
        lo, hi = (e.match[1], e.match[2]) if e.match[0] == "range" else (e.match[1], e.match[1])
        bounds.add(lo)
        if hi < top:
            bounds.add(hi + 1)
    cuts = sorted(bounds)
    if len(cuts) > 1 << code.key.bits:
        raise OverBudget([f"{t.name}: {len(cuts):,} intervals between the rules' boundaries, its domain "
                          f"has {1 << code.key.bits:,} codes (query_field_domain({t.name}, {code.key.bits}))"])
    table, st = "t_" + ident(t.name) + CODE_SUFFIX, Match("meta.state", "exact", root)
    coded = [P4Entry(table, (st, Match(t.name, "range", lo, cuts[i + 1] - 1 if i + 1 < len(cuts) else top)),
                     code.action, (i,), priority=1) for i, lo in enumerate(cuts) if i]

    def code_of(v: int) -> int:
        return bisect.bisect_right(cuts, v) - 1
    over_codes = replace(t, field_width=code.key.bits, kind="range", entries=[
        e if e.match[0] == "any" else
        Entry(e.state, ("range", code_of(e.match[1]), code_of(e.match[2] if e.match[0] == "range" else e.match[1])),
              e.next) for e in t.entries])
    return coded, exact_from_intervals(over_codes)


def state_id_bits(t: P4Tables) -> int:
    """Bits the largest state id the entries name takes (the program's meta.state must hold it)."""
    top = t.root
    for e in t.entries:
        if e.matches and e.matches[0].field in ("meta.state", PF_STATE):
            top = max(top, e.matches[0].value)
        if e.action in ("set_state", PF_SET):
            top = max(top, int(e.params[0]))
    return top.bit_length()


def p4_tables(p: Pipeline, spec: Spec | None = None) -> P4Tables:
    out = P4Tables(root=p.root, groups=dict(p.groups))
    layout = _state_layout(p, spec) if (spec is not None and p.state_vars) else None
    for t in p.tables:
        if layout is not None and t.state_var is not None:
            continue                                   # placed below, in the switch's stages
        key = t.name
        q = spec.query_field(t.field) if spec is not None and t.field is not None else None
        if q is not None and q.domain_bits and t.compression is None:
            _domain_field(t, code_decl(q), out)
            continue
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
            out.codes[code_table] = key
        _field_entries(t, spec, out, key)
    if layout is not None:
        _state_entries(p, spec, layout, out)      # type: ignore[arg-type]
    out.order.append("t_leaf")
    call_ids: dict[tuple[str, ...], int] = {}
    answers = spec is not None and dns_topic(spec) is not None
    rewrites = spec is not None and ila_rewrites(spec)
    d = p.default_action
    if d is not None:          # a message no rule delivers: t_leaf misses and runs the default
        if d.calls and (d.ports or d.drop):
            raise BackendError(f"the switch's leaf table has one default action; query_default_action "
                               f"{', '.join(d.names())} both forwards and calls: use one of them for P4")
        if d.calls:
            texts = tuple(f"{name}({','.join(args)})" for name, args in d.calls)
            call_ids[texts] = DEFAULT_CALL_ID
            out.calls[DEFAULT_CALL_ID] = texts
            out.defaults["t_leaf"] = ("call", (DEFAULT_CALL_ID,))
        elif d.drop:
            out.defaults["t_leaf"] = ("drop_msg", ())
        elif d.group is not None:
            out.defaults["t_leaf"] = ("set_mgid", (d.group,))
        elif d.ports:
            out.defaults["t_leaf"] = ("set_port", (d.ports[0],))
    for s, a in sorted(p.leaves.items()):
        leaf_key = (Match("meta.state", "exact", s),)
        if a.drop and not a.ports:
            out.entries.append(P4Entry("t_leaf", leaf_key, "drop_msg"))
        elif a.group is not None:
            out.entries.append(P4Entry("t_leaf", leaf_key, "set_mgid", (a.group,)))
        elif a.ports:
            out.entries.append(P4Entry("t_leaf", leaf_key, "set_port", (a.ports[0],)))
        elif a.calls and d is not None:   # a hit, so the default does not run for this leaf
            out.entries.append(P4Entry("t_leaf", leaf_key, "NoAction"))
        if a.calls:      # custom actions: one id per distinct list of calls, listed in calls.json
            texts = tuple(f"{name}({','.join(args)})" for name, args in a.calls)
            call_id = call_ids.setdefault(texts, len(call_ids) + 1)
            out.calls[call_id] = texts
            answer = dns_answer(a) if answers else ""
            locator = ila_locator(a) if rewrites else None
            if answer:       # the switch answers (p4_dns); the call id stays for the host's part
                out.entries.append(P4Entry("t_leaf_calls", leaf_key, ANSWER_DNS.name,
                                           (call_id, int(ipaddress.IPv4Address(answer)))))
            elif locator is not None:       # the switch rewrites the address (p4_ila)
                out.entries.append(P4Entry("t_leaf_calls", leaf_key, ILA_REWRITE.name, (call_id, locator)))
            else:
                out.entries.append(P4Entry("t_leaf_calls", leaf_key, "call", (call_id,)))
    if any(e.table == "t_leaf_calls" for e in out.entries):
        out.order.append("t_leaf_calls")
    _port_filter_entries(p, spec, out)
    return out


def _field_entries(t: FieldTable, spec: Spec | None, out: P4Tables, key: str, prefix: str = "t_",
                   state_key: str = "meta.state", action: str = "set_state") -> None:
    """A field table's entries: t_<f>_exact (a range key's single values, SRAM, tried first),
    t_<f> and t_<f>_any (the state's default on a miss). `prefix`, `state_key` and `action`
    name the egress port filters' own (t_pf_<f>, meta.pf_state, set_pf_state)."""
    def named(suffix: str = "") -> str:
        return prefix + ident(t.name) + suffix

    name = named()
    kind = declared_kind(spec, t) if t.compression is None else t.kind
    # a range key's single values go to t_<f>_exact (SRAM), tried first; t_<f> on its miss
    split = kind == "range" and t.compression is None and spec is not None
    eq_name = named(EXACT_SUFFIX) if split else name
    if split:
        out.order.append(eq_name)
        out.guards[name] = eq_name
    out.order.append(name)
    out.widths[key] = t.key_width
    out.widths[state_key] = STATE_KEY_BITS
    entries = t.entries
    if kind == "exact" and t.kind == "range":
        entries = exact_from_intervals(t)        # the IR merged equalities into intervals
    if kind != "lpm":                              # the state's default when the key misses
        out.order.append(named("_any"))
        out.guards[named("_any")] = name
    for e in entries:
        st = Match(state_key, "exact", e.state)
        if e.match[0] == "any":
            out.entries.append(P4Entry(named("_any"), (st,), action, (e.next,)))
        elif (kind == "exact" or split) and (e.match[0] == "exact" or (e.match[0] == "range"
                                                                     and e.match[1] == e.match[2])):
            out.entries.append(P4Entry(eq_name, (st, Match(key, "exact", e.match[1])), action, (e.next,)))
        elif kind == "range" and e.match[0] == "exact":      # an exact value in a range key
            out.entries.append(P4Entry(name, (st, Match(key, "range", e.match[1], e.match[1])), action,
                                       (e.next,), priority=1))
        elif e.match[0] == "range":
            out.entries.append(P4Entry(name, (st, Match(key, "range", e.match[1], e.match[2])), action,
                                       (e.next,), priority=1))
        else:
            out.entries.append(P4Entry(name, (st, Match(key, "lpm", e.match[1], e.match[2])), action,
                                       (e.next,)))


def _port_filter_entries(p: Pipeline, spec: Spec | None, out: P4Tables) -> None:
    """The egress port filters: t_pf_port (port -> its root), the field tables as the ingress
    ones (a domain field by its raw value), t_pf_accept."""
    pf = p.port_filters
    if pf is None:
        return
    for port, root in sorted(pf.roots.items()):
        out.entries.append(P4Entry(PF_PORT, (Match("egress_port", "exact", port),), PF_SET, (root,)))
    out.widths["egress_port"] = 9
    main = out.order
    out.order = out.egress
    for t in pf.tables:
        _field_entries(t, spec, out, t.name, PF_PREFIX, PF_STATE, PF_SET)
    out.order = main
    out.egress.append(PF_ACCEPT)
    for s in pf.accept:
        out.entries.append(P4Entry(PF_ACCEPT, (Match(PF_STATE, "exact", s),), PF_KEEP))


def _domain_field(t: FieldTable, code: CodeDecl, out: P4Tables) -> None:
    """t_<f>_code (first in the order), t_<f> over (state, code) and t_<f>_any, for a field with
    a domain."""
    name, code_table, any_table = table_name(t), table_name(t, CODE_SUFFIX), table_name(t, "_any")
    coded, entries = domain_tables(t, code, out.root)
    out.order.insert(0, code_table)
    out.order += [name, any_table]
    out.guards[any_table] = name
    out.codes[code_table] = code.key.name
    out.widths[t.name] = t.field_width
    out.widths[code.key.name] = code.key.bits
    out.widths["meta.state"] = STATE_KEY_BITS
    out.defaults[code_table] = (code.action, (0,))
    out.entries += coded
    for e in entries:
        st = Match("meta.state", "exact", e.state)
        if e.match[0] == "any":
            out.entries.append(P4Entry(any_table, (st,), "set_state", (e.next,)))
        else:
            out.entries.append(P4Entry(name, (st, Match(code.key.name, "exact", e.match[1])), "set_state", (e.next,)))


def _state_entries(p: Pipeline, spec: Spec, layout: StateLayout, out: P4Tables) -> None:
    """Window updates after the header tables, then the state-variable tests in stages."""
    for k in range(UPDATE_SLOTS):
        out.order.append(f"t_update{k}")
    for s, vars_ in sorted(p.state_updates.items()):
        for k, v in enumerate(vars_):
            info = p.state_vars[v]
            counter, index = layout.slot[v]
            params = (index, info.modulus) if info.fn == "every" else (index,)
            out.entries.append(P4Entry(f"t_update{k}", (Match("meta.state", "exact", s),),
                                       update_action(counter, info.field), params))
            out.updates[update_action(counter, info.field)] = (counter, info.field)
    for c in spec.counters:
        out.windows[c.name] = c.window_us
    out.widths[SVAR_KEY] = SVAR_BITS
    for stage in range(SVAR_STAGES):
        out.order += [f"t_svar{stage}_load", f"t_svar{stage}"]
    for t in p.tables:
        if t.state_var is None:
            continue
        info = p.state_vars[t.state_var]
        counter, index = layout.slot[t.state_var]
        stage = layout.stage[t.state_var]
        load = load_action(counter, info.fn)
        out.loads[load] = (counter, "count" if info.fn == "every" else info.fn)
        for st in t.states:
            out.entries.append(P4Entry(f"t_svar{stage}_load", (Match("meta.state", "exact", st),), load, (index,)))
        for e in t.entries:
            lo, hi = (e.match[1], e.match[1]) if e.match[0] == "exact" else (e.match[1], e.match[2])
            out.entries.append(P4Entry(f"t_svar{stage}", (Match("meta.state", "exact", e.state),
                                                          Match(SVAR_KEY, "range", lo, hi)),
                                       "set_state", (e.next,), priority=1))


_KEY_OK = {"exact": ("exact",), "range": ("range",), "lpm": ("lpm",), "ternary": ("ternary",)}


def check_entries(tables: P4Tables, schema: P4Schema) -> None:
    """Every entry against the table it names: declared table, keys in order with their match
    kinds, values within the key's bits, an action the table has, its parameters and their
    bits, a priority exactly where a range key needs one. Raises BackendError on the first
    mismatch (a bug in the back end; nothing is written)."""
    for e in tables.entries:
        t = schema.table(e.table)
        if t is None:
            raise BackendError(f"entry for {e.table}, which the program does not declare: {e}")
        if [m.field for m in e.matches] != [k.name for k in t.keys]:
            raise BackendError(f"{e.table}: keys {[m.field for m in e.matches]} do not match the declared "
                               f"{[k.name for k in t.keys]}")
        for m, k in zip(e.matches, t.keys):
            if m.kind not in _KEY_OK[k.match]:
                raise BackendError(f"{e.table}: a {m.kind} match on the {k.match} key {k.name}")
            top = (1 << k.bits) - 1
            if not 0 <= m.value <= top or (m.kind == "range" and not m.value <= m.arg <= top) \
                    or (m.kind == "lpm" and not 0 <= m.arg <= k.bits):
                raise BackendError(f"{e.table}: {m} does not fit the {k.bits}-bit key {k.name}")
        if e.action not in t.actions:
            raise BackendError(f"{e.table}: action {e.action} is not one of {', '.join(t.actions)}")
        params = schema.actions[e.action].params
        if len(e.params) != len(params):
            raise BackendError(f"{e.table}: {e.action} takes {len(params)} parameter(s), the entry has {len(e.params)}")
        for v, (pname, bits) in zip(e.params, params):
            if not isinstance(v, int) or not 0 <= v < (1 << bits):
                raise BackendError(f"{e.table}: {e.action}({pname}={v!r}) does not fit {bits} bits")
        needs_priority = any(k.match == "range" for k in t.keys)
        if needs_priority != bool(e.priority):
            raise BackendError(f"{e.table}: {'missing' if needs_priority else 'unexpected'} priority in {e}")
    for table, (act, vals) in tables.defaults.items():
        td = schema.table(table)
        if td is None or act not in td.actions:
            raise BackendError(f"default action {act} for {table}, which the program does not allow there")
        decl = schema.actions[act].params
        if len(vals) != len(decl) or any(not isinstance(v, int) or not 0 <= v < (1 << bits)
                                          for v, (_, bits) in zip(vals, decl)):
            raise BackendError(f"{table}: default {act}{vals} does not fit its parameters {decl}")
    if not 0 <= tables.root < (1 << schema.state_bits):
        raise BackendError(f"root state {tables.root} does not fit meta.state ({schema.state_bits} bits)")
