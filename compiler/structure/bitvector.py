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

import bisect
from typing import Any

from .diagram import normalise_atoms
from ..logic.dnf import Term
from ..logic.lowering import Atom, Lowered
from ..ir.pipeline import ActionSet, BitvectorField, BitvectorPlane, BitvectorStage
from .slicing import sort_ports

STRATEGIES = ("auto", "bdd", "bitvector")


def _mask(bits: list[int], nbytes: int) -> int:
    """An int with the given bit positions set, built in one pass (no big-int per bit)."""
    buf = bytearray(nbytes)
    for t in bits:
        buf[t >> 3] |= 1 << (t & 7)
    return int.from_bytes(buf, "little")


PLANE_LEAVES = 64          # one bit per leaf in a 64-bit word
MAX_PLANES = 4             # leaves past 4 planes (256) are only walked
PLANE_WORDS = 4            # a plane's most words (rounds past the second are rarely read)


def likelihood(lowered: Lowered, terms: list[Term]) -> list[float]:
    """Per term, a guess of how often a message matches it, with nothing known of the traffic:
    per constrained field, the share of the field's boundary points (over all terms) its
    intervals cover — an equality on one of a hundred constants is rare, `x < median` is half —
    multiplied over the fields."""
    guess = [1.0] * len(terms)
    for v in lowered.variables:
        if v.state is not None:
            continue
        points = sorted({p for cons in terms for lo, hi in cons.get(v.index, ()) for p in (lo, hi + 1)})
        if not points:
            continue
        for t, cons in enumerate(terms):
            iset = cons.get(v.index)
            if iset is not None:
                covered = sum(bisect.bisect_right(points, hi) - bisect.bisect_left(points, lo) for lo, hi in iset)
                guess[t] *= max(1, covered) / len(points)
    return guess


def term_order(term_leaf: list[int], guess: list[float]) -> tuple[list[int | None], list[BitvectorPlane]]:
    """The bit order: (term index per bit, None for an empty bit; the prefix's planes).

    The prefix holds every leaf's likeliest terms in a fixed layout, in planes of up to 64
    leaves (leaves with fewer terms first, so that small leaves, often wholly inside the
    prefix, share planes): leaf g of a plane owns bits [g * share, (g + 1) * share) of each of
    the plane's words, share = 64 // the plane's leaves, word w holding its w-th share by
    falling likelihood (bits a leaf cannot fill stay empty). One AND over the fields per prefix
    word then settles every leaf whose group kept a bit, all at once (bpf/camus_bv.h: a few ALU
    operations turn the word into one bit per leaf), which is what a message matching most
    leaves (many wildcard-heavy filters per action) needs; most messages need a word or two per
    plane. After the prefix every term left, sorted by leaf: one run of bits per leaf, walked
    for the leaves the prefix did not settle."""
    leaves = sorted(set(term_leaf))
    by_leaf: dict[int, list[int]] = {leaf: [] for leaf in leaves}
    for t in sorted(range(len(term_leaf)), key=lambda t: -guess[t]):
        by_leaf[term_leaf[t]].append(t)
    ranked = sorted(leaves, key=lambda leaf: (len(by_leaf[leaf]), leaf))
    order: list[int | None] = []
    planes: list[BitvectorPlane] = []
    taken = {leaf: 0 for leaf in leaves}
    for first in range(0, min(len(ranked), MAX_PLANES * PLANE_LEAVES), PLANE_LEAVES):
        group = ranked[first:first + PLANE_LEAVES]
        share = 64 // len(group)
        words = min(PLANE_WORDS, -(-max(len(by_leaf[leaf]) for leaf in group) // share))
        for w in range(words):
            for leaf in group:
                got = by_leaf[leaf][w * share:(w + 1) * share]
                order += got + [None] * (share - len(got))
            order += [None] * (64 - share * len(group))
        for leaf in group:
            taken[leaf] = min(len(by_leaf[leaf]), words * share)
        planes.append(BitvectorPlane(words, group))
    for leaf in leaves:
        order += by_leaf[leaf][taken[leaf]:]
    return order, planes


def build_bitvector(lowered: Lowered,
                    terms: list[tuple[Term, frozenset[Atom]]]) -> tuple[BitvectorStage, dict[int, ActionSet]]:
    """The stage for these DNF terms, and the leaves (1, 2, ...) holding the terms' actions."""
    # Terms grouped by their actions (after a prefix of likely terms, see term_order): each leaf
    # owns one run of bits, and a data plane can unite the matching terms' actions run by run
    # (bpf/camus_bv.h) instead of bit by bit.
    leaf_of: dict[frozenset[Atom], int] = {}
    leaf_ids = [leaf_of.setdefault(normalise_atoms(atoms), len(leaf_of) + 1) for _, atoms in terms]
    order, planes = term_order(leaf_ids, likelihood(lowered, [cons for cons, _ in terms]))
    term_leaf = [0 if t is None else leaf_ids[t] for t in order]
    bits = [None if t is None else terms[t] for t in order]
    n, real = len(bits), len(terms)             # bits, and the terms among them
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
    leaves = {leaf: atoms_action(atoms) for atoms, leaf in leaf_of.items()}
    return BitvectorStage(n, fields, bitmaps, term_leaf, planes), leaves


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
