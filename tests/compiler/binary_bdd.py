"""The binary view of the decision diagram: the Camus BDD proper.

Each interval node unfolds into a chain of binary tests on its variable, in ascending order of
constants (`x == v` chains where the node tests only equality, `x < b` chains otherwise); the
chains are hash-consed too, so shared suffixes are one node. `check_reductions` verifies the
three Camus reductions on the result, and `evaluate` walks it: the BDD's own verdict, compared
with the filters and the pipeline by the property tests.
"""
from __future__ import annotations

from dataclasses import dataclass

from camus.compiler.structure.diagram import Branch, DiagramBuilder, Leaf
from camus.compiler.structure.slicing import exact_shape


@dataclass(frozen=True)
class Test:
    var: int
    op: str          # "eq" | "lt"
    const: int
    hi: int          # when the test holds
    lo: int          # when it does not


@dataclass(frozen=True)
class Terminal:
    leaf: int        # diagram leaf id (its action set)


class BinaryBdd:
    def __init__(self, builder: DiagramBuilder, root: int) -> None:
        self.builder = builder
        self.nodes: list[Test | Terminal] = []
        self._unique: dict[Test | Terminal, int] = {}
        self._from_diagram: dict[int, int] = {}
        self.root = self._convert(root)

    def _intern(self, node: Test | Terminal) -> int:
        nid = self._unique.get(node)
        if nid is None:
            nid = self._unique[node] = len(self.nodes)
            self.nodes.append(node)
        return nid

    def _convert(self, did: int) -> int:
        hit = self._from_diagram.get(did)
        if hit is not None:
            return hit
        node = self.builder.nodes[did]
        if isinstance(node, Leaf):
            out = self._intern(Terminal(did))
        else:
            out = self._chain(node)
        self._from_diagram[did] = out
        return out

    def _chain(self, node: Branch) -> int:
        default = exact_shape(node.edges)
        if default is not None:
            cur = self._convert(default)
            for lo, hi, child in reversed(node.edges):
                if lo == hi and child != default:
                    cur = self._intern(Test(node.var, "eq", lo, self._convert(child), cur))
            return cur
        edges = node.edges
        cur = self._convert(edges[-1][2])
        for j in range(len(edges) - 2, -1, -1):
            cur = self._intern(Test(node.var, "lt", edges[j + 1][0], self._convert(edges[j][2]), cur))
        return cur

    def evaluate(self, values: list[int]) -> int:
        """The diagram leaf id reached for variable values `values` (indexed by variable)."""
        nid = self.root
        while True:
            node = self.nodes[nid]
            if isinstance(node, Terminal):
                return node.leaf
            v = values[node.var]
            ok = v == node.const if node.op == "eq" else v < node.const
            nid = node.hi if ok else node.lo

    def check_reductions(self, widths: list[int], max_paths: int = 200_000) -> list[str]:
        """Violations of: no redundant test, no duplicate node, no test implied by ancestors."""
        problems: list[str] = []
        seen: set[Test | Terminal] = set()
        for nid, n in enumerate(self.nodes):
            if n in seen:
                problems.append(f"node {nid} duplicates another")
            seen.add(n)
            if isinstance(n, Test) and n.hi == n.lo:
                problems.append(f"node {nid} is redundant (both branches lead to {n.hi})")
        budget = [max_paths]

        def walk(nid: int, bounds: dict[int, tuple[int, int, frozenset[int]]]) -> None:
            budget[0] -= 1
            if budget[0] < 0:
                return
            n = self.nodes[nid]
            if isinstance(n, Terminal):
                return
            lo, hi, out = bounds.get(n.var, (0, (1 << widths[n.var]) - 1, frozenset()))
            if n.op == "lt":
                if hi < n.const or lo >= n.const:
                    problems.append(f"node {nid} ({n}) is implied by an ancestor")
                walk(n.hi, {**bounds, n.var: (lo, min(hi, n.const - 1), out)})
                walk(n.lo, {**bounds, n.var: (max(lo, n.const), hi, out)})
            else:
                if not lo <= n.const <= hi or n.const in out or lo == hi:
                    problems.append(f"node {nid} ({n}) is implied by an ancestor")
                walk(n.hi, {**bounds, n.var: (n.const, n.const, out)})
                walk(n.lo, {**bounds, n.var: (lo, hi, out | {n.const})})

        walk(self.root, {})
        return problems
