"""The switch's tables declared once, as data: names, keys (P4 expression, P4Runtime name,
bits, match kind), actions with their parameters, sizes and defaults, and the order they apply.

Everything P4 reads this: the program generator declares and applies these tables
(p4_program), P4Info describes them (p4_runtime), the entry generator names these tables
and actions (p4_entries), every entry is checked against it before anything is written
(`check_entries`), and loaders of P4Runtime entries take key widths from it. The schema depends
on the spec only, like the program: one program serves every rule set.

Table layout (`meta.state` carries the state id):
  t_root             no key; default action set_state(root) starts the walk
  t_<field>_exact    a range field's equalities: key (meta.state: exact, <field>: exact) ->
                     set_state(next), applied first: an entry that tests one value sits in SRAM
  t_<field>          key (meta.state: exact, <field>: exact | range | lpm) -> set_state(next);
                     for a range field, applied when t_<field>_exact misses: only what needs a
                     range (an interval, a prefix) is in TCAM
  t_<field>_any      key (meta.state: exact) -> set_state(next), applied when t_<field> misses
                     (the per-state default of exact and range tables: SRAM instead of TCAM)
  t_<field>_code     a field with query_field_domain(f, bits), applied first: key (meta.state:
                     exact, <field>: range) -> set_<field>_code(code), entries under the root
                     state only (TCAM: one row set per boundary of the rule set, not per state;
                     keyed by the root so that a push brings its own codes and flips to them
                     with the root); t_<field> then keys (meta.state: exact, meta.<field>_code:
                     exact) (SRAM), with no t_<field>_exact: Camus's lower-resolution domain
  t_update<k>        v1model with windows: key (meta.state) -> update_<counter>_<field>(index)
                     | update_<counter>_every(index, modulus): every(n)'s count, kept modulo n
  t_svar<i>_load     key (meta.state) -> load_<counter>_<fn>(index): the aggregate into meta
  t_svar<i>          key (meta.state, svar: range) -> set_state(next)
  t_leaf             key (meta.state: exact) -> set_mgid(g) | set_port(p) | drop_msg()
                     (| call(1): query_default_action's custom actions; the table's default
                     action is the spec's query_default_action, where it has one)
  t_leaf_calls       key (meta.state: exact) -> call(id): custom actions, listed in calls.json
                     | answer_dns(id, addr): a DNS name's leaf that answerDNS(addr) answers (p4_dns)
                     | ila_rewrite(id, locator): an IPv6 leaf that ila(L::) rewrites (p4_ila)

Egress port filters (`P4Schema.egress`, in the egress control; meta.pf_state carries the state):
a delivered copy to a port with a filter walks that port's own rules (structure/port_filters.py)
  t_pf_port          key (egress_port: exact) -> set_pf_state(root): the port has a filter
  t_pf_<field>_exact, t_pf_<field>, t_pf_<field>_any
                     as the ingress field tables, keyed (meta.pf_state, <field>) -> set_pf_state;
                     for each header field egress parses (a domain field by its raw value)
  t_pf_accept        key (meta.pf_state: exact) -> pf_keep: a miss drops the copy
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field, replace

from ...codec.attrs import ATTRS_FRAMINGS
from ...language.spec import MatchKind, QueryField, Role, Spec
from ...ir.pipeline import ident
from ...structure.port_filters import EGRESS_PORT_BITS, egress_readable
from ..emit import BackendError
from .layout import dns_topic, ip_route, layout_of
from .ila import ila_rewrites
from .topics import variable_expr

STATE_KEY_BITS = 32      # meta.state in the switch program
UPDATE_SLOTS = 4         # state variables one message may update (t_update0..3)
SVAR_STAGES = 4          # state-variable tests one message may pass through (t_svar0..3)
SVAR_KEY = "svar"        # the loaded aggregate, the key of the t_svar<i> tables
SVAR_BITS = 64
EXACT_SUFFIX = "_exact"   # t_<field>_exact: a range field's single-value tests, matched exactly (SRAM)
ATTRS_META = "camus_attrs"   # metadata member with the attributes of a 0x9001 frame (p4_attrs)
ARCHS = ("v1model", "tna")


@dataclass(frozen=True)
class P4Options:
    arch: str = "v1model"
    table_size: int = 65536        # `size` of each field table (the budget decides what fits)
    state_bits: int = STATE_KEY_BITS   # meta.state and set_state's parameter: a narrower id packs
                                   # more exact entries to a RAM word (16 bits: 3 (state, code)
                                   # entries a word, not 1); the rule set's ids must fit
    leaf_size: int = 65536
    tna_max_rest: int = 15         # TNA: messages after the first that egress can prune (parsed)
    # each table's `size` where the entries are known (table_sizes): a Tofino compiler reserves
    # memory for the declared size, so the program declares what its entries need; () = defaults
    sizes: tuple[tuple[str, int], ...] = ()
    port_filters: bool = True      # declare the egress port filters' tables (a program for entries
                                   # without filters leaves them out: each table reserves memory)
    skip_bytes: int = 1472         # v1model: the most bytes a message carries past its header (a
                                   # payload) or a message of another length has: a UDP datagram's


@dataclass(frozen=True)
class KeyDecl:
    name: str          # P4Runtime name (@name): "meta.state", "add_order.price", "svar"
    expr: str          # the P4 expression matched: "meta.camus.state", "hdr.add_order.price"
    bits: int
    match: str         # exact | range | lpm


@dataclass(frozen=True)
class ActionDecl:
    name: str
    params: tuple[tuple[str, int], ...] = ()      # (name, bits)
    egress: bool = False                          # declared in the egress control


@dataclass(frozen=True)
class TableDecl:
    name: str
    keys: tuple[KeyDecl, ...]
    actions: tuple[str, ...]
    size: int
    default: str = "NoAction();"                  # the P4 default_action, with a comment if any
    fallback: str | None = None                   # applied when this table misses (t_<field>_any)


@dataclass(frozen=True)
class CodeDecl:
    """A lower-resolution domain (query_field_domain): the code table's action and the metadata
    key it writes, which the field's table matches."""
    field: str          # the query field's path
    action: str         # set_<field>_code
    key: KeyDecl        # meta.<field>_code: exact


CODE_SUFFIX = "_code"


def code_decl(q: QueryField) -> CodeDecl:
    name = ident(q.path)
    return CodeDecl(q.path, f"set_{name}{CODE_SUFFIX}",
                    KeyDecl(f"meta.{name}{CODE_SUFFIX}", f"meta.camus.{name}{CODE_SUFFIX}", q.domain_bits, "exact"))


@dataclass(frozen=True)
class P4Schema:
    arch: str
    tables: tuple[TableDecl, ...]                 # in pipeline order
    actions: dict[str, ActionDecl] = field(default_factory=dict)
    codes: dict[str, "CodeDecl"] = field(default_factory=dict)   # t_<f>_code -> what it sets
    state_bits: int = STATE_KEY_BITS
    egress: tuple[TableDecl, ...] = ()            # the port filters, in egress order
    sized: bool = False                           # sizes follow the entries (P4Options.sizes)
    # tables the program's template declares itself (the route table for other traffic): not
    # written here, but a Tofino compiler reserves their declared size too (route_table)
    fixed: tuple[TableDecl, ...] = ()

    def table(self, name: str) -> TableDecl | None:
        return next((t for t in self.tables + self.egress if t.name == name), None)

    def egress_order(self) -> list[TableDecl]:
        """Egress tables applied in sequence after t_pf_port (fallbacks by their owners)."""
        fallbacks = {t.fallback for t in self.egress if t.fallback}
        return [t for t in self.egress if t.name != PF_PORT and t.name not in fallbacks]

    def apply_order(self) -> list[TableDecl]:
        """Tables applied in sequence (a fallback is applied by its owner, on a miss)."""
        fallbacks = {t.fallback for t in self.tables if t.fallback}
        return [t for t in self.tables if t.name != "t_root" and t.name not in fallbacks]

    def guards(self) -> dict[str, str]:
        """Table -> the table whose miss it runs on (t_<f> after t_<f>_exact, t_<f>_any after t_<f>)."""
        return {t.fallback: t.name for t in self.tables + self.egress if t.fallback}

    def key_widths(self) -> dict[str, int]:
        widths = {k.name: k.bits for t in self.tables + self.egress for k in t.keys}
        widths.update({c.key.name: c.key.bits for c in self.codes.values()})
        return widths


# intrinsic metadata instance -> the architecture whose ingress control receives it
METADATA_ARCH = {"standard_metadata": "v1model", "ig_intr_md": "tna"}


def spec_arch(spec: Spec) -> str | None:
    """The architecture a spec was written for, when its query fields read one's intrinsic
    metadata (ig_intr_md: Tofino's tna; standard_metadata: v1model); None when they read none."""
    found = {METADATA_ARCH[q.instance] for q in spec.query_fields
             if q.role is Role.METADATA and q.instance in METADATA_ARCH}
    return found.pop() if len(found) == 1 else None


def check_metadata_arch(spec: Spec, arch: str) -> None:
    """A query field of one architecture's intrinsic metadata does not exist on the other."""
    for q in spec.query_fields:
        if q.role is Role.METADATA and METADATA_ARCH.get(q.instance, arch) != arch:
            raise BackendError(f"{q.path} is {METADATA_ARCH[q.instance]} metadata; the P4 program is for "
                               f"{arch} (--arch {METADATA_ARCH[q.instance]})")


def is_attrs(spec: Spec) -> bool:
    """Attribute frames (EtherType 0x9001): the program reads them into metadata (p4_attrs)."""
    return spec.framing.kind in ATTRS_FRAMINGS


def field_expr(q: QueryField, spec: Spec | None = None) -> str:
    """The P4 expression of a query field: a header field under `hdr`, the architecture's
    intrinsic metadata (the ingress control receives it as a parameter of that name), a topic
    variable or an attribute the parser left in metadata."""
    if q.role is Role.METADATA:
        return f"{q.instance}.{q.name}"
    if spec is not None and is_attrs(spec) and spec.message_instance is not None \
            and q.instance == spec.message_instance.name:
        return f"meta.{ATTRS_META}.{q.name}"
    if q.topic:                  # a topic's depth, sys flag or level: what the parser loop leaves
        return variable_expr(q)
    if q.whole:                  # a word of a field wider than 64 bits: a slice of the field
        return _word_slice(q, q.whole.rpartition(".")[2])
    return f"hdr.{q.instance}.{q.name}"


def _word_slice(q: QueryField, name: str) -> str:
    """hdr.ipv6.dst[127:64] for ipv6.dst/hi, [63:0] for ipv6.dst/lo (P4 numbers bits from the right)."""
    low = 0 if q.part == "lo" else 64
    return f"hdr.{q.instance}.{name}[{low + q.width - 1}:{low}]"


def key_kind(q: QueryField) -> str:
    """The key kind the static P4 program declares for a query field: its pragma decides, so one
    program serves every rule set. query_field / query_field_range -> range (which also holds
    exact values as [v, v] and string prefixes); exact -> exact; lpm -> lpm."""
    return {MatchKind.EXACT: "exact", MatchKind.LPM: "lpm"}.get(q.kind, "range")


def window_shift(window_us: int) -> int | None:
    """The switch numbers windows with a shift (no division in a match-action pipeline):
    log2 of the window when it is a power of two microseconds, else None."""
    return window_us.bit_length() - 1 if window_us > 0 and window_us & (window_us - 1) == 0 else None


def update_action(counter: str, field_path: str) -> str:
    """The action a message's guard calls to count it in `counter`; every(n) (no field: "")
    has its own, which keeps the count modulo n (no division on the switch: a compare)."""
    return f"update_{counter}_{ident(field_path)}" if field_path else f"update_{counter}_every"


def load_action(counter: str, fn: str) -> str:
    """The action that loads a state function's value; every(n) reads its wrapped count."""
    return f"load_{counter}_{'count' if fn == 'every' else fn}"


def window_counters(spec: Spec, arch: str) -> list[Any]:
    """The query_counters the switch program keeps registers for (v1model): power-of-two
    windows (numbered with a shift) and endless counts (window 0: every(n)'s usual counter)."""
    if arch != "v1model":
        return []
    return [c for c in spec.counters if c.window_us == 0 or window_shift(c.window_us) is not None]


def updatable_fields(spec: Spec) -> list[QueryField]:
    return [q for q in spec.query_fields if q.width <= 64]


def counted_paths(spec: Spec) -> list[str]:
    """What a counter's update actions add up: each updatable field, then "" (every(n))."""
    return [q.path for q in updatable_fields(spec)] + [""]


STATE = KeyDecl("meta.state", "meta.camus.state", STATE_KEY_BITS, "exact")
BASE_ACTIONS = (ActionDecl("set_state", (("next", 32),)), ActionDecl("set_mgid", (("mgid", 16),)),
                ActionDecl("set_port", (("port", 9),)), ActionDecl("drop_msg"),
                ActionDecl("call", (("call_id", 16),)), ActionDecl("NoAction"))


# A leaf answering DNS queries: its call id (the host answers what the switch cannot) and the address.
ANSWER_DNS = ActionDecl("answer_dns", (("call_id", 16), ("addr", 32)))
# A leaf rewriting an ILA address: its call id and the locator (the IPv6 destination's top 64 bits).
ILA_REWRITE = ActionDecl("ila_rewrite", (("call_id", 16), ("locator", 64)))
CALL_ACTIONS = ("call", ANSWER_DNS.name, ILA_REWRITE.name)   # first parameter: a call id (calls.json)


def action_params(action: str) -> tuple[str, ...]:
    """Parameter names of an action the entries may name (window actions take a register index)."""
    base = {a.name: a for a in (*BASE_ACTIONS, ANSWER_DNS, ILA_REWRITE)}.get(action)
    if base is not None:
        return tuple(p for p, _ in base.params)
    if action.startswith("update_") and action.endswith("_every"):
        return ("index", "modulus")
    if action.startswith(("update_", "load_")):
        return ("index",)
    if action == "set_code" or action.endswith(CODE_SUFFIX) and action.startswith("set_"):
        return ("code",)
    if action == PF_SET:
        return ("next",)
    return ()


DEFAULT_CALL_ID = 1     # the call id of query_default_action's custom actions (calls.json)


def leaf_default(spec: Spec) -> str:
    """t_leaf's default_action in the program: the spec's query_default_action where the spec
    alone decides it (a custom action list is call id 1, one port, drop); a multicast group's
    id depends on the rule set, so that default is written with the entries only."""
    atoms = spec.default_atoms
    ports = [a[1] for a in atoms if a[0] == "fwd"]
    note = f"   // query_default_action({spec.default_action})"
    if not atoms:
        return "NoAction();   // no subscriber: not delivered"
    if any(a[0] == "call" for a in atoms):
        return f"call({DEFAULT_CALL_ID});{note}"
    if len(ports) == 1 and isinstance(ports[0], int):
        return f"set_port({ports[0]});{note}"
    if ("drop",) in atoms:
        return f"drop_msg();{note}"
    return f"NoAction();{note}: its multicast group is set with the entries"


MIN_STATE_BITS = 8


def meta_slots(schema: P4Schema) -> dict[str, str]:
    """The templates' camus_meta_t slots: the state id's width (STATE_BITS) and the members the
    code tables write (CODE_MEMBERS)."""
    return {"STATE_BITS": str(schema.state_bits),
            "CODE_MEMBERS": "".join(f"\n    bit<{c.key.bits}> {c.key.expr.rpartition('.')[2]};   // {c.field} as a "
                                    f"code (query_field_domain)" for c in schema.codes.values()),
            "FILTER_MEMBERS": f"\n    bit<{schema.state_bits}> pf_state;   // egress: the port filter's state"
                              if schema.egress else ""}


def state_key(bits: int) -> KeyDecl:
    return KeyDecl(STATE.name, STATE.expr, bits, "exact")


PF_PREFIX = "t_pf_"           # egress port filter tables
PF_PORT = "t_pf_port"
PF_ACCEPT = "t_pf_accept"
PF_STATE = "meta.pf_state"
PF_SET = "set_pf_state"
PF_KEEP = "pf_keep"
EGRESS_PORT = {"v1model": "standard_metadata.egress_port", "tna": "eg_intr_md.egress_port"}


def port_filter_fields(spec: Spec) -> list[QueryField]:
    """The query fields the egress port filters can test (none: the program has no filter tables)."""
    readable = egress_readable(spec)
    return [q for q in spec.query_fields if q.path in readable]


def _egress_tables(spec: Spec, opts: P4Options, actions: dict[str, ActionDecl]) -> tuple[TableDecl, ...]:
    fields = port_filter_fields(spec)
    if not fields or not opts.port_filters:
        return ()
    state = KeyDecl(PF_STATE, "meta.camus.pf_state", opts.state_bits, "exact")
    actions[PF_SET] = ActionDecl(PF_SET, (("next", opts.state_bits),), egress=True)
    actions[PF_KEEP] = ActionDecl(PF_KEEP, egress=True)
    keep = "NoAction();   // a state this table does not test passes through"
    tables = [TableDecl(PF_PORT, (KeyDecl("egress_port", EGRESS_PORT[opts.arch], EGRESS_PORT_BITS, "exact"),),
                        (PF_SET, "NoAction"), 1 << EGRESS_PORT_BITS, "NoAction();   // no filter: the copy is kept")]
    for q in fields:
        kind = key_kind(q)
        base = f"{PF_PREFIX}{ident(q.path)}"
        any_name = f"{base}_any" if kind != "lpm" else None
        key = KeyDecl(q.path, field_expr(q, spec), q.width, kind)
        if kind == "range":
            tables.append(TableDecl(f"{base}{EXACT_SUFFIX}", (state, replace(key, match="exact")), (PF_SET, "NoAction"),
                                    opts.table_size, "NoAction();   // not one of the values this state tests", base))
        tables.append(TableDecl(base, (state, key), (PF_SET, "NoAction"), opts.table_size, keep, any_name))
        if any_name:
            tables.append(TableDecl(any_name, (state,), (PF_SET, "NoAction"), opts.table_size))
    tables.append(TableDecl(PF_ACCEPT, (state,), (PF_KEEP, "NoAction"), opts.table_size,
                            "NoAction();   // the port's rules do not select the message: dropped"))
    return tuple(tables)


def p4_schema(spec: Spec, opts: P4Options = P4Options()) -> P4Schema:
    if not MIN_STATE_BITS <= opts.state_bits <= STATE_KEY_BITS:
        raise BackendError(f"state ids of {opts.state_bits} bits: the program takes {MIN_STATE_BITS}..{STATE_KEY_BITS}")
    state = state_key(opts.state_bits)
    actions = {a.name: a for a in BASE_ACTIONS}
    actions["set_state"] = ActionDecl("set_state", (("next", opts.state_bits),))
    tables = [TableDecl("t_root", (), ("set_state",), 1,
                        "set_state(0);   // replaced with the rule set's root state")]
    codes: dict[str, CodeDecl] = {}
    for q in spec.query_fields:
        kind = key_kind(q)
        base = f"t_{ident(q.path)}"
        any_name = f"{base}_any" if kind != "lpm" else None
        if q.domain_bits:          # value -> code for all states (TCAM), then (state, code) in SRAM
            code = codes[base + CODE_SUFFIX] = code_decl(q)
            actions[code.action] = ActionDecl(code.action, (("code", q.domain_bits),))
            # before every field table, while meta.state is still the root
            tables.insert(1, TableDecl(base + CODE_SUFFIX, (state, KeyDecl(q.path, field_expr(q, spec), q.width, "range")),
                                       (code.action,), opts.table_size,
                                       f"{code.action}(0);   // below the lowest boundary (Tofino's metadata starts undefined)"))
            tables.append(TableDecl(base, (state, code.key), ("set_state", "NoAction"), opts.table_size,
                                    "NoAction();   // a state this table does not test passes through", any_name))
            tables.append(TableDecl(f"{any_name}", (state,), ("set_state", "NoAction"), opts.table_size))
            continue
        if kind == "range":        # equalities first, in SRAM: Camus's "exact instead of range where possible"
            tables.append(TableDecl(f"{base}{EXACT_SUFFIX}", (state, KeyDecl(q.path, field_expr(q, spec), q.width,
                                                                             "exact")),
                                    ("set_state", "NoAction"), opts.table_size,
                                    "NoAction();   // not one of the values this state tests for equality", base))
        tables.append(TableDecl(base, (state, KeyDecl(q.path, field_expr(q, spec), q.width, kind)),
                                ("set_state", "NoAction"), opts.table_size,
                                "NoAction();   // a state this table does not test passes through", any_name))
        if any_name:
            tables.append(TableDecl(any_name, (state,), ("set_state", "NoAction"), opts.table_size))
    counters = window_counters(spec, opts.arch)
    if counters:
        updates = [update_action(c.name, path) for c in counters for path in counted_paths(spec)]
        loads = [load_action(c.name, fn) for c in counters for fn in ("count", "sum")]
        for c in counters:                         # P4Info lists them counter by counter
            for name in [update_action(c.name, path) for path in counted_paths(spec)] + \
                    [load_action(c.name, fn) for fn in ("count", "sum")]:
                actions[name] = ActionDecl(name, (("index", 32), ("modulus", 64)) if name.endswith("_every")
                                           else (("index", 32),))
        for k in range(UPDATE_SLOTS):
            tables.append(TableDecl(f"t_update{k}", (state,), (*updates, "NoAction"), opts.table_size))
        svar = KeyDecl(SVAR_KEY, f"meta.camus.{SVAR_KEY}", SVAR_BITS, "range")
        for i in range(SVAR_STAGES):
            tables.append(TableDecl(f"t_svar{i}_load", (state,), (*loads, "NoAction"), opts.table_size))
            tables.append(TableDecl(f"t_svar{i}", (state, svar), ("set_state", "NoAction"), opts.table_size))
    leaf_actions: tuple[str, ...] = ("set_mgid", "set_port", "drop_msg", "NoAction")
    if any(a[0] == "call" for a in spec.default_atoms):
        leaf_actions = (*leaf_actions[:-1], "call", "NoAction")
    tables.append(TableDecl("t_leaf", (state,), leaf_actions, opts.leaf_size, leaf_default(spec)))
    call_actions: tuple[str, ...] = ("call", "NoAction")
    if dns_topic(spec) is not None:                                 # answerDNS(a.b.c.d): p4_dns
        actions[ANSWER_DNS.name] = ANSWER_DNS
        call_actions = ("call", ANSWER_DNS.name, "NoAction")
    elif ila_rewrites(spec):                                        # ila(L::): p4_ila
        actions[ILA_REWRITE.name] = ILA_REWRITE
        call_actions = ("call", ILA_REWRITE.name, "NoAction")
    tables.append(TableDecl("t_leaf_calls", (state,), call_actions, opts.leaf_size))
    egress = _egress_tables(spec, opts, actions)
    if opts.sizes:
        sized = dict(opts.sizes)
        tables = [replace(t, size=sized.get(t.name, t.size)) for t in tables]
        egress = tuple(replace(t, size=sized.get(t.name, t.size)) for t in egress)
    return P4Schema(opts.arch, tuple(tables), actions, codes, opts.state_bits, egress, bool(opts.sizes))


ROUTE_SIZE = 1024              # p4/v1model.p4, p4/tna.p4: the route table's `size`
ROUTE_ACTION = "route_forward"   # its forwarding action's parameters: a MAC and a port
ROUTE_ACTION_PARAMS = (("dst_mac", 48), ("port", 9))


def with_route_table(schema: P4Schema, spec: Spec) -> P4Schema:
    """The schema with the whole program's route table (`<ipv4|ipv6>_lpm` on the feed's IP
    destination, `size` 1024, the template's own) among the tables it costs; the attribute-frame
    program (p4/v1model_attrs.p4) routes nothing."""
    if is_attrs(spec):
        return schema
    l3, dst, bits = ip_route(layout_of(spec, schema.arch))
    name = "ipv4_lpm" if schema.arch == "tna" else f"{l3}_lpm"
    route = TableDecl(name, (KeyDecl(f"hdr.{dst}", f"hdr.{dst}", bits, "lpm"),), (ROUTE_ACTION, "NoAction"), ROUTE_SIZE)
    actions = {**schema.actions, ROUTE_ACTION: ActionDecl(ROUTE_ACTION, ROUTE_ACTION_PARAMS)}
    return replace(schema, fixed=(route,), actions=actions)
