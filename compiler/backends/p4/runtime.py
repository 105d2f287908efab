"""P4Runtime for the switch program, with the official protobufs (PyPI `p4runtime`).

- `p4info_message`: the program's P4Info (p4.config.v1.P4Info) as p4c's --p4runtime-files
  describes it: fully qualified names (`CamusIngress.t_root`; TNA: `pipe.CamusIngress.t_root`),
  ids made like p4c's (the object kind in the top byte, a hash of the name below it), match
  fields with bitwidths and match types, actions with their parameters, registers, counters.
- `updates`: entries, default actions and multicast groups as p4.v1 Updates; values are
  canonical bytestrings, don't-care matches are omitted, priorities are P4Runtime's (higher wins).
- `tables_from_entities`: the way back, checked against a P4Info as a switch checks a Write
  (unknown ids, wrong match kinds, values wider than their field are refused with the reason).

Ids are never assumed: everything converts through a `Names` view of whichever P4Info the
switch holds, resolving our short names (`t_root`, `set_state`) by alias or name suffix, so
entries written through it work with the ids p4c chose.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

# (camus/__init__.py has chosen protobuf's runtime: the compiled one once setup regenerated these)
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ...language.spec import Spec
from ..emit import BackendError
from .delta import Change
from .entries import Match, P4Entry, P4Tables, schema_tables
from .attrs import ethernet_of
from .framing import PRUNE_TABLE, prune_table_keys
from .layout import ip_route, layout_of
from .schema import P4Options, is_attrs, p4_schema, window_counters

Msg = Any            # a protobuf message (the generated modules have no type information)
# Import the protobuf modules from here (camus/__init__.py chose the runtime before their first import).
__all__ = ["p4info_pb2", "p4runtime_pb2", "p4runtime_pb2_grpc", "text_format"]
INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE
MATCH_TYPES = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM,
               "ternary": p4info_pb2.MatchField.TERNARY, "range": p4info_pb2.MatchField.RANGE}
MATCH_NAMES = {v: k for k, v in MATCH_TYPES.items()}


def control_prefix(arch: str) -> str:
    """Where p4c puts the ingress control's objects in the names it gives them."""
    return "pipe.CamusIngress" if arch == "tna" else "CamusIngress"


def object_id(kind: int, name: str, taken: set[int]) -> int:
    """p4c's id for a P4Info object: the kind in the top byte, Jenkins' one-at-a-time hash of the
    name in the low 24 bits, the next free id on a collision."""
    h = 0
    for c in name.encode():
        h = (h + c) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    low = h & 0xFFFFFF
    while (kind << 24 | low) in taken:
        low = (low + 1) & 0xFFFFFF
    taken.add(kind << 24 | low)
    return kind << 24 | low


def p4info_message(spec: Spec, opts: P4Options = P4Options(), whole_program: bool = True) -> Msg:
    """The switch program's P4Info. `whole_program` adds what only the whole program has (the
    plain-IPv4 table beside the subscription tables)."""
    schema = p4_schema(spec, opts)
    prefix = control_prefix(opts.arch)
    info = p4info_pb2.P4Info()
    info.pkg_info.name = f"camus_{spec.name}"
    info.pkg_info.arch = opts.arch
    taken: set[int] = set()
    action_ids: dict[str, int] = {}

    def action(name: str, params: Iterable[tuple[str, int]], control: str = prefix) -> None:
        full = name if name == "NoAction" else f"{control}.{name}"
        a = info.actions.add()
        a.preamble.id = action_ids[name] = object_id(p4info_pb2.P4Ids.ACTION, full, taken)
        a.preamble.name, a.preamble.alias = full, name
        for i, (pname, bits) in enumerate(params, start=1):
            a.params.add(id=i, name=pname, bitwidth=bits)

    egress = prefix.replace("CamusIngress", "CamusEgress")
    for decl in schema.actions.values():
        action(decl.name, decl.params, egress if decl.egress else prefix)
    # (control, name, keys, actions, size, const)
    tables = [(prefix, t.name, [(k.name, k.bits, k.match) for k in t.keys], t.actions, t.size, False)
              for t in schema.tables]
    tables += [(egress, t.name, [(k.name, k.bits, k.match) for k in t.keys], t.actions, t.size, False)
               for t in schema.egress]
    if whole_program and is_attrs(spec):      # attribute frames: other frames go by MAC (p4_attrs)
        eth, dst, _ = ethernet_of(spec)
        action("l2_forward", (("port", 9),))
        action("plain_drop", ())
        tables.insert(0, (prefix, "l2_fwd", [(f"hdr.{eth}.{dst}", 48, "exact")],
                          ("l2_forward", "plain_drop", "NoAction"), 1024, False))
    elif whole_program:
        lay = layout_of(spec, opts.arch)
        l3, dst, bits = ip_route(lay)
        route, forward = f"{l3}_lpm", f"{l3}_forward"
        action(forward, (("dst_mac", 48), ("port", 9)))
        action("plain_drop", ())
        tables.insert(0, (prefix, route, [(f"hdr.{lay.ip.name}.{dst}", bits, "lpm")],
                          (forward, "plain_drop", "NoAction"), 1024, False))
        if opts.arch == "tna" and lay.framing is not None:       # egress's pruning table: constant entries
            action("camus_prune", (("cut", 16),), egress)
            action("camus_unprunable", (), egress)
            tables.append((egress, PRUNE_TABLE, prune_table_keys(spec, lay), ("camus_prune", "camus_unprunable"),
                           opts.tna_max_rest + 1, True))
    for control, name, keys, actions, size, const in tables:
        t = info.tables.add()
        full = f"{control}.{name}"
        t.preamble.id = object_id(p4info_pb2.P4Ids.TABLE, full, taken)
        t.preamble.name, t.preamble.alias = full, name
        for i, (kname, bits, match) in enumerate(keys, start=1):
            t.match_fields.add(id=i, name=kname, bitwidth=bits, match_type=MATCH_TYPES[match])
        for a in actions:
            t.action_refs.add(id=action_ids[a])
        t.size = size
        t.is_const_table = const
    for c in window_counters(spec, opts.arch):        # the v1model window registers
        for part, bits in (("window", 32), ("count", 64), ("sum", 64)):
            r = info.registers.add()
            full = f"{prefix}.r_{c.name}_{part}"
            r.preamble.id = object_id(p4info_pb2.P4Ids.REGISTER, full, taken)
            r.preamble.name, r.preamble.alias = full, f"r_{c.name}_{part}"
            r.type_spec.bitstring.bit.bitwidth = bits
            r.size = c.size
    for full, size in program_counters(opts.arch, whole_program):
        ctr = info.counters.add()
        ctr.preamble.id = object_id(p4info_pb2.P4Ids.COUNTER, full, taken)
        ctr.preamble.name, ctr.preamble.alias = full, full.rsplit(".", 1)[1]
        ctr.spec.unit = p4info_pb2.CounterSpec.PACKETS
        ctr.size = size
    return info


PORT_CELLS = 512            # the templates' CAMUS_PORT_CELLS: a cell per 9-bit port number


def program_counters(arch: str, whole_program: bool = True) -> list[tuple[str, int]]:
    """The whole program's packet counters (name as p4c gives it, cells): v1model counts the
    delivered copies per egress port; TNA counts batches too long for egress to prune."""
    if not whole_program:
        return []
    if arch == "tna":
        return [(f"{control_prefix(arch)}.camus_oversize", 1)]
    return [("CamusEgress.camus_delivered", PORT_CELLS)]


# -- names and ids --------------------------------------------------------------------------

@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str                                     # our short name: t_root
    keys: tuple[tuple[int, str, int, str], ...]   # (field id, name, bitwidth, match kind)
    actions: frozenset[int]


class Names:
    """A P4Info seen by our short names (alias or last component of the name): tables, actions,
    parameters; and the other way round, from ids to names, for what a switch reads back."""

    def __init__(self, info: Msg) -> None:
        self.info = info
        self.tables: dict[str, TableInfo] = {}
        self.table_by_id: dict[int, TableInfo] = {}
        self.actions: dict[str, tuple[int, tuple[tuple[int, str, int], ...]]] = {}
        self.action_by_id: dict[int, tuple[str, tuple[tuple[int, str, int], ...]]] = {}
        for t in info.tables:
            short = self.short(t.preamble)
            keys = tuple((m.id, m.name, m.bitwidth, MATCH_NAMES.get(m.match_type, "?")) for m in t.match_fields)
            ti = TableInfo(t.preamble.id, short, keys, frozenset(r.id for r in t.action_refs))
            self.tables[short] = self.table_by_id[ti.id] = ti
        for a in info.actions:
            params = tuple((p.id, p.name, p.bitwidth) for p in a.params)
            self.actions[self.short(a.preamble)] = (a.preamble.id, params)
            self.action_by_id[a.preamble.id] = (self.short(a.preamble), params)
        self.counters: dict[str, tuple[int, int]] = {self.short(c.preamble): (c.preamble.id, c.size)
                                                     for c in info.counters}     # name -> (id, cells)

    @staticmethod
    def short(preamble: Msg) -> str:
        return str(preamble.alias or preamble.name).rsplit(".", 1)[-1]

    def table(self, name: str) -> TableInfo:
        t = self.tables.get(name)
        if t is None:
            raise BackendError(f"the switch's P4Info has no table {name!r} (is the camus program loaded?)")
        return t

    def action(self, name: str) -> tuple[int, tuple[tuple[int, str, int], ...]]:
        a = self.actions.get(name)
        if a is None:
            raise BackendError(f"the switch's P4Info has no action {name!r}")
        return a


def encode(value: int, bits: int) -> bytes:
    """A P4Runtime canonical bytestring: big-endian, no leading zero bytes (zero is one byte)."""
    if not 0 <= value < (1 << bits):
        raise BackendError(f"{value} does not fit {bits} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes, bits: int, what: str) -> int:
    v = int.from_bytes(data, "big")
    if not data or v >= (1 << bits) or len(data) > max(1, (bits + 7) // 8):
        raise BackendError(f"{what}: {data.hex() or 'empty'} is not a value of {bits} bits")
    return v


# -- entries as Updates ---------------------------------------------------------------------

def table_entry(names: Names, e: P4Entry, te: Msg | None = None) -> Msg:
    """The entry as a TableEntry; filled into `te` when given (an Update's own: no copy)."""
    t = names.table(e.table)
    if te is None:
        te = p4runtime_pb2.TableEntry()
    te.table_id, te.priority = t.id, e.priority
    by_field = {m.field: m for m in e.matches}
    for fid, fname, bits, kind in t.keys:
        m = by_field.get(fname)
        if m is None:
            raise BackendError(f"{e.table}: the entry has no value for key {fname}")
        top = (1 << bits) - 1
        if kind == "exact":
            te.match.add(field_id=fid).exact.value = encode(m.value, bits)
        elif kind == "range":
            if not (m.value == 0 and m.arg == top):        # the whole range is a don't care: omitted
                fm = te.match.add(field_id=fid)
                lo, hi = (m.value, m.value) if m.kind == "exact" else (m.value, m.arg)
                fm.range.low, fm.range.high = encode(lo, bits), encode(hi, bits)
        elif kind == "lpm":
            if m.arg > 0:                                  # prefix length 0 is a don't care: omitted
                fm = te.match.add(field_id=fid)
                mask = top ^ ((1 << (bits - m.arg)) - 1)
                fm.lpm.value, fm.lpm.prefix_len = encode(m.value & mask, bits), m.arg
        elif kind == "ternary":
            if m.arg & top:
                fm = te.match.add(field_id=fid)
                fm.ternary.value, fm.ternary.mask = encode(m.value & m.arg, bits), encode(m.arg & top, bits)
        else:
            raise BackendError(f"{e.table}: key {fname} has match kind {kind}, which camus does not write")
    _fill_action(te.action.action, names, e.table, e.action, e.params)
    return te


def action_message(names: Names, table: str, action: str, params: tuple[Any, ...]) -> Msg:
    return _fill_action(p4runtime_pb2.Action(), names, table, action, params)


def _fill_action(a: Msg, names: Names, table: str, action: str, params: tuple[Any, ...]) -> Msg:
    aid, decl = names.action(action)
    if aid not in names.table(table).actions:
        raise BackendError(f"{table} has no action {action} in the switch's P4Info")
    if len(params) != len(decl):
        raise BackendError(f"{action} takes {len(decl)} parameter(s), got {len(params)}")
    a.action_id = aid
    for (pid, pname, bits), v in zip(decl, params):
        a.params.add(param_id=pid, value=encode(int(v), bits))
    return a


def default_entry(names: Names, table: str, action: str, params: tuple[Any, ...]) -> Msg:
    te = p4runtime_pb2.TableEntry(table_id=names.table(table).id, is_default_action=True)
    te.action.action.CopyFrom(action_message(names, table, action, params))
    return te


def group_entry(gid: int, ports: Iterable[int], pre: Msg | None = None) -> Msg:
    """A multicast group as a PacketReplicationEngineEntry; filled into `pre` when given."""
    if pre is None:
        pre = p4runtime_pb2.PacketReplicationEngineEntry()
    g = pre.multicast_group_entry
    g.multicast_group_id = gid
    add = g.replicas.add
    for p in ports:
        add(egress_port=int(p), instance=1)
    return pre


def update(kind: int, entity: Msg) -> Msg:
    u = p4runtime_pb2.Update(type=kind)
    if isinstance(entity, p4runtime_pb2.TableEntry):
        u.entity.table_entry.CopyFrom(entity)
    else:
        u.entity.packet_replication_engine_entry.CopyFrom(entity)
    return u


def updates(names: Names, tables: P4Tables) -> list[Msg]:
    """A whole table set for an empty switch, make-before-break: groups, entries, the defaults,
    the root state last (until then no message reaches the new entries)."""
    out = [update(INSERT, group_entry(g, ps)) for g, ps in sorted(tables.groups.items())]
    out += [update(INSERT, table_entry(names, e)) for e in tables.entries]
    out += [update(MODIFY, default_entry(names, t, a, v)) for t, (a, v) in sorted(tables.defaults.items())]
    out.append(update(MODIFY, default_entry(names, "t_root", "set_state", (tables.root,))))
    return out


def change_update(names: Names, c: Change) -> Msg:
    """One step of a delta plan (p4_delta) as a P4Runtime Update."""
    kind = {"insert": INSERT, "modify": MODIFY, "delete": DELETE}[c.op]
    if c.what == "default":
        return update(MODIFY, default_entry(names, c.table, c.action, c.params))
    u = p4runtime_pb2.Update(type=kind)          # filled in place: a first load builds 20K+ of them
    if c.what == "group":
        group_entry(c.group, c.ports, u.entity.packet_replication_engine_entry)
    else:
        assert c.entry is not None
        table_entry(names, c.entry, u.entity.table_entry)
    return u


def write_request(updates_: list[Msg], device_id: int = 1, election_low: int = 1) -> Msg:
    req = p4runtime_pb2.WriteRequest(device_id=device_id)
    req.election_id.low = election_low
    req.updates.extend(updates_)
    return req


def text(message: Msg) -> str:
    """Protobuf text format. str() is the runtime's own printer (upb's is in C, 12x faster than
    text_format's Python, byte for byte the same text)."""
    return str(message)


# -- the way back: what a switch holds, as our tables ---------------------------------------

def entry_from_message(names: Names, te: Msg) -> P4Entry | tuple[str, str, tuple[int, ...]]:
    """A TableEntry as a P4Entry, or (table, action, params) for a default action; refused
    with the reason when it does not agree with the P4Info."""
    t = names.table_by_id.get(te.table_id)
    if t is None:
        raise BackendError(f"table id {te.table_id:#x} is not in the P4Info")
    if te.action.WhichOneof("type") != "action":
        raise BackendError(f"{t.name}: only direct actions are supported")
    a = te.action.action
    got = names.action_by_id.get(a.action_id)
    if got is None or a.action_id not in t.actions:
        raise BackendError(f"{t.name}: action id {a.action_id:#x} is not one of the table's actions")
    aname, decl = got
    by_pid = {p.param_id: p.value for p in a.params}
    if sorted(by_pid) != sorted(pid for pid, _, _ in decl) or len(a.params) != len(decl):
        raise BackendError(f"{t.name}: {aname} takes parameters {[n for _, n, _ in decl]}")
    params = tuple(decode(by_pid[pid], bits, f"{aname}.{pname}") for pid, pname, bits in decl)
    if te.is_default_action:
        if len(te.match):
            raise BackendError(f"{t.name}: a default entry has no match")
        return (t.name, aname, params)
    given = {}
    for fm in te.match:
        key = next((k for k in t.keys if k[0] == fm.field_id), None)
        if key is None or fm.field_id in given:
            raise BackendError(f"{t.name}: match field id {fm.field_id} is not a key of the table (or repeated)")
        given[fm.field_id] = fm
    matches = []
    for fid, fname, bits, kind in t.keys:
        fm = given.get(fid)
        which = fm.WhichOneof("field_match_type") if fm is not None else None
        if fm is not None and which != kind:
            raise BackendError(f"{t.name}: a {which} match on the {kind} key {fname}")
        top = (1 << bits) - 1
        if kind == "exact":
            if fm is None:
                raise BackendError(f"{t.name}: the exact key {fname} needs a value")
            matches.append(Match(fname, "exact", decode(fm.exact.value, bits, fname)))
        elif kind == "range":
            lo, hi = (0, top) if fm is None else (decode(fm.range.low, bits, fname), decode(fm.range.high, bits, fname))
            if lo > hi or (lo == 0 and hi == top and fm is not None):
                raise BackendError(f"{t.name}: range {lo}..{hi} on {fname} (empty, or a don't care written out)")
            matches.append(Match(fname, "range", lo, hi))
        elif kind == "lpm":
            v, plen = (0, 0) if fm is None else (decode(fm.lpm.value, bits, fname), fm.lpm.prefix_len)
            if not 0 <= plen <= bits or (fm is not None and plen == 0) or v & ((1 << (bits - plen)) - 1):
                raise BackendError(f"{t.name}: lpm {v}/{plen} on the {bits}-bit key {fname}")
            matches.append(Match(fname, "lpm", v, plen))
        else:
            v, mask = (0, 0) if fm is None else (decode(fm.ternary.value, bits, fname),
                                                 decode(fm.ternary.mask, bits, fname))
            if v & ~mask or (fm is not None and mask == 0):
                raise BackendError(f"{t.name}: ternary {v:#x}&&&{mask:#x} on {fname}")
            matches.append(Match(fname, "ternary", v, mask))
    needs = any(k[3] in ("range", "ternary") for k in t.keys)
    if needs != (te.priority > 0):
        raise BackendError(f"{t.name}: {'a priority above 0 is required' if needs else 'no priority allowed'}")
    return P4Entry(t.name, tuple(matches), aname, params, te.priority)


def tables_from_entities(names: Names, spec: Spec, entities: Iterable[Msg]) -> P4Tables:
    """What a switch holds (table entries, default entries, multicast groups), as our tables;
    table order and key widths from the spec's program."""
    schema = p4_schema(spec)
    out = schema_tables(schema)
    for ent in entities:
        which = ent.WhichOneof("entity")
        if which == "packet_replication_engine_entry":
            g = ent.packet_replication_engine_entry.multicast_group_entry
            out.groups[g.multicast_group_id] = tuple(r.egress_port for r in g.replicas)
        elif which == "table_entry":
            got = entry_from_message(names, ent.table_entry)
            if isinstance(got, P4Entry):
                if got.table not in ("ipv4_lpm", "ipv6_lpm"):
                    out.entries.append(got)
            elif got[0] == "t_root":
                out.root = got[2][0]
            elif got[0] not in ("ipv4_lpm", "ipv6_lpm") and not (got[1] == "NoAction"):
                out.defaults[got[0]] = (got[1], got[2])
    return out
