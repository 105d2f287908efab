"""From the tables a switch holds to the tables it should hold, changing only what differs and
never letting a message be classified by a mix of the two (make-before-break).

The switch walks states: every entry is keyed by `meta.state`, and the root state is the
default action of t_root. A state's meaning is its entries and, through `set_state`, the meaning
of the states they lead to; it is summed up in a signature. The new table set is renumbered
against the old one: a new state whose signature the old set has takes that old id (its
entries are already there), every other new state gets an id the old set does not use, and so
do multicast groups (by their ports) and custom-action lists (by their text). Then:

  1. insert the new multicast groups;
  2. insert the entries of the new states (no old state leads to them: nothing sees them yet);
  3. the flip: the tables' default actions, t_root's last (from here on messages walk the new set);
  4. delete the entries of states only the old set had;
  5. delete the old groups.

A message entering before the flip walks the old states only, one entering after walks the
new ones only: the entry interpreter checks that after every single update (tests).

The egress port filters (t_pf_*, keyed by meta.pf_state) are a second namespace of states,
signed and renumbered the same way on their own; a port's root (t_pf_port) changes in the flip
phase, after its new states are in and before its old ones go, so a copy walks one port's old
filter or its new one, never a mix.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .entries import Match, P4Entry, P4Tables
from .schema import CALL_ACTIONS, DEFAULT_CALL_ID, PF_PORT, PF_SET, PF_STATE

STATE_KEY = "meta.state"


@dataclass(frozen=True)
class Change:
    op: str                                         # insert | modify | delete
    what: str                                       # entry | default | group
    entry: P4Entry | None = None
    table: str = ""                                 # default: its table, action and parameters
    action: str = ""
    params: tuple[Any, ...] = ()
    group: int = 0                                  # group: id and ports
    ports: tuple[Any, ...] = ()

    def __str__(self) -> str:
        if self.what == "entry" and self.entry is not None:
            return f"{self.op} {self.entry.table} {self.entry.action}{self.entry.params}"
        if self.what == "default":
            return f"{self.op} {self.table} default {self.action}{self.params}"
        return f"{self.op} group {self.group} {self.ports}"


@dataclass
class Plan:
    tables: P4Tables                                # the new tables, renumbered against the old
    phases: list[list[Change]] = field(default_factory=list)
    signatures: "_Signatures | None" = None         # of `tables`: the next plan from them reuses it
    state_ids: dict[int, int] = field(default_factory=dict)   # the new set's state -> the switch's id

    @property
    def changes(self) -> list[Change]:
        return [c for ph in self.phases for c in ph]

    def counts(self) -> dict[str, int]:
        out = {"insert": 0, "modify": 0, "delete": 0}
        for c in self.changes:
            out[c.op] += 1
        return out


def _is_state(m: Match, key: str = STATE_KEY) -> bool:
    return m.field == key and m.kind == "exact"


def _by_state(t: P4Tables, key: str = STATE_KEY) -> dict[int, list[P4Entry]]:
    out: dict[int, list[P4Entry]] = {}
    for e in t.entries:
        if e.matches and _is_state(e.matches[0], key):
            out.setdefault(e.matches[0].value, []).append(e)
    return out


class _Signatures:
    """state id -> a digest of what the state does, through every state it leads to (`key` and
    `action`: the ingress walk's, or the egress port filters' meta.pf_state and set_pf_state)."""

    def __init__(self, t: P4Tables, key: str = STATE_KEY, action: str = "set_state") -> None:
        self.t, self.by_state, self.action = t, _by_state(t, key), action
        self.memo: dict[int, str] = {}

    def param_view(self, e: P4Entry) -> tuple[Any, ...]:
        if e.action == self.action:
            return ("state", self.of(int(e.params[0])))
        if e.action == "set_mgid":
            return ("ports", tuple(self.t.groups.get(int(e.params[0]), ())))
        if e.action in CALL_ACTIONS:
            known = self.t.calls.get(int(e.params[0]))      # unknown (read back from a switch): the id
            return (("calls", known) if known is not None else ("call id", int(e.params[0])), *e.params[1:])
        return tuple(e.params)

    def of(self, s: int) -> str:
        got = self.memo.get(s)
        if got is None:        # a diagram is acyclic and as deep as its tables: recursion is bounded
            rows = sorted(repr((e.table, e.matches[1:], e.priority, e.action, self.param_view(e)))
                          for e in self.by_state.get(s, ()))
            got = self.memo[s] = hashlib.blake2b("\n".join(rows).encode(), digest_size=16).hexdigest()
        return got


def _states(t: P4Tables) -> set[int]:
    out = {t.root}
    for e in t.entries:
        if e.matches and _is_state(e.matches[0]):
            out.add(e.matches[0].value)
        if e.action == "set_state":
            out.add(int(e.params[0]))
    return out


def _filter_states(t: P4Tables) -> set[int]:
    """The egress port filters' states: keyed by meta.pf_state or set by set_pf_state."""
    out = set()
    for e in t.entries:
        if e.matches and _is_state(e.matches[0], PF_STATE):
            out.add(e.matches[0].value)
        if e.action == PF_SET:
            out.add(int(e.params[0]))
    return out


def _numbering(old: P4Tables, new: P4Tables, states: Any, old_sig: "_Signatures | None",
               new_sig: "_Signatures | None", fresh: _Fresh) -> dict[int, int]:
    """New state -> switch id: an old id where the old set has a state of the same signature,
    else a fresh one (no signatures: all fresh, in order)."""
    if new_sig is None or old_sig is None:
        return {s: fresh() for s in sorted(states(new))}
    kept: dict[str, int] = {}
    for s in sorted(states(old)):
        kept.setdefault(old_sig.of(s), s)
    by_sig: dict[str, int] = {}
    for s in sorted(states(new)):
        h = new_sig.of(s)
        if h not in by_sig:
            by_sig[h] = kept.get(h) or fresh()
    return {s: by_sig[new_sig.of(s)] for s in states(new)}


class _Fresh:
    """Ids the old set does not use, smallest first (state ids stay small under churn)."""

    def __init__(self, used: set[int], start: int = 1) -> None:
        self.used, self.next = set(used), start

    def __call__(self) -> int:
        while self.next in self.used:
            self.next += 1
        self.used.add(self.next)
        return self.next


Key = tuple[str, tuple[Match, ...], int]


def _key(e: P4Entry) -> Key:
    return (e.table, e.matches, e.priority)


def plan(old: P4Tables | None, new: P4Tables, old_signatures: _Signatures | None = None) -> Plan:
    """The make-before-break update from `old` (None or empty: a fresh switch) to `new`;
    `old_signatures`: the previous plan's `signatures` when `old` is that plan's tables."""
    old = old or P4Tables()
    # A switch that never held tables has nothing to keep: no signatures (a third of a first load
    # at 10K filters). One holding an empty rule set has a live root, which the signatures keep.
    fresh = not old.entries and not old.groups and old.root == 0
    # groups by ports, custom-action lists by text: kept where the old set has them
    old_groups = {tuple(ps): g for g, ps in sorted(old.groups.items())}
    fresh_group = _Fresh(set(old.groups))
    group_id: dict[int, int] = {}
    for g, ps in sorted(new.groups.items()):
        group_id[g] = old_groups.get(tuple(ps)) or fresh_group()
    old_calls = {texts: c for c, texts in sorted(old.calls.items())}
    # query_default_action's calls are t_leaf's default, call id 1 in the program itself
    fixed = {DEFAULT_CALL_ID} if new.defaults.get("t_leaf") == ("call", (DEFAULT_CALL_ID,)) else set()
    fresh_call = _Fresh(set(old.calls) | fixed)
    call_id = {c: (c if c in fixed else old_calls.get(texts) or fresh_call())
               for c, texts in sorted(new.calls.items())}
    # states by signature (a fresh switch: numbered 1, 2, ... in order)
    new_sig = None if fresh else _Signatures(new)
    old_sig = None if fresh else (old_signatures if old_signatures is not None and old_signatures.t is old
                                  else _Signatures(old))
    state_id = _numbering(old, new, _states, old_sig, new_sig, _Fresh(_states(old)))
    filtered = bool(_filter_states(new))
    pf_id = _numbering(old, new, _filter_states, None if fresh or not filtered else _Signatures(old, PF_STATE, PF_SET),
                       None if fresh or not filtered else _Signatures(new, PF_STATE, PF_SET),
                       _Fresh(_filter_states(old))) if filtered else {}

    def renumber(e: P4Entry) -> P4Entry:
        matches = tuple(Match(m.field, m.kind, state_id[m.value], m.arg) if _is_state(m) else
                        Match(m.field, m.kind, pf_id[m.value], m.arg) if _is_state(m, PF_STATE) else m
                        for m in e.matches)
        params = e.params
        if e.action == "set_state":
            params = (state_id[int(e.params[0])],)
        elif e.action == PF_SET:
            params = (pf_id[int(e.params[0])],)
        elif e.action == "set_mgid":
            params = (group_id[int(e.params[0])],)
        elif e.action in CALL_ACTIONS:       # the call id first (answer_dns: the address after it)
            params = (call_id.get(int(e.params[0]), int(e.params[0])), *e.params[1:])
        return P4Entry(e.table, matches, e.action, params, e.priority)

    renamed: dict[Key, P4Entry] = {}
    for e in new.entries:
        r = renumber(e)
        renamed.setdefault(_key(r), r)        # equivalent states merged: their entries once
    defaults = {}
    for t, (a, v) in new.defaults.items():
        v = (group_id[int(v[0])],) if a == "set_mgid" else v
        defaults[t] = (a, v)
    target = P4Tables(root=state_id[new.root], entries=list(renamed.values()),
                      groups={group_id[g]: ps for g, ps in new.groups.items()}, order=list(new.order),
                      widths=dict(new.widths), calls={call_id[c]: x for c, x in new.calls.items()},
                      updates=dict(new.updates), loads=dict(new.loads), windows=dict(new.windows),
                      defaults=defaults, guards=dict(new.guards), codes=dict(new.codes), egress=list(new.egress))
    target_sig = None
    if new_sig is not None:
        target_sig = _Signatures(target)          # a signature does not depend on ids: carried over
        target_sig.memo = {state_id[s]: new_sig.of(s) for s in state_id}
    return Plan(target, _phases(old, target), target_sig, state_id)


def repair(held: P4Tables, want: P4Tables) -> Plan:
    """Back to a table set the switch held before (what we last wrote), in place, without
    renumbering: for a switch that lost entries (restarted, or changed behind our back). Only
    what differs is written; the states it touches were already not what we had written."""
    return Plan(want, _phases(held, want))


def _phases(old: P4Tables, new: P4Tables) -> list[list[Change]]:
    old_entries = {_key(e): e for e in old.entries}
    new_entries = {_key(e): e for e in new.entries}
    groups_in = [Change("insert" if g not in old.groups else "modify", "group", group=g, ports=tuple(ps))
                 for g, ps in sorted(new.groups.items()) if tuple(old.groups.get(g, ())) != tuple(ps)]
    rank = {t: i for i, t in enumerate(new.order + new.egress)}
    inserts: list[Change] = []
    modifies: list[Change] = []
    roots: list[Change] = []
    for k, e in new_entries.items():
        was = old_entries.get(k)
        if was is None:
            (roots if e.table == PF_PORT else inserts).append(Change("insert", "entry", e))
        elif (was.action, tuple(was.params)) != (e.action, tuple(e.params)):
            # the same key of a state both sets have: its old and new targets mean the same;
            # a port's filter root is the port's own flip
            (roots if e.table == PF_PORT else modifies).append(Change("modify", "entry", e))
    # deepest tables first, so that an entry is in place before one leading to it
    inserts.sort(key=lambda c: -rank.get(c.entry.table, -1) if c.entry else 0)
    flip = []
    was_default = {t: (a, tuple(int(x) for x in v)) for t, (a, v) in old.defaults.items()}
    for t, (a, v) in sorted(new.defaults.items()):
        if was_default.get(t) != (a, tuple(int(x) for x in v)):
            flip.append(Change("modify", "default", table=t, action=a, params=tuple(v)))
    for t in sorted(set(old.defaults) - set(new.defaults)):
        flip.append(Change("modify", "default", table=t, action="NoAction"))
    if new.root != old.root:
        flip.append(Change("modify", "default", table="t_root", action="set_state", params=(new.root,)))
    flip += roots                                       # ports' filters: new roots in, old ones out
    flip += [Change("delete", "entry", e) for k, e in old_entries.items() if k not in new_entries and e.table == PF_PORT]
    deletes = [Change("delete", "entry", e) for k, e in old_entries.items()
               if k not in new_entries and e.table != PF_PORT]
    groups_out = [Change("delete", "group", group=g, ports=tuple(ps))
                  for g, ps in sorted(old.groups.items()) if g not in new.groups]
    return [ph for ph in (groups_in, inserts + modifies, flip, deletes, groups_out) if ph]


def apply(t: P4Tables, c: Change) -> None:
    """One change to a table set in place (what the switch does with one update)."""
    if c.what == "group":
        if c.op == "delete":
            t.groups.pop(c.group, None)
        else:
            t.groups[c.group] = c.ports
    elif c.what == "default":
        if c.table == "t_root":
            t.root = int(c.params[0])
        elif c.action == "NoAction":
            t.defaults.pop(c.table, None)
        else:
            t.defaults[c.table] = (c.action, c.params)
    else:
        assert c.entry is not None
        k = _key(c.entry)
        t.entries = [e for e in t.entries if _key(e) != k]
        if c.op != "delete":
            t.entries.append(c.entry)
