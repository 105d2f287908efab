"""A decision diagram kept up to date a term at a time.

`DiagramBuilder.build` sweeps every term at the top level on every call: at 100K ITCH
subscriptions that sweep (and the per-term set-up before it) is most of an incremental compile,
though a change reaches one symbol. `LiveDiagram` keeps the top level's partition instead: the
sorted starts of the intervals the terms' top-level constraints cut, and per interval the terms
alive there with the xor of their content keys. Adding or removing a term splits or merges at its
own boundaries and marks only the intervals it covers; `commit` rebuilds those intervals'
sub-diagrams (the builder's memo answers for every unchanged part below) and the root's edges.
A term that leaves the top field free is alive in every interval: changing one rebuilds every
interval (inherent: it changes every path).

The result is the node `build` gives for the same terms (same builder, same order): the same
partition, the same children, hash-consed into the same ids.
"""
from __future__ import annotations

import bisect

from ..logic.dnf import Term
from ..logic.lowering import Atom
from .diagram import EMPTY_LEAF, DiagramBuilder


class LiveDiagram:
    def __init__(self, builder: DiagramBuilder, order: list[int], widths: list[int]) -> None:
        builder.keep_terms(order)
        self.builder = builder
        self.order = list(order)
        self.var = order[0] if order else -1
        self.top = (1 << widths[self.var]) - 1 if order else 0
        self.starts: list[int] = [0]                 # interval starts on the top field, ascending
        self.members: dict[int, set[int]] = {0: set()}   # start -> term slots constrained into it
        self.mkey: dict[int, int] = {0: 0}           # start -> xor of those terms' keys
        self.child: dict[int, int] = {0: EMPTY_LEAF}
        self.uncon: set[int] = set()                 # terms free on the top field
        self.uncon_key = 0
        self.dirty: set[int] = set()
        self.all_dirty = False
        self.root = EMPTY_LEAF
        self.retired = EMPTY_LEAF                    # the root before the current one's predecessor

    # -- the partition ----------------------------------------------------------------------
    def _split(self, p: int) -> None:
        """Make `p` an interval start (its interval's terms and child are copied)."""
        if p > self.top or p in self.members:
            return
        i = bisect.bisect_right(self.starts, p) - 1
        s = self.starts[i]
        self.starts.insert(i + 1, p)
        self.members[p] = set(self.members[s])
        self.mkey[p] = self.mkey[s]
        self.child[p] = self.child[s]
        if s in self.dirty:
            self.dirty.add(p)

    def _merge(self, p: int) -> None:
        """Drop the start `p` when its interval holds the same terms as the one before."""
        if p == 0 or p > self.top or p not in self.members:
            return
        i = bisect.bisect_left(self.starts, p)
        prev = self.starts[i - 1]
        if self.mkey[prev] != self.mkey[p]:
            return
        del self.starts[i]
        del self.members[p], self.mkey[p], self.child[p]
        self.dirty.discard(p)

    def _covered(self, lo: int, hi: int) -> list[int]:
        i = bisect.bisect_left(self.starts, lo)
        j = bisect.bisect_right(self.starts, hi)
        return self.starts[i:j]

    # -- changes ----------------------------------------------------------------------------
    def add(self, cons: Term, atoms: frozenset[Atom], key: int) -> int:
        """Store a term (its content key as in `DiagramBuilder.build`); returns its slot."""
        t = self.builder.add_term(cons, atoms, key)
        iset = self.builder.term_top(t)
        if iset is None:
            self.uncon.add(t)
            self.uncon_key ^= key
            self.all_dirty = True
            return t
        for lo, hi in iset:
            self._split(lo)
            self._split(hi + 1)
            for s in self._covered(lo, hi):
                self.members[s].add(t)
                self.mkey[s] ^= key
                self.dirty.add(s)
        for lo, hi in iset:               # keep the partition minimal: equal neighbours are one
            self._merge(hi + 1)
            self._merge(lo)
        return t

    def remove(self, t: int) -> None:
        key = self.builder.term_key(t)
        iset = self.builder.term_top(t)
        if iset is None:
            self.uncon.discard(t)
            self.uncon_key ^= key
            self.all_dirty = True
        else:
            for lo, hi in iset:
                for s in self._covered(lo, hi):
                    self.members[s].discard(t)
                    self.mkey[s] ^= key
                    self.dirty.add(s)
            for lo, hi in iset:
                self._merge(hi + 1)
                self._merge(lo)
        self.builder.remove_term(t)

    def commit(self) -> int:
        """Rebuild what the changes since the last commit reach; returns the root's node id."""
        b = self.builder
        if not self.order:
            return self.root
        todo = self.starts if self.all_dirty else sorted(self.dirty)
        uncon = list(self.uncon)
        for s in todo:
            self.child[s] = b.build_below(uncon + list(self.members[s]), self.uncon_key ^ self.mkey[s])
        self.dirty.clear()
        self.all_dirty = False
        edges: list[tuple[int, int, int]] = []
        starts, child = self.starts, self.child
        for i, s in enumerate(starts):
            c = child[s]
            end = starts[i + 1] - 1 if i + 1 < len(starts) else self.top
            if edges and edges[-1][2] == c:
                edges[-1] = (edges[-1][0], end, c)
            else:
                edges.append((s, end, c))
        before, self.root = self.root, b.branch(self.var, tuple(edges))
        # The current root and the one before stay (the caller's tables may still be on it, and
        # undoing this change gives it back under its id); the one before that is dropped now
        # rather than at the next collection. A root has an edge per interval of the first
        # field (27 KB at 100K ITCH subscriptions): a collection's worth of dead roots was the
        # agent's memory growth under churn (issue 47).
        if self.retired not in (self.root, before):
            b.forget_root(self.retired, self.var)
        if before != self.root:
            self.retired = before
        return self.root
