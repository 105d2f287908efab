"""A change of the live table set, as state rows: what a back end writes for one subscription
change instead of a whole table set.

States are immutable: a state id always means the same entries (the diagram hash-conses its
nodes), so a change never rewrites a live state. It brings new states (`added`, each with its
table's entries, children before parents; `leaves`, the new final states' actions), a new root,
and states no longer reachable (`removed`). Applied in that order - write the new states, move
the root (one write), then drop the old ones after in-flight packets are done - every packet is
classified by the whole old set or the whole new one.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .pipeline import ActionSet, Entry, FieldTable, Pipeline


@dataclass(frozen=True)
class StateRows:
    var: int                    # the variable the state tests (compiler order = the spec's query fields)
    kind: str                   # its table's match kind: exact | range | lpm
    entries: tuple[Entry, ...]


@dataclass
class PipelineDelta:
    root: int
    old_root: int
    added: dict[int, StateRows] = field(default_factory=dict)     # in write order: children first
    leaves: dict[int, ActionSet] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)
    groups: dict[int, tuple[Any, ...]] = field(default_factory=dict)   # multicast groups new in this change
    dropped_groups: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.root == self.old_root and not self.added and not self.leaves and not self.removed

    def size(self) -> int:
        """Entries written (match entries and leaves) and states dropped."""
        return sum(len(r.entries) for r in self.added.values()) + len(self.leaves) + len(self.removed)

    def apply(self, p: Pipeline, names: dict[int, tuple[str, int, str | None]]) -> Pipeline:
        """`p` with this change (the interpreter then classifies by the new set): `names` gives
        per variable its table name, field width and field path, for tables `p` lacks."""
        gone = set(self.removed)
        tables: dict[int, FieldTable] = {}
        for t in p.tables:
            tables[t.var] = FieldTable(t.name, t.var, t.kind, t.field_width, [s for s in t.states if s not in gone],
                                       [e for e in t.entries if e.state not in gone], t.field, t.state_var)
        for s, rows in self.added.items():
            if rows.var not in tables:
                name, width, path = names[rows.var]
                tables[rows.var] = FieldTable(name, rows.var, rows.kind, width, [], [], path)
            t = tables[rows.var]
            t.states.append(s)
            t.entries.extend(rows.entries)
        for t in tables.values():
            t.states.sort()
            t.entries.sort(key=lambda e: e.state)
        leaves = {s: a for s, a in p.leaves.items() if s not in gone}
        leaves.update(self.leaves)
        groups = {g: ps for g, ps in p.groups.items() if g not in self.dropped_groups}
        groups.update(self.groups)
        return replace(p, root=self.root, tables=[tables[v] for v in sorted(tables) if tables[v].states],
                       leaves=leaves, groups=groups)
