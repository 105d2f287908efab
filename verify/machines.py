"""Tables as machines the checker walks: per field, the state's transition as a piecewise
function over the field's whole domain, read by the target's own match semantics; per final
state, the outcome. Two readers: the Pipeline IR (its documented execution model) and P4
entries (P4's: exact, then ranges by priority, then longest prefix; a guarded table runs on its
guard's miss; a miss runs the table's default action).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from camus.compiler.ir.pipeline import Pipeline
from camus.compiler.language.spec import Spec

from .rules import Outcome, TableDefect, Undecidable
from .state_rules import STATE_BITS, state_path

Piece = tuple[int, int, Any, str]          # lo, hi, next state, what decided it (for a path)


def pieces(points: dict[int, tuple[int, str]], ranges: list[tuple[int, int, int, int, str]],
            prefixes: list[tuple[int, int, int, str]], fallback: tuple[int, str], width: int) -> list[Piece]:
    """The transition over [0, 2^width - 1]: a point's entry, else the highest-priority range
    (lo, hi, priority, next), else the longest prefix (value, length, next), else `fallback`."""
    top = (1 << width) - 1
    bounds = {0}
    for v in points:
        bounds.update((v, v + 1))
    for lo, hi, *_ in ranges:
        bounds.update((lo, hi + 1))
    for value, plen, *_ in prefixes:
        free = width - plen
        lo = (value >> free) << free
        bounds.update((lo, lo + (1 << free)))
    cuts = sorted(b for b in bounds if b <= top)
    out: list[Piece] = []
    for i, lo in enumerate(cuts):
        hi = (cuts[i + 1] - 1) if i + 1 < len(cuts) else top
        if lo in points and lo == hi:
            nxt, what = points[lo]
        else:
            hits = [(prio, nxt, what) for rlo, rhi, prio, nxt, what in ranges if rlo <= lo and hi <= rhi]
            if len(hits) > 1 and sorted(h[0] for h in hits)[-1] == sorted(h[0] for h in hits)[-2]:
                raise TableDefect(f"two range entries of one state match [{lo}, {hi}] with the same priority: "
                                  "the switch's choice is undefined")
            if hits:
                _, nxt, what = max(hits)
            else:
                best = None
                for value, plen, nxt, what in prefixes:
                    free = width - plen
                    if (lo >> free) == (value >> free) and (best is None or plen > best[0]):
                        best = (plen, nxt, what)
                nxt, what = (best[1], best[2]) if best else fallback
        if out and out[-1][2] == nxt and out[-1][3] == what and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, nxt, what)
        else:
            out.append((lo, hi, nxt, what))
    return out


@dataclass
class Machine:
    """root, per level per state the piecewise transition (absent: passes through), outcomes.
    Level i is the field `paths[i]`: the order the tables apply in."""
    paths: list[str]
    widths: list[int]
    root: int
    steps: list[dict[int, list[Piece]]] = field(default_factory=list)
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    default: Outcome = Outcome()              # a final state with no outcome of its own
    # egress port filters: per filtered port, a machine over the same fields from the port's root
    # whose accepting states give that port (a copy ending elsewhere is dropped)
    filters: dict[Any, "Machine"] = field(default_factory=dict)
    # the outcomes say which rule counters a message adds to (the IR's leaves, a live unit's leaf
    # rules); False: counters are not compared
    counts: bool = False
    # state functions: levels from `aggregates_from` on test aggregates; the state a message is in
    # when it reaches that level decides which aggregates it adds to (`updates`). Past it a state
    # is (that state, the state now), so the outcome can say both.
    aggregates_from: int | None = None
    updates: dict[int, frozenset[str]] = field(default_factory=dict)
    # what the tables can say of an outcome, when less than the rules' actions (XDP: custom actions
    # are one flag): the rules' outcome is compared through it
    view: Callable[[Outcome], Outcome] | None = None
    entry: dict[int, int] = field(default_factory=dict)   # the state the aggregates' walk starts
                                                          # from (XDP: masked), when not the same

    def _split(self, state: Any) -> tuple[Any, Any]:
        return state if isinstance(state, tuple) else (state, self.entry.get(state, state))

    def step(self, level: int, state: Any) -> list[Piece]:
        if self.aggregates_from is not None and level >= self.aggregates_from:
            head, now = self._split(state)
            return [(lo, hi, (head, nxt), what) for lo, hi, nxt, what in self._step(level, now)]
        return self._step(level, state)

    def _step(self, level: int, state: int) -> list[Piece]:
        got = self.steps[level].get(state)
        return got if got is not None else [(0, (1 << self.widths[level]) - 1, state, "passes through")]

    def outcome(self, state: Any) -> Outcome:
        if self.aggregates_from is not None:
            head, now = self._split(state)
            o = self._outcome(now)
            return Outcome(o.ports, o.drop, o.calls, o.counted, self.updates.get(head, frozenset()))
        return self._outcome(state)

    def _outcome(self, state: int) -> Outcome:
        o = self.outcomes.get(state)
        if o is None:
            return self.default
        return o.or_default(self.default)     # a leaf that only counts: the default delivers


def _outcome(ports: Any, drop: bool, calls: Any, counted: Any = ()) -> Outcome:
    return Outcome(frozenset(ports), drop, frozenset((n, tuple(a)) for n, a in calls), frozenset(counted))


def ir_machine(spec: Spec, p: Pipeline) -> Machine:
    """The Pipeline IR by its execution model: per field table, a state it holds follows its
    entries (exact, ranges, longest prefix, `any`) and a value none matches goes to state 0; a
    state it does not hold passes through; a final state's leaf gives the outcome."""
    if p.bitvector is not None:
        raise Undecidable("the bit-vector stage is not modelled by the checker (compile with --strategy bdd)")
    tested = [t.field for t in p.tables if t.field is not None]
    order = list(dict.fromkeys(tested + [q.path for q in spec.query_fields]))     # the tables' order
    width_of = {q.path: q.width for q in spec.query_fields}
    ranks: dict[str, int] = {}
    aggregates = []
    for v in sorted(p.state_vars, key=lambda v: v.id):
        aggregates.append(state_path(v.counter, ranks.get(v.counter, 0), v.fn, _whole(spec, v.field), v.modulus))
        ranks[v.counter] = ranks.get(v.counter, 0) + 1
    by_id = {v.id: path for v, path in zip(sorted(p.state_vars, key=lambda v: v.id), aggregates)}
    width_of.update({path: STATE_BITS for path in aggregates})
    tables = []
    for t in p.tables:                            # an aggregate's table tests the level named for it
        if t.state_var is not None:
            if t.state_var not in by_id:
                raise TableDefect(f"{t.name} tests state variable {t.state_var}, which the tables do not define")
            t = dataclasses.replace(t, field=by_id[t.state_var])
        tables.append(t)
    first_aggregate = len(order)
    order += aggregates
    level = {path: i for i, path in enumerate(order)}
    widths = [width_of[path] for path in order]
    m = Machine(order, widths, p.root, [{} for _ in widths])
    _ir_steps(tables, level, widths, m.steps)
    if p.state_vars:
        m.aggregates_from = first_aggregate
        m.updates = {s: frozenset(by_id[v] for v in vs) for s, vs in p.state_updates.items()}
    if p.port_filters is not None:
        steps: list[dict[int, list[Piece]]] = [{} for _ in widths]
        _ir_steps(p.port_filters.tables, level, widths, steps)
        m.filters = _filter_machines(order, widths, steps, p.port_filters.roots, p.port_filters.accept)
    m.counts = True
    for s, a in p.leaves.items():
        m.outcomes[s] = _outcome(a.ports, a.drop, a.calls, a.rules)
    if p.default_action is not None:
        d = p.default_action
        m.default = _outcome(d.ports, d.drop, d.calls)
    return m


def _whole(spec: Spec, path: str) -> str:
    """A state variable's field as the rules name it (a wide field's word: the whole field)."""
    q = spec.query_field(path) if path else None
    return q.whole or q.path if q is not None else path


def _ir_steps(tables: list[Any], level: dict[str, int], widths: list[int], steps: list[dict[int, list[Piece]]]) -> None:
    """IR field tables as per-level, per-state pieces."""
    for t in tables:
        if t.compression is not None:
            raise Undecidable(f"{t.name}: compressed fields are not modelled by the checker")
        if t.field is None or t.field not in level:
            raise Undecidable(f"table {t.name} tests no query field of the spec")
        lv = level[t.field]
        by_state: dict[int, tuple[dict, list, list, list]] = {s: ({}, [], [], []) for s in t.states}
        for e in t.entries:
            points, ranges, prefixes, anys = by_state.setdefault(e.state, ({}, [], [], []))
            what = f"{t.name}: state {e.state} {e.match[0]} {e.match[1:]} -> {e.next}"
            kind = e.match[0]
            if kind == "exact":
                points[e.match[1]] = (e.next, what)
            elif kind == "range":
                ranges.append((e.match[1], e.match[2], 1, e.next, what))
            elif kind == "lpm":
                prefixes.append((e.match[1], e.match[2], e.next, what))
            elif kind == "any":
                anys.append((e.next, what))
            else:
                raise Undecidable(f"{t.name}: match kind {kind} is not modelled by the checker")
        for s, (points, ranges, prefixes, anys) in by_state.items():
            fallback = anys[0] if anys else (0, f"{t.name}: state {s} misses -> 0")
            steps[lv][s] = pieces(points, ranges, prefixes, fallback, widths[lv])


def _filter_machines(paths: list[str], widths: list[int], steps: list[dict[int, list[Piece]]],
                     roots: dict[Any, int], accept: Any) -> dict[Any, Machine]:
    """One machine per filtered port over shared steps: its root, and the port at accepting states."""
    return {port: Machine(paths, widths, root, steps, {s: Outcome(frozenset({port})) for s in accept})
            for port, root in roots.items()}


def _call(text: str) -> tuple[str, tuple[str, ...]]:
    name, _, rest = text.partition("(")
    args = rest[:-1] if rest.endswith(")") else rest
    return name, tuple(a for a in args.split(",") if a)


def p4_machine(spec: Spec, tables: Any, schema: Any) -> Machine:
    """P4 entries (a P4Tables of what a switch holds) by P4's match semantics, the tables and
    their keys as the program declares them (`schema`: its tables, keys, fallbacks)."""
    level = {q.path: i for i, q in enumerate(spec.query_fields)}
    widths = [q.width for q in spec.query_fields]
    owner: dict[str, int] = {}                     # table -> level, from its declared field key
    codes = getattr(schema, "codes", {})
    code_keys = {c.key.name: level[c.field] for c in codes.values()}   # (state, code) tables: the field's
    for t in schema.tables:
        if t.name in codes:
            continue                               # read with the field's tables (_decode)
        keys = [level[k.name] if k.name in level else code_keys[k.name] for k in t.keys
                if k.name in level or k.name in code_keys]
        if keys:
            owner[t.name] = keys[0]
    for t in schema.tables:                        # a fallback keyed on the state alone: its owner's
        if t.fallback and t.name in owner:
            owner.setdefault(t.fallback, owner[t.name])
    chains: dict[int, list[str]] = {}
    for t in schema.apply_order():
        if t.name in owner:
            chain, name = [], t.name
            while name:
                chain.append(name)
                nxt = schema.table(name)
                name = nxt.fallback if nxt is not None else None
            chains[owner[t.name]] = chain
    by_table: dict[str, dict[int, list[Any]]] = {}
    egress = {t.name for t in getattr(schema, "egress", ())}
    for e in tables.entries:
        if e.table in egress:
            continue                               # the port filters: read below
        st = next((mt.value for mt in e.matches if mt.field == "meta.state"), None)
        if st is None:
            raise Undecidable(f"{e.table}: an entry without a state key is not modelled by the checker")
        by_table.setdefault(e.table, {}).setdefault(st, []).append(e)
    for code_table, decl in codes.items():
        _decode(code_table, decl, by_table, tables, widths[level[decl.field]], chains.get(level[decl.field], []))
    m = Machine([q.path for q in spec.query_fields], widths, tables.root, [{} for _ in widths])
    for lv, chain in chains.items():
        states = {s for name in chain for s in by_table.get(name, {})}
        for s in states:
            m.steps[lv][s] = _chain_pieces(chain, by_table, s, widths[lv], tables.defaults)
    leaves = by_table.get("t_leaf", {})
    calls = by_table.get("t_leaf_calls", {})
    for s in set(leaves) | set(calls):
        ports: set[Any] = set()
        drop = False
        for e in leaves.get(s, []):
            ports, drop = _leaf(e.action, e.params, tables, ports, drop)
        call_set = [_call(x) for e in calls.get(s, []) for x in tables.calls.get(e.params[0], ())]
        m.outcomes[s] = Outcome(frozenset(ports), drop, frozenset(call_set))
    d = tables.defaults.get("t_leaf")
    if d is not None:
        ports, drop = _leaf(d[0], d[1], tables, set(), False)
        call_set = [_call(x) for x in tables.calls.get(d[1][0], ())] if d[0] == "call" else []
        m.default = Outcome(frozenset(ports), drop, frozenset(call_set))
    if egress:
        m.filters = _p4_filters(spec, tables, schema, level, widths)
    if any(name.startswith(("t_update", "t_svar")) for name in by_table):
        _p4_aggregates(spec, tables, by_table, m)
    return m


def _one(values: set[Any] | None, what: str) -> Any:
    if not values:
        return None
    if len(values) > 1:
        raise TableDefect(f"{what}: {sorted(values)} at once")
    return next(iter(values))


def _p4_aggregates(spec: Spec, tables: Any, by_table: dict[str, dict[int, list[Any]]], m: Machine) -> None:
    """The window registers as the program applies them after the header tables: t_update<k>
    (the state then -> update_<counter>_<field>(index[, every's modulus]): that register slot
    adds the message), then per stage t_svar<i>_load (state -> load_<counter>_<fn>(index): the
    slot's value into `svar`) and t_svar<i> (state, svar range -> set_state; a miss keeps the
    state). A slot is one aggregate, named from what its entries say it computes."""
    fields: dict[tuple[str, int], set[str]] = {}
    moduli: dict[tuple[str, int], set[int]] = {}
    fns: dict[tuple[str, int], set[str]] = {}
    updated: dict[int, set[tuple[str, int]]] = {}
    loads: dict[int, dict[int, tuple[str, int]]] = {}          # stage -> state -> slot
    for name, per_state in by_table.items():
        for st, es in per_state.items():
            for e in es:
                if name.startswith("t_update"):
                    if e.action not in tables.updates:
                        raise Undecidable(f"{name}: action {e.action} is not a window update the checker knows")
                    counter, field_path = tables.updates[e.action]
                    slot = (counter, int(e.params[0]))
                    fields.setdefault(slot, set()).add(field_path)
                    if len(e.params) > 1:
                        moduli.setdefault(slot, set()).add(int(e.params[1]))
                    updated.setdefault(st, set()).add(slot)
                elif name.startswith("t_svar") and name.endswith("_load"):
                    if e.action not in tables.loads:
                        raise Undecidable(f"{name}: action {e.action} is not a window load the checker knows")
                    counter, fn = tables.loads[e.action]
                    slot = (counter, int(e.params[0]))
                    fns.setdefault(slot, set()).add(fn)
                    stage = int(name[len("t_svar"):-len("_load")])
                    if st in loads.setdefault(stage, {}):
                        raise TableDefect(f"{name}: two entries for state {st}")
                    loads[stage][st] = slot

    def path(slot: tuple[str, int]) -> str:
        counter, index = slot
        modulus = _one(moduli.get(slot), f"register {counter}[{index}]'s modulus")
        fn = "every" if modulus else _one(fns.get(slot), f"register {counter}[{index}] loaded as")
        field_path = _one(fields.get(slot), f"register {counter}[{index}] adds")
        return state_path(counter, index, fn or "?", _whole(spec, field_path or ""), modulus or 0)

    stage_of: dict[tuple[str, int], int] = {}
    for stage, by_state in sorted(loads.items()):
        for slot in by_state.values():
            stage_of.setdefault(slot, stage)
    slots = sorted(set(stage_of) | {x for xs in updated.values() for x in xs},
                   key=lambda x: (stage_of.get(x, len(loads)), x))
    first = len(m.paths)
    level = {slot: first + i for i, slot in enumerate(slots)}
    m.paths += [path(x) for x in slots]
    m.widths += [STATE_BITS] * len(slots)
    m.steps += [{} for _ in slots]
    for stage, by_state in sorted(loads.items()):
        tests = by_table.get(f"t_svar{stage}", {})
        d = tables.defaults.get(f"t_svar{stage}")
        for st, slot in by_state.items():
            ranges = [(mt.value, mt.arg, e.priority, int(e.params[0]), f"t_svar{stage}: state {st} svar in "
                       f"[{mt.value}, {mt.arg}] -> {e.params[0]}")
                      for e in tests.get(st, []) for mt in e.matches if mt.field != "meta.state"]
            miss = (int(d[1][0]), f"t_svar{stage}: default") if d is not None and d[0] == "set_state" \
                else (st, f"t_svar{stage}: state {st} misses, keeps its state")
            if st in m.steps[level[slot]]:
                raise Undecidable(f"state {st} loads {path(slot)} in two stages")
            m.steps[level[slot]][st] = pieces({}, ranges, [], miss, STATE_BITS)
        for st in set(tests) - set(by_state):
            raise TableDefect(f"t_svar{stage}: state {st} tests svar without loading a register into it")
    m.aggregates_from = first
    m.updates = {st: frozenset(path(x) for x in xs) for st, xs in updated.items()}


def _p4_filters(spec: Spec, tables: Any, schema: Any, level: dict[str, int], widths: list[int]) -> dict[Any, Machine]:
    """The egress port filters as the switch runs them: t_pf_port gives a port its root, each
    field's t_pf_ tables (exact, range, any: the program's fallbacks) step meta.pf_state, and
    t_pf_accept's states keep the copy."""
    from camus.compiler.backends.p4.schema import PF_ACCEPT, PF_PORT, PF_SET, PF_STATE
    roots: dict[Any, int] = {}
    by_table: dict[str, dict[int, list[Any]]] = {}
    accept: set[int] = set()
    for e in tables.entries:
        if e.table == PF_PORT:
            if e.action == PF_SET:
                roots[e.matches[0].value] = int(e.params[0])
        elif e.table == PF_ACCEPT:
            accept.add(e.matches[0].value)
        elif e.table.startswith("t_pf_"):
            by_table.setdefault(e.table, {}).setdefault(e.matches[0].value, []).append(e)
    for t in (PF_PORT, PF_ACCEPT):
        d = tables.defaults.get(t)
        if d is not None and d[0] != "NoAction":
            raise Undecidable(f"{t}: a default action ({d[0]}) is not modelled by the checker")
    steps: list[dict[int, list[Piece]]] = [{} for _ in widths]
    for t in schema.egress_order():
        key = next((k.name for k in t.keys if k.name in level), None)
        if key is None:
            continue
        chain, name = [], t.name
        while name:
            chain.append(name)
            nxt = schema.table(name)
            name = nxt.fallback if nxt is not None else None
        lv = level[key]
        for st in {s for n in chain for s in by_table.get(n, {})}:
            steps[lv][st] = _chain_pieces(chain, by_table, st, widths[lv], tables.defaults, PF_STATE, PF_SET)
    return _filter_machines([q.path for q in spec.query_fields], widths, steps, roots, accept)


@dataclass(frozen=True)
class _RangeEntry:
    """A (state, code) entry read back as a range of raw values (what _chain_pieces takes)."""
    table: str
    matches: tuple[Any, ...]
    action: str
    params: tuple[Any, ...]
    priority: int


@dataclass(frozen=True)
class _Key:
    field: str
    kind: str
    value: int
    arg: int


def _decode(code_table: str, decl: Any, by_table: dict[str, dict[int, list[Any]]], tables: Any, width: int,
            chain: list[str]) -> None:
    """A field with a lower-resolution domain: the root's code table (raw value -> code, ranges by
    priority, code 0 where none matches: the program's default) composed with the field's
    (state, code) entries, so the field's tables read as ranges of raw values like any other's."""
    d = tables.defaults.get(code_table)
    if d is not None and (d[0] != decl.action or tuple(d[1]) != (0,)):
        raise Undecidable(f"{code_table}: a default action other than code 0 is not modelled by the checker")
    coded = by_table.pop(code_table, {})
    if set(coded) - {tables.root}:
        raise TableDefect(f"{code_table}: entries under states {sorted(set(coded) - {tables.root})[:5]}, which "
                          f"are not the root {tables.root}: the switch never applies them")
    ranges = []
    for e in coded.get(tables.root, []):
        key = next(mt for mt in e.matches if mt.field != "meta.state")
        ranges.append((key.value, key.arg, e.priority, int(e.params[0]), f"{code_table}: {key.value}..{key.arg}"))
    coded_pieces = pieces({}, ranges, [], (0, f"{code_table}: default code 0"), width)
    spans: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, code, _ in coded_pieces:
        spans.setdefault(code, []).append((lo, hi))
    for name in chain:
        for s, es in by_table.get(name, {}).items():
            out: list[Any] = []
            for e in es:
                key = [mt for mt in e.matches if mt.field == decl.key.name]
                if not key:
                    out.append(e)
                    continue
                for lo, hi in spans.get(key[0].value, []):      # a code no value has: never hit
                    out.append(_RangeEntry(e.table, (_Key(decl.field, "range", lo, hi),), e.action, e.params, 1))
            by_table[name][s] = out


def _leaf(action: str, params: tuple[Any, ...], tables: Any, ports: set[Any], drop: bool) -> tuple[set[Any], bool]:
    if action == "set_mgid":
        ports |= set(tables.groups.get(params[0], ()))
    elif action == "set_port":
        ports.add(params[0])
    elif action == "drop_msg":
        drop = True
    return ports, drop


def _chain_pieces(chain: list[str], by_table: dict[str, dict[int, list[Any]]], s: int, width: int,
                  defaults: dict[str, Any], state_key: str = "meta.state", action: str = "set_state") -> list[Piece]:
    """A field's tables for state `s`: the first applied first, each later one only on the
    previous one's miss (a guarded table), so exact entries come before ranges, ranges before
    prefixes, the state's `any` entry last, and a state no table holds passes through."""
    points: dict[int, tuple[int, str]] = {}
    ranges: list[tuple[int, int, int, int, str]] = []
    prefixes: list[tuple[int, int, int, str]] = []
    anys: list[tuple[int, str]] = []
    rank = {"exact": 0, "range": 1, "lpm": 2, "any": 3}
    seen = -1
    for name in chain:
        d = defaults.get(name)
        if d is not None and d[0] != "NoAction":
            raise Undecidable(f"{name}: a default action ({d[0]}) on a field table is not modelled by the checker")
        for e in by_table.get(name, {}).get(s, []):
            if e.action != action:
                raise Undecidable(f"{name}: action {e.action} on a field table is not modelled by the checker")
            key = [mt for mt in e.matches if mt.field != state_key]
            kind = key[0].kind if key else "any"
            if kind not in rank:
                raise Undecidable(f"{name}: match kind {kind} is not modelled by the checker")
            if rank[kind] < seen:
                raise Undecidable(f"{name}: {kind} entries after a table of later precedence")
            seen = rank[kind]
            nxt = e.params[0]
            what = f"{name}: state {s}" + "".join(
                f" {k.field} {k.value}" + (f"..{k.arg} priority {e.priority}" if k.kind == "range" else
                                           f"/{k.arg}" if k.kind == "lpm" else "") for k in key) + f" -> {nxt}"
            if kind == "exact":
                points[key[0].value] = (nxt, what)
            elif kind == "range":
                ranges.append((key[0].value, key[0].arg, e.priority, nxt, what))
            elif kind == "lpm":
                prefixes.append((key[0].value, key[0].arg, nxt, what))
            else:
                anys.append((nxt, what))
    miss = anys[0] if anys else (s, f"{chain[0]}: state {s} matches no entry: passes through")
    return pieces(points, ranges, prefixes, miss, width)
