"""The bit-vector stage: a table strategy whose size grows linearly with the filters.

The decision diagram is compact when an equality field splits the rule set (ITCH: stock, then
price), but on filters over many attributes with wildcards it multiplies out (every
combination of intervals over the constrained fields becomes a path). The bit-vector
classifier (Lakshman and Stiliadis) never combines fields:

  * every DNF term (a conjunction of one filter) gets a bit;
  * per field, the domain is cut into elementary intervals at every boundary any term uses on
    that field; each interval carries the bitmap of the terms whose constraint on the field
    holds there, wildcards (terms that do not constrain the field) included;
  * a message looks up one interval per field and ANDs the bitmaps: the bits left are the
    terms that match; their actions are OR-ed (an explicit drop still wins over forwarding).

Compile time and memory are O(sum over fields of intervals x terms / 8) bytes, linear in the
filters for a fixed value domain, and the work per message is one lookup per field plus
fields x terms / 64 word ANDs. Identical bitmaps are stored once.

The stage is data in the Pipeline IR (`pipeline.BitvectorStage`, `Pipeline.bitvector`): the
reference interpreter runs it, and back ends that cannot carry it say so.
"""
from __future__ import annotations

from typing import Any

from .diagram import normalise_atoms
from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered
from ..ir.pipeline import ActionSet, BitvectorField, BitvectorStage
from .bv_layout import choose_layout
from .slicing import sort_ports

STRATEGIES = ("auto", "bdd", "bitvector")


def _mask(bits: list[int], nbytes: int) -> int:
    """An int with the given bit positions set, built in one pass (no big-int per bit)."""
    buf = bytearray(nbytes)
    for t in bits:
        buf[t >> 3] |= 1 << (t & 7)
    return int.from_bytes(buf, "little")


def build_bitvector(lowered: Lowered, terms: list[tuple[Term, frozenset[Atom]]],
                    layout: str = "auto") -> tuple[BitvectorStage, dict[int, ActionSet]]:
    """The stage for these DNF terms, and the leaves (1, 2, ...) holding the terms' actions.
    `layout`: "planes", "columns" or "auto" (structure/bv_layout.choose_layout)."""
    # Terms grouped by their actions (after a prefix of likely terms or port columns, see
    # bv_layout): each leaf owns one run of bits, and a data plane can unite the matching terms'
    # actions run by run (bpf/camus_bv.h) instead of bit by bit.
    leaf_of: dict[frozenset[Atom], int] = {}
    leaf_ids = [leaf_of.setdefault(normalise_atoms(atoms), len(leaf_of) + 1) for _, atoms in terms]
    leaves = {leaf: atoms_action(atoms) for atoms, leaf in leaf_of.items()}
    order, planes, columns = choose_layout(lowered, [cons for cons, _ in terms], leaf_ids, leaves, layout)
    term_leaf = [0 if t is None else leaf_ids[t] for t in order]
    bits = [None if t is None else terms[t] for t in order]
    n = len(bits)
    real = n - bits.count(None)                 # bits holding a term (a term may sit in several columns)
    nbytes = max(1, (n + 7) // 8)
    header_vars = [v for v in lowered.variables if v.state is None]
    fields: list[BitvectorField] = []
    bitmap_ids: dict[int, int] = {}
    bitmaps: list[int] = []

    def intern(b: int) -> int:
        got = bitmap_ids.get(b)
        if got is None:
            got = bitmap_ids[b] = len(bitmaps)
            bitmaps.append(b)
        return got

    for v in header_vars:
        top = (1 << v.width) - 1
        toggles: dict[int, list[int]] = {}          # point -> terms whose membership flips there
        wildcard: list[int] = []
        for t, term in enumerate(bits):
            if term is None:
                continue                            # an empty bit: never set
            iset = term[0].get(v.index)
            if iset is None:
                wildcard.append(t)
                continue
            for lo, hi in iset:
                toggles.setdefault(lo, []).append(t)
                if hi < top:
                    toggles.setdefault(hi + 1, []).append(t)
        if len(wildcard) == real:
            continue                                # nobody constrains this field
        points = sorted(set(toggles) | {0})
        cur = _mask(wildcard, nbytes)
        starts: list[int] = []
        ids: list[int] = []
        for p in points:
            flip = toggles.get(p)
            if flip:
                cur ^= _mask(flip, nbytes)
            if ids and bitmaps[ids[-1]] == cur:
                continue                            # same terms as the interval before: merge
            starts.append(p)
            ids.append(intern(cur))
        assert v.field is not None
        fields.append(BitvectorField(v.field.path, v.index, v.width, starts, ids))
    if not bitmaps:
        intern(_mask([t for t, term in enumerate(bits) if term is not None], nbytes))
    return BitvectorStage(n, fields, bitmaps, term_leaf, planes, columns), leaves


def atoms_action(atoms: frozenset[Atom]) -> ActionSet:
    return ActionSet(ports=sort_ports([a[1] for a in atoms if a[0] == "fwd"]), drop=("drop",) in atoms,
                     calls=tuple(sorted((a[1], a[2]) for a in atoms if a[0] == "call")),
                     rules=tuple(sorted(a[1] for a in atoms if a[0] == "rule")))


def union_actions(stage: BitvectorStage, matched: int, leaves: dict[int, ActionSet]) -> ActionSet:
    """What the matching terms deliver together, as one leaf of the diagram would: ports,
    calls and counted rules united; an explicit drop wins over forwarding."""
    ports: set[Any] = set()
    calls: set[Any] = set()
    rules: set[int] = set()
    drop = False
    seen: set[int] = set()
    while matched:
        low = matched & -matched
        matched ^= low
        leaf = stage.term_leaf[low.bit_length() - 1]
        if leaf in seen:
            continue
        seen.add(leaf)
        a = leaves[leaf]
        ports.update(a.ports)
        calls.update(a.calls)
        rules.update(a.rules)
        drop = drop or a.drop
    return ActionSet(ports=() if drop else sort_ports(list(ports)), drop=drop,
                     calls=tuple(sorted(calls)), rules=tuple(sorted(rules)))
