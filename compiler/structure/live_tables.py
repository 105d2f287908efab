"""The table set of a live diagram, followed root by root as state deltas.

`LiveTables` counts references to every node reachable from the live root (one per parent
that leads to it, one for being the root). Moving to a new root takes a reference on it first
and drops the old root's after, so nodes both share keep theirs; nodes whose count rises from
zero are the change's new states (found children first), nodes whose count falls to zero the
states it removes. The cost follows the change, not the table set.

Per table the match kind is fixed when the table gets its first states, as slicing fixes it for
a whole set (the spec's kind; an AUTO field exact if each of those states tests equality): a
later state that the kind cannot hold (a range test meeting a table made exact) raises
NeedsFullWrite and changes nothing; a whole set starts from fresh LiveTables. Multicast
groups keep their numbers while a leaf uses them; new port sets get new numbers.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from ..ir.delta import PipelineDelta, StateRows
from ..ir.pipeline import ActionSet
from ..logic.lowering import Variable
from .diagram import EMPTY_LEAF, Branch, DiagramBuilder, Leaf
from .slicing import exact_shape, leaf_action, state_entries, table_kind


class NeedsFullWrite(Exception):
    """The change does not fit the live tables' layout (a table's kind): write a whole set."""


class LiveTables:
    def __init__(self, builder: DiagramBuilder, variables: list[Variable]) -> None:
        self.builder = builder
        self.variables = variables
        self.kinds: dict[int, str] = {}
        self.refs: dict[int, int] = {}
        self.root = EMPTY_LEAF
        self.group_of: dict[tuple[Any, ...], int] = {}
        self.group_refs: Counter[int] = Counter()
        self.next_group = 1
        self.leaf_actions: dict[int, ActionSet] = {}

    def _settle_kinds(self, born: list[int]) -> None:
        """Fix the kind of each table that gets its first states now, as slicing does for a
        whole set: the spec's, or for an AUTO field exact if every such state tests equality."""
        nodes = self.builder.nodes
        first: dict[int, list[int | None]] = {}
        for n in born:
            node = nodes[n]
            if isinstance(node, Branch) and node.var not in self.kinds:
                first.setdefault(node.var, []).append(exact_shape(node.edges))
        for var, defaults in first.items():
            self.kinds[var] = table_kind(self.variables[var].kind, defaults)

    def _take(self, root: int) -> list[int]:
        """Reference `root`; the nodes that became live, children before parents."""
        refs, nodes = self.refs, self.builder.nodes
        born: list[int] = []

        def take(n: int) -> None:
            c = refs.get(n, 0)
            refs[n] = c + 1
            if c == 0:
                node = nodes[n]
                if isinstance(node, Branch):
                    for ch in {e[2] for e in node.edges}:
                        if ch != EMPTY_LEAF:
                            take(ch)
                born.append(n)
        if root != EMPTY_LEAF:
            take(root)
        return born

    def _drop(self, root: int) -> list[int]:
        refs, nodes = self.refs, self.builder.nodes
        dead: list[int] = []

        def drop(n: int) -> None:
            c = refs[n] - 1
            if c:
                refs[n] = c
                return
            del refs[n]
            dead.append(n)
            node = nodes[n]
            if isinstance(node, Branch):
                for ch in {e[2] for e in node.edges}:
                    if ch != EMPTY_LEAF:
                        drop(ch)
        if root != EMPTY_LEAF:
            drop(root)
        return dead

    def move(self, root: int) -> PipelineDelta:
        """The delta from the live root to `root` (which becomes live). Raises NeedsFullWrite,
        changing nothing, when a new state does not fit its table's kind."""
        born = self._take(root)
        rows: dict[int, StateRows] = {}
        leaves: dict[int, ActionSet] = {}
        nodes = self.builder.nodes
        fixed = set(self.kinds)
        self._settle_kinds(born)
        try:
            for n in born:
                node = nodes[n]
                if isinstance(node, Branch):
                    kind = self.kinds[node.var]
                    default = exact_shape(node.edges) if kind == "exact" else None
                    if kind == "exact" and default is None:
                        raise NeedsFullWrite(f"{self.variables[node.var].name}: a range test in an exact table")
                    rows[n] = StateRows(node.var, kind, tuple(state_entries(
                        kind, n, node.edges, self.variables[node.var].width, default)))
        except NeedsFullWrite:
            self._drop(root)
            self.kinds = {v: k for v, k in self.kinds.items() if v in fixed}
            raise
        delta = PipelineDelta(root, self.root, rows)
        for n in born:
            node = nodes[n]
            if isinstance(node, Leaf):
                a = self.builder.leaf_parts.get(n) or leaf_action(node.atoms)
                if len(a.ports) > 1:
                    g = self.group_of.get(a.ports)
                    if g is None:
                        g = self.group_of[a.ports] = self.next_group
                        self.next_group += 1
                        delta.groups[g] = a.ports
                    self.group_refs[g] += 1
                    a = ActionSet(a.ports, g, a.drop, a.calls, a.updates, a.rules)
                leaves[n] = self.leaf_actions[n] = a
        delta.leaves = leaves
        delta.removed = self._drop(self.root)
        for n in delta.removed:
            gone = self.leaf_actions.pop(n, None)
            if gone is not None and gone.group is not None:
                self.group_refs[gone.group] -= 1
                if not self.group_refs[gone.group]:
                    del self.group_refs[gone.group]
                    del self.group_of[gone.ports]
                    delta.dropped_groups.append(gone.group)
        self.root = root
        return delta

    def live_states(self) -> int:
        return len(self.refs)
