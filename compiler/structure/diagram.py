"""The multi-terminal ordered decision diagram over interval-labelled edges.

Each inner node tests one variable (a query field or a state variable) and maps a partition of
its domain into maximal intervals to children; leaves are action sets. This is the Camus BDD
with every field's chain of binary tests kept together (`bdd.py` unfolds it into binary
nodes), which is exactly what Algorithm 2 slices into tables.

The three Camus reductions hold by construction:
  * isomorphic nodes are merged: nodes are hash-consed on (variable, edges) and leaves on their
    action set, so equal sub-diagrams are one node with one id;
  * redundant tests are removed: a node whose edges all lead to one child is that child;
  * tests implied by an ancestor on the same field never arise: a variable is tested once on
    any path, over a partition of what is still possible.

Construction sweeps the interval boundaries of the terms still alive at a level (an event
sweep, O(n log n)) and memoises sub-diagrams on the set of alive terms (Zobrist-hashed), so the
100K-rule ITCH workload compiles in about a second. Builders are reusable: node ids are stable
across compilations with the same builder, so incremental updates can reuse them.
"""
from __future__ import annotations

from typing import Any

import random
from dataclasses import dataclass

from ..logic.dnf import Term
from ..logic.lowering import Atom

EMPTY_LEAF = 0   # the leaf with no actions: "nobody subscribed", i.e. drop
COLLECT_MIN = 2_000   # `collect` waits for at least this many new nodes


@dataclass(frozen=True)
class Leaf:
    atoms: frozenset[Atom]


@dataclass(frozen=True)
class Branch:
    var: int
    edges: tuple[tuple[int, int, int], ...]   # (lo, hi, child), covering the whole domain


Node = Leaf | Branch


class DiagramTooLarge(Exception):
    pass


def normalise_atoms(atoms: frozenset[Atom]) -> frozenset[Atom]:
    """An explicit drop overrides forwarding (exclusion filters); other actions stay."""
    if ("drop",) in atoms and any(a[0] == "fwd" for a in atoms):
        return frozenset(a for a in atoms if a[0] != "fwd")
    return atoms


def _by_level(cons: Term, level_of: dict[int, int], levels: int) -> tuple[tuple[Any, ...], int]:
    """A term's interval set per level of the order (None: unconstrained there), and its last
    constrained level (-1: none). A tuple, not a dict: indexed directly in the build's inner
    loops, and a live diagram of 100K rules keeps one per term (a saved live state loads them)."""
    by_level: list[Any] = [None] * levels
    last = -1
    for v, iset in cons.items():
        lv = level_of[v]
        by_level[lv] = iset
        last = max(last, lv)
    return tuple(by_level), last


class DiagramBuilder:
    """Hash-consing store of nodes; `build` turns DNF terms into a root node id."""

    def __init__(self, widths: list[int], max_nodes: int = 2_000_000, seed: int = 0x5EED,
                 max_memo: int | None = None, max_work: int | None = None) -> None:
        self.widths = widths
        self.max_nodes = max_nodes
        # Work bound for trial builds: sub-diagrams memoised, most of which collapse into nodes
        # already made, so the node count alone does not bound the time (a cover trial once
        # memoised 2M sub-diagrams for a few hundred nodes: 68 s).
        self.max_memo = max_memo
        # ... and in term visits (a sub-diagram costs a sweep over its live terms: with thousands
        # alive, a few thousand sub-diagrams are seconds): deterministic, unlike a clock
        self.max_work = max_work
        self.work = 0
        self.nodes: dict[int, Node] = {EMPTY_LEAF: Leaf(frozenset())}   # id -> node; `collect` forgets some
        self.next_id = 1
        self._born = 0                       # nodes made since the last `collect`
        self._unique: dict[object, int] = {Leaf(frozenset()): EMPTY_LEAF}
        self._rng = random.Random(seed)
        self._atom_keys: dict[Atom, int] = {}
        self._memo_order: tuple[int, ...] | None = None     # the order a kept memo was built for
        self.leaf_parts: dict[int, Any] = {}                 # slicing's ActionSet of a leaf (no group yet)
        self._memo: dict[tuple[int, int], int] = {}
        self._leaf_memo: dict[int, int] = {}

    def memo_size(self) -> int:
        return len(self._memo) + len(self._leaf_memo)

    # -- node store -------------------------------------------------------------------------
    def _intern(self, node: Node) -> int:
        nid = self._unique.get(node)
        if nid is None:
            if len(self.nodes) >= self.max_nodes:
                raise DiagramTooLarge(len(self.nodes))
            nid = self.next_id
            self.next_id += 1
            self._born += 1
            self.nodes[nid] = node
            self._unique[node] = nid
        return nid

    def collect(self, roots: list[int], force: bool = False) -> int:
        """Forget the nodes no root reaches, with the memo entries leading to them; returns how
        many. Ids are never reused: what still holds a forgotten id must not look it up. A live
        diagram under churn makes a new root (and a few nodes below) per change and keeps ~none of
        the old ones: without this its builder grew by the whole root's edges every change (27 KB
        at 100K ITCH subscriptions, 1.6 GB an hour at a thousand changes a second). Unless
        `force`, it only runs once the nodes made since the last time outnumber those kept then,
        so its cost (a walk of the live nodes and the memo) is spread over as many new nodes."""
        if not force and self._born <= max(COLLECT_MIN, len(self.nodes) - self._born):
            return 0
        keep = {EMPTY_LEAF}
        stack = list(roots)
        nodes = self.nodes
        while stack:
            n = stack.pop()
            if n in keep:
                continue
            keep.add(n)
            node = nodes[n]
            if isinstance(node, Branch):
                stack.extend(e[2] for e in node.edges)
        dead = [n for n in nodes if n not in keep]
        for n in dead:
            del self._unique[nodes.pop(n)]
        if dead:
            self._memo = {k: v for k, v in self._memo.items() if v in keep}
            self._leaf_memo = {k: v for k, v in self._leaf_memo.items() if v in keep}
            self.leaf_parts = {k: v for k, v in self.leaf_parts.items() if k in keep}
        self._born = 0
        return len(dead)

    def forget_root(self, n: int, var: int) -> bool:
        """Drop a root its holder has let go of, at once: a branch on the diagram's first
        variable is no node's child (children test later variables), so nothing else reaches
        it. Returns whether it was dropped (a child or a leaf standing as root is kept)."""
        node = self.nodes.get(n)
        if not isinstance(node, Branch) or node.var != var:
            return False
        del self.nodes[n]
        del self._unique[node]
        return True

    def leaf(self, atoms: frozenset[Atom]) -> int:
        return self._intern(Leaf(normalise_atoms(atoms)))

    def _atom_key(self, atom: Atom) -> int:
        k = self._atom_keys.get(atom)
        if k is None:
            k = self._atom_keys[atom] = self._rng.getrandbits(128)
        return k

    # -- construction -----------------------------------------------------------------------
    def build(self, terms: list[tuple[Term, frozenset[Atom]]], order: list[int],
              keys: list[int] | None = None) -> int:
        """Root id of the diagram deciding, for every message, the union of the atoms of the
        terms it satisfies. `order` lists variables from first tested to last.

        `keys`: one key per term that stands for its content (the same term gets the same key in
        every call, different terms different keys; incremental.py). With them the memo of
        sub-diagrams survives from one call to the next (same order), so a rule set that changed
        a little rebuilds only the sub-diagrams the change reaches; without, every call starts
        afresh."""
        level_of = {v: i for i, v in enumerate(order)}
        self._order = order
        self._cons: list[tuple[Any, ...]] = []
        self._last: list[int] = []
        self._atoms: list[frozenset[Atom]] = []
        for cons, atoms in terms:
            by_level, last = _by_level(cons, level_of, len(order))
            self._cons.append(by_level)
            self._last.append(last)
            self._atoms.append(atoms)
        if keys is None or tuple(order) != self._memo_order:
            self._memo = {}                           # memo keys mean other terms now
            self._leaf_memo = {}
        self._memo_order = tuple(order) if keys is not None else None
        if keys is None:
            keys = [self._rng.getrandbits(128) for _ in terms]
        self._keys = keys
        alive = list(range(len(terms)))
        h = 0
        for k in keys:
            h ^= k
        root = self._build(0, alive, h)
        if self._memo_order is None:
            # nothing reads this call's terms or memo again (the next build starts afresh): let
            # them go (a million terms' level tuples, keys and memo: a few hundred megabytes)
            self._cons, self._last, self._atoms, self._keys = [], [], [], []
            self._memo, self._leaf_memo = {}, {}
        return root

    # -- persistent terms (live_diagram.py: the top level kept between changes) ----------------
    def keep_terms(self, order: list[int]) -> None:
        """Hold terms between calls (`add_term`/`remove_term`) instead of per `build`: a
        live diagram changes a term at a time and rebuilds below its top level with
        `build_below`. The memo survives when the order is the one it was built for."""
        self._order = list(order)
        self._level_of = {v: i for i, v in enumerate(order)}
        self._cons, self._last, self._atoms, self._keys = [], [], [], []
        self._free: list[int] = []
        if tuple(order) != self._memo_order:
            self._memo, self._leaf_memo = {}, {}
        self._memo_order = tuple(order)

    def add_term(self, cons: Term, atoms: frozenset[Atom], key: int) -> int:
        """Store one term under its content key; returns its slot."""
        by_level, last = _by_level(cons, self._level_of, len(self._order))
        if self._free:
            t = self._free.pop()
            self._cons[t], self._last[t], self._atoms[t], self._keys[t] = by_level, last, atoms, key
        else:
            t = len(self._cons)
            self._cons.append(by_level)
            self._last.append(last)
            self._atoms.append(atoms)
            self._keys.append(key)
        return t

    def remove_term(self, t: int) -> None:
        self._cons[t], self._last[t], self._atoms[t], self._keys[t] = (), -1, frozenset(), 0
        self._free.append(t)

    def term_top(self, t: int) -> Any:
        """A stored term's interval set at the top level (None: unconstrained there)."""
        c = self._cons[t]
        return c[0] if c else None

    def term_key(self, t: int) -> int:
        return self._keys[t]

    def build_below(self, alive: list[int], key: int) -> int:
        """The sub-diagram below the top level for the stored terms `alive` (whose keys xor to
        `key`), from the memo when it holds it."""
        return self._build(1, alive, key)

    def branch(self, var: int, edges: tuple[tuple[int, int, int], ...]) -> int:
        """The node for these edges (one child: that child), hash-consed."""
        if len(edges) == 1:
            return edges[0][2]
        return self._intern(Branch(var, edges))

    def _leaf_for(self, alive: list[int]) -> int:
        atoms: set[Atom] = set()
        for t in alive:
            atoms |= self._atoms[t]
        return self.leaf(frozenset(atoms))

    def _build(self, level: int, alive: list[int], key: int) -> int:
        memo_key = (level, key)
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit
        cons = self._cons
        # Next level at which some alive term is still constrained.
        nxt = len(self._order)
        deepest = -1
        for t in alive:
            if self._last[t] >= level:
                c = cons[t]
                for lv in range(level, nxt):
                    if c[lv] is not None:
                        nxt = lv
                        break
                if self._last[t] > deepest:
                    deepest = self._last[t]
        if self.max_work is not None:
            self.work += len(alive)
            if self.work > self.max_work:
                raise DiagramTooLarge(len(self.nodes))
        if nxt == len(self._order):
            result = self._leaf_for(alive)
        else:
            result = self._branch(nxt, alive, deepest)
        if len(alive) > 1 or self._memo_order is not None:
            # (one term's chain is rebuilt in a few steps and hash-consed to the same node: a
            # memo entry per term, a million at hICN's 1M names, costs more than it saves)
            self._memo[memo_key] = result
        if self.max_memo is not None and len(self._memo) > self.max_memo:
            raise DiagramTooLarge(len(self.nodes))
        return result

    def _branch(self, level: int, alive: list[int], deepest: int) -> int:
        cons, keys = self._cons, self._keys
        var = self._order[level]
        top = (1 << self.widths[var]) - 1
        events: list[tuple[int, int, int]] = []   # (position, +1 start / -1 end, term)
        uncon_key = 0
        uncon: list[int] = []
        for t in alive:
            iset = cons[t][level]
            if iset is None:
                uncon.append(t)
                uncon_key ^= keys[t]
            else:
                for lo, hi in iset:
                    events.append((lo, 1, t))
                    if hi < top:
                        events.append((hi + 1, -1, t))
        events.sort()
        leaf_level = deepest <= level   # children are leaves: track their atoms incrementally
        atoms_of = self._atoms
        akey = self._atom_key
        active: set[int] = set()
        active_key = 0
        atom_count: dict[Atom, int] = {}
        live: set[Atom] = set()         # atoms with a positive count
        atom_hash = 0

        def add_atoms(t: int) -> None:
            nonlocal atom_hash
            for a in atoms_of[t]:
                c = atom_count.get(a, 0)
                if c == 0:
                    atom_hash ^= akey(a)
                    live.add(a)
                atom_count[a] = c + 1

        if leaf_level:
            for t in uncon:
                add_atoms(t)
        edges: list[tuple[int, int, int]] = []
        leaf_memo = self._leaf_memo
        pos = 0
        i, n = 0, len(events)
        while pos <= top:
            while i < n and events[i][0] == pos:
                _, delta, t = events[i]
                i += 1
                active_key ^= keys[t]
                if delta > 0:
                    active.add(t)
                    if leaf_level:
                        add_atoms(t)
                else:
                    active.discard(t)
                    if leaf_level:
                        for a in atoms_of[t]:
                            c = atom_count[a]
                            if c == 1:
                                atom_hash ^= akey(a)
                                live.discard(a)
                            atom_count[a] = c - 1
            end = events[i][0] - 1 if i < n else top
            if leaf_level:
                child = leaf_memo.get(atom_hash)
                if child is None:
                    child = leaf_memo[atom_hash] = self.leaf(frozenset(live))
            else:
                child = self._build(level + 1, uncon + list(active), uncon_key ^ active_key)
            if edges and edges[-1][2] == child:
                edges[-1] = (edges[-1][0], end, child)
            else:
                edges.append((pos, end, child))
            pos = end + 1
        if len(edges) == 1:
            return edges[0][2]           # redundant test: every value leads to the same child
        return self._intern(Branch(var, tuple(edges)))
