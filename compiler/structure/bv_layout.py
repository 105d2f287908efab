"""Where each term of the bit-vector stage sits: the bit order, chosen by what a message costs.

Two layouts (bpf/camus_bv.h runs both):

  * planes (`term_order`): a prefix of every action set's likeliest terms in planes of up to 64
    action sets, one group of bits each, settled a whole plane per word; then the terms sorted
    by action set, walked run by run for the action sets the prefix did not settle. Cheap when
    few action sets exist (a message settles them all in a word or two); past 4 planes every
    further action set costs its runs on every message.
  * port columns (`column_order`): each port a column, each word of a group of 64 ports holding
    every port's next likeliest term, so the AND of a word over the fields is the ports it
    delivers, with no per-action-set work; a group stops once its ports with terms left are
    all delivered. Its cost follows the terms per port, not the number of action sets or ports.

`choose_layout` models both on messages sampled from the rules' own constants (the cover's
field model, structure/relaxed.FieldMass) and keeps the cheaper. Terms whose actions are not
plain ports (drop, custom actions, counted rules) are always walked run by run after the
columns.
"""
from __future__ import annotations

import bisect
import random
from typing import Any
from ..ir.pipeline import ActionSet, BitvectorColumns, BitvectorPlane, BitvectorStage
from ..logic.dnf import Term
from ..logic.lowering import Lowered
from .relaxed import FieldMass
from .slicing import sort_ports

PLANE_LEAVES = 64          # one bit per leaf in a 64-bit word
MAX_PLANES = 4             # leaves past 4 planes (256) are only walked
PLANE_WORDS = 4            # a plane's most words (rounds past the second are rarely read)
COLUMN_PORTS = 256         # bpf/camus_xdp.h CAMUS_PORT_WORDS x 64
COLUMN_WORDS = 1024        # the most column words a program walks (bpf/camus_bv.h: half its segments)
COST_SAMPLES = 64          # messages the cost model samples
# The model's units: one AND of a word over the fields; testing a leaf the prefix settled (a
# skip); uniting one leaf's ports.
SKIP, UNITE = 0.2, 0.3

Order = list[int | None]   # per bit: its term (an index into the stage's terms), None for an empty bit


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


def _by_leaf(term_leaf: list[int], guess: list[float]) -> dict[int, list[int]]:
    """Each leaf's terms, likeliest first."""
    by_leaf: dict[int, list[int]] = {leaf: [] for leaf in sorted(set(term_leaf))}
    for t in sorted(range(len(term_leaf)), key=lambda t: -guess[t]):
        by_leaf[term_leaf[t]].append(t)
    return by_leaf


def term_order(term_leaf: list[int], guess: list[float]) -> tuple[Order, list[BitvectorPlane]]:
    """The planes layout: (term per bit; the prefix's planes).

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
    by_leaf = _by_leaf(term_leaf, guess)
    leaves = list(by_leaf)
    ranked = sorted(leaves, key=lambda leaf: (len(by_leaf[leaf]), leaf))
    order: Order = []
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


def column_ready(a: ActionSet) -> bool:
    """Actions a port column can carry: ports only (a drop, a custom action or a counted rule
    needs its leaf)."""
    return bool(a.ports) and not (a.drop or a.calls or a.rules)


def column_order(term_leaf: list[int], guess: list[float],
                 actions: dict[int, ActionSet]) -> tuple[Order, BitvectorColumns] | None:
    """The port-columns layout: (term per bit; the columns), or None when the ports do not fit
    the kernel's port words or the columns its walk. A term forwarding to several ports sits in
    each of their columns; the terms of other leaves follow the columns, sorted by leaf."""
    by_leaf = _by_leaf(term_leaf, guess)
    ready = {leaf for leaf in by_leaf if column_ready(actions[leaf])}
    ports = sort_ports({p for leaf in ready for p in actions[leaf].ports})
    if not ports or len(ports) > COLUMN_PORTS:
        return None
    column = {p: i for i, p in enumerate(ports)}
    cols: list[list[int]] = [[] for _ in ports]
    for t in sorted((t for leaf in ready for t in by_leaf[leaf]), key=lambda t: -guess[t]):
        for p in actions[term_leaf[t]].ports:
            cols[column[p]].append(t)
    layers = [max(1, max(len(c) for c in cols[g:g + 64])) for g in range(0, len(cols), 64)]
    if sum(layers) > COLUMN_WORDS:
        return None
    order: Order = []
    for g, n in enumerate(layers):
        group = cols[64 * g:64 * g + 64]
        for layer in range(n):
            order += [c[layer] if layer < len(c) else None for c in group]
            order += [None] * (64 - len(group))
    for leaf, ts in by_leaf.items():
        if leaf not in ready:
            order += ts
    return order, BitvectorColumns(list(ports), layers)


# -- the cost model -------------------------------------------------------------------------

def sample_matches(lowered: Lowered, terms: list[Term], n: int = COST_SAMPLES, seed: int = 7) -> list[set[int]]:
    """The terms each of `n` sampled messages matches. Messages take field values drawn from the
    rules' constants (FieldMass); per field the samples are sorted once, so a term's interval
    selects its samples with two bisects and one mask (no per-sample test)."""
    rng = random.Random(seed)
    every = (1 << n) - 1
    match = [every] * len(terms)
    for v in lowered.variables:
        if v.state is not None:
            continue
        ivs = [iv for cons in terms for iv in cons.get(v.index, ())]
        if not ivs:
            continue
        model = FieldMass(ivs, v.width)
        values = sorted((model.sample(rng), s) for s in range(n))
        keys = [x for x, _ in values]
        cum = [0]
        for _, s in values:
            cum.append(cum[-1] | 1 << s)
        for t, cons in enumerate(terms):
            iset = cons.get(v.index)
            if iset is None:
                continue
            got = 0
            for lo, hi in iset:
                got |= cum[bisect.bisect_right(keys, hi)] ^ cum[bisect.bisect_left(keys, lo)]
            match[t] &= got
    out: list[set[int]] = [set() for _ in range(n)]
    for t, m in enumerate(match):
        while m:
            low = m & -m
            out[low.bit_length() - 1].add(t)
            m ^= low
    return out


class _Walk:
    """The rest of either layout: the terms after the prefix, sorted by leaf, as the kernel's
    segments (per leaf, its terms cut at word boundaries)."""

    def __init__(self, order: Order, start: int, term_leaf: list[int]) -> None:
        self.runs: dict[int, list[set[int]]] = {}
        last: tuple[int, int] | None = None
        for b in range(start, len(order)):
            t = order[b]
            if t is None:
                continue
            leaf, word = term_leaf[t], b // 64
            if (leaf, word) != last:
                self.runs.setdefault(leaf, []).append(set())
                last = (leaf, word)
            self.runs[leaf][-1].add(t)

    def cost(self, matched: set[int], settled: set[int]) -> float:
        total = 0.0
        for leaf, runs in self.runs.items():
            if leaf in settled:
                total += SKIP
                continue
            for run in runs:
                total += 1
                if run & matched:
                    total += UNITE
                    break
        return total


def planes_cost(order: Order, planes: list[BitvectorPlane], term_leaf: list[int],
                samples: list[set[int]]) -> list[float]:
    """The planes layout's modelled cost per sampled message."""
    prefix = 64 * sum(p.words for p in planes)
    walk = _Walk(order, prefix, term_leaf)
    plane_at: dict[int, tuple[int, int]] = {}       # term -> (plane, word in the plane)
    b = 0
    for k, p in enumerate(planes):
        for w in range(p.words):
            for t in order[b:b + 64]:
                if t is not None:
                    plane_at.setdefault(t, (k, w))
            b += 64
    in_plane = {leaf for p in planes for leaf in p.leaves}
    walk_all = any(leaf not in in_plane for leaf in walk.runs)
    out = []
    for matched in samples:
        first: list[dict[int, int]] = [{} for _ in planes]      # per plane: leaf -> first matching word
        for t in matched:
            at = plane_at.get(t)
            if at is not None:
                k, w = at
                leaf = term_leaf[t]
                first[k][leaf] = min(w, first[k].get(leaf, w))
        cost, open_ = 0.0, walk_all
        settled: set[int] = set()
        for k, p in enumerate(planes):
            if len(first[k]) == len(p.leaves):
                cost += 1 + max(first[k].values()) + UNITE
            else:
                cost += p.words + UNITE * len(first[k])
                open_ = True
            settled.update(first[k])
        out.append(cost + (walk.cost(matched, settled) if open_ else 0))
    return out


def columns_cost(order: Order, cols: BitvectorColumns, term_leaf: list[int],
                 samples: list[set[int]]) -> list[float]:
    """The port-columns layout's modelled cost per sampled message: per group, words until the
    ports with terms left are all delivered; then the rest's walk."""
    prefix = 64 * cols.words
    walk = _Walk(order, prefix, term_leaf)
    place: dict[int, list[tuple[int, int, int]]] = {}    # term -> its (group, layer, column)s
    length = [0] * len(cols.ports)                       # terms per column
    b = 0
    for g, n in enumerate(cols.layers):
        for layer in range(n):
            for c, t in enumerate(order[b:b + 64]):
                if t is not None:
                    place.setdefault(t, []).append((g, layer, 64 * g + c))
                    length[64 * g + c] = layer + 1
            b += 64
    out = []
    for matched in samples:
        settle: dict[int, int] = {}                      # column -> first matching layer
        for t in matched:
            for _, layer, c in place.get(t, ()):
                settle[c] = min(layer, settle.get(c, layer))
        cost = 0.0
        for g, n in enumerate(cols.layers):
            span = range(64 * g, min(64 * g + 64, len(cols.ports)))
            cost += max((min(length[c], settle.get(c, n) + 1) for c in span), default=0) * (1 + SKIP)
        out.append(cost + (walk.cost(matched, set()) if walk.runs else 0))
    return out


def choose_layout(lowered: Lowered, terms: list[Term], term_leaf: list[int],
                  actions: dict[int, ActionSet], layout: str = "auto"
                  ) -> tuple[Order, list[BitvectorPlane], BitvectorColumns | None]:
    """The bit order to build: planes or port columns (`layout` "auto": the cheaper by the
    model, mean cost over sampled messages with the worst as a tie-break)."""
    guess = likelihood(lowered, terms)
    order, planes = term_order(term_leaf, guess)
    if layout == "planes" or len(set(term_leaf)) <= PLANE_LEAVES:
        return order, planes, None      # one plane settles every action set at once
    by_cols = column_order(term_leaf, guess, actions)
    if by_cols is None:
        return order, planes, None
    if layout == "columns":
        return by_cols[0], [], by_cols[1]
    samples = sample_matches(lowered, terms)
    p = planes_cost(order, planes, term_leaf, samples)
    c = columns_cost(by_cols[0], by_cols[1], term_leaf, samples)
    if (sum(c), max(c)) < (sum(p), max(p)):
        return by_cols[0], [], by_cols[1]
    return order, planes, None


def reorder_columns(stage: BitvectorStage, index: dict[Any, int]) -> BitvectorStage:
    """The same stage with port p's column at bit `index[p]` (a data plane's own port
    numbering, e.g. a ports file's order): whole columns move, by a few big-int operations per
    column and bitmap (no per-bit work). Columns of ports no term names stay empty."""
    cols = stage.columns
    assert cols is not None
    width = max(index[p] for p in cols.ports) + 1
    if width > COLUMN_PORTS:
        raise ValueError(f"port columns: a port's bit is {width - 1}; the data plane has {COLUMN_PORTS}")
    length = [0] * len(cols.ports)
    base, t = [], 0
    for g, n in enumerate(cols.layers):
        base.append(t)
        for layer in range(n):
            for c in range(64 * g, min(64 * g + 64, len(cols.ports))):
                if stage.term_leaf[t + 64 * layer + c - 64 * g]:
                    length[c] = layer + 1
        t += 64 * n
    groups = -(-width // 64)
    layers = [1] * groups
    for c, p in enumerate(cols.ports):
        layers[index[p] // 64] = max(layers[index[p] // 64], length[c])
    new_base = [64 * sum(layers[:g]) for g in range(groups)]
    old_prefix, new_prefix = 64 * cols.words, 64 * sum(layers)
    stride = [0]
    for n in range(max(length, default=0)):
        stride.append(stride[-1] | 1 << (64 * n))
    moves = [(base[c // 64], c % 64, stride[length[c]],
              new_base[index[p] // 64] + index[p] % 64) for c, p in enumerate(cols.ports) if length[c]]

    def move(bits: int) -> int:
        out = (bits >> old_prefix) << new_prefix
        for old, shift, mask, new in moves:
            out |= ((bits >> (old + shift)) & mask) << new
        return out
    leaf_at = [0] * new_prefix
    for c, p in enumerate(cols.ports):
        g, b = divmod(c, 64)
        ng, nb = divmod(index[p], 64)
        for layer in range(length[c]):
            leaf_at[new_base[ng] + 64 * layer + nb] = stage.term_leaf[base[g] + 64 * layer + b]
    by_bit = {i: p for p, i in index.items() if i < width}
    ports = [by_bit.get(i) for i in range(width)]
    return BitvectorStage(stage.terms - old_prefix + new_prefix, stage.fields, [move(b) for b in stage.bitmaps],
                          leaf_at + stage.term_leaf[old_prefix:], [], BitvectorColumns(ports, layers))
