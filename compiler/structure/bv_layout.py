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
from ..ir.pipeline import COLUMN_CHUNK, ActionSet, BitvectorColumns, BitvectorPlane, BitvectorStage
from ..logic.dnf import Term
from ..logic.lowering import Lowered
from .relaxed import FieldMass
from .slicing import sort_ports

PLANE_LEAVES = 64          # one bit per leaf in a 64-bit word
MAX_PLANES = 4             # leaves past 4 planes (256) are only walked
PLANE_WORDS = 4            # a plane's most words (rounds past the second are rarely read)
COLUMN_PORTS = 1024        # ebpf/program.py BV_MAX_PORT_WORDS x 64: the most ports of a program with the stage
COLUMN_WORDS = 2048        # the most column words a program walks (bpf/camus_bv.h: 512 quads)
# The most quads of one group and run pieces a layout may need, by the spec's query fields: what
# an XDP program with that many fields holds (ebpf/program.max_bv_columns_for, the verifier's budget)
COLUMN_STEPS = ((16, 512), (32, 256))


def column_steps(fields: int) -> int:
    return next((steps for most, steps in COLUMN_STEPS if fields <= most), COLUMN_STEPS[-1][1])
COST_SAMPLES = 64          # messages the cost model samples
# The model's units: one AND of a word over the fields; testing a leaf the prefix settled (a
# skip); uniting one leaf's ports.
# A port-column step ANDs four words (one pointer load per field for them); a port's run is
# reached by one bit-scan step.
SKIP, UNITE, QUAD, PORT_STEP = 0.2, 0.3, 2.4, 0.5

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


def _chunked(words: int) -> int:
    """A group's words, a multiple of COLUMN_CHUNK: the kernel ANDs them four at a time."""
    return max(COLUMN_CHUNK, -(-words // COLUMN_CHUNK) * COLUMN_CHUNK)


def column_terms(term_leaf: list[int], guess: list[float],
                 actions: dict[int, ActionSet]) -> tuple[list[Any], list[list[int]]] | None:
    """Per port a column can serve, its terms by falling likelihood (a term forwarding to several
    ports in each of theirs), longest columns first: a group is as many words as its longest
    column, so ports of like lengths share groups (a data plane free to number its ports takes
    this order: preferred_ports). None when the ports do not fit the kernel's port words."""
    ready = {leaf for leaf in set(term_leaf) if column_ready(actions[leaf])}
    terms_of: dict[Any, list[int]] = {p: [] for p in sort_ports({p for leaf in ready for p in actions[leaf].ports})}
    if not terms_of or len(terms_of) > COLUMN_PORTS:
        return None
    for t in sorted((t for t, leaf in enumerate(term_leaf) if leaf in ready), key=lambda t: -guess[t]):
        for p in actions[term_leaf[t]].ports:
            terms_of[p].append(t)
    ports = sorted(terms_of, key=lambda p: -len(terms_of[p]))
    return ports, [terms_of[p] for p in ports]


def column_order(term_leaf: list[int], guess: list[float], actions: dict[int, ActionSet],
                 ports: list[Any], cols: list[list[int]], cut: int,
                 steps: int = COLUMN_STEPS[-1][1], words: int = 4) -> tuple[Order, BitvectorColumns] | None:
    """The port-columns layout with each column cut after `cut` terms: (term per bit; the
    columns), or None when the columns exceed the kernel's walk. A port's terms past the cut
    are its run, the runs one after another after the columns (a data plane tests the run of a
    port the columns did not deliver); then the terms of leaves no column serves, by leaf."""
    layers = [_chunked(min(cut, max(len(c) for c in cols[g:g + 64]))) for g in range(0, len(cols), 64)]
    if sum(layers) > COLUMN_WORDS:
        return None
    order: Order = []
    for g, n in enumerate(layers):
        group = cols[64 * g:64 * g + 64]
        for layer in range(n):
            order += [c[layer] if layer < len(c) else None for c in group]
            order += [None] * (64 - len(group))
    runs: list[tuple[int, int]] = []
    pieces = 0
    for c in cols:
        tail = c[layers[len(runs) // 64]:]
        runs.append((len(order), len(tail)) if tail else (0, 0))
        if tail:
            pieces += (len(order) + len(tail) - 1) // 64 - len(order) // 64 + 1
        order += tail
    if pieces > steps or max(layers) * words // 4 > steps:
        return None         # past what every data plane walks: a longer cut, or planes
    served = {leaf for leaf in set(term_leaf) if column_ready(actions[leaf])}
    for leaf, ts in _by_leaf(term_leaf, guess).items():
        if leaf not in served:
            order += ts
    return order, BitvectorColumns(list(ports), layers, runs)


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


def first_matches(cols: list[list[int]], samples: list[set[int]]) -> list[list[int | None]]:
    """Per sampled message, per column: the index of its first matching term (None: none)."""
    pos: dict[int, list[tuple[int, int]]] = {}
    for c, ts in enumerate(cols):
        for i, t in enumerate(ts):
            pos.setdefault(t, []).append((c, i))
    out = []
    for matched in samples:
        fm: list[int | None] = [None] * len(cols)
        for t in matched:
            for c, i in pos.get(t, ()):
                got = fm[c]
                if got is None or i < got:
                    fm[c] = i
        out.append(fm)
    return out


def columns_cost(cols: list[list[int]], cut: int, firsts: list[list[int | None]], rest: list[float]) -> list[float]:
    """The port-columns layout's modelled cost per sampled message, columns cut after `cut`
    terms: per group, word quads until its ports with terms left are delivered; per port the
    columns left undelivered with a run, its run's words until one matches; then the rest's
    walk (`rest`, per message)."""
    groups = [cols[g:g + 64] for g in range(0, len(cols), 64)]
    layers = [_chunked(min(cut, max(len(c) for c in grp))) for grp in groups]
    out = []
    for fm, extra in zip(firsts, rest):
        cost = extra
        for g, grp in enumerate(groups):
            n, walk = layers[g], 0
            for k, c in enumerate(grp):
                f = fm[64 * g + k]
                inside = min(len(c), n)
                walk = max(walk, inside if f is None or f >= n else f + 1)
                if len(c) > n and (f is None or f >= n):     # its run
                    cost += PORT_STEP + 1 + ((len(c) - n - 1 if f is None else f - n) // 64)
            cost += QUAD * -(-walk // COLUMN_CHUNK)
        out.append(cost)
    return out


def _cuts(cols: list[list[int]]) -> list[int]:
    longest = max(len(c) for c in cols)
    return sorted({k for k in (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128) if k < longest} | {longest})


def choose_layout(lowered: Lowered, terms: list[Term], term_leaf: list[int],
                  actions: dict[int, ActionSet], layout: str = "auto"
                  ) -> tuple[Order, list[BitvectorPlane], BitvectorColumns | None]:
    """The bit order to build: planes or port columns, the columns cut where the model finds
    them cheapest (`layout` "auto": the cheaper layout by the model, mean cost over sampled
    messages with the worst as a tie-break)."""
    guess = likelihood(lowered, terms)
    order, planes = term_order(term_leaf, guess)
    if layout == "planes" or (layout == "auto" and len(set(term_leaf)) <= PLANE_LEAVES):
        return order, planes, None      # one plane settles every action set at once
    found = column_terms(term_leaf, guess, actions)
    if found is None:
        return order, planes, None
    ports, cols = found
    # An XDP program's port words for these ports (ebpf/contents.port_words_for): past 512 ports its
    # verifier budget holds half the steps (ebpf/program.max_bv_columns_for), and the walk's bound
    # counts every group of the words
    words = 4 if len(ports) <= 256 else 8 if len(ports) <= 512 else 16
    steps = column_steps(sum(1 for v in lowered.variables if v.state is None)) // (2 if words > 8 else 1)
    cuts = [k for k in _cuts(cols) if _chunked(k) * words // 4 <= steps
            and sum(max(0, len(c) - k) for c in cols) <= 64 * steps]
    if not cuts:
        return order, planes, None      # too many terms a port for any cut to fit the walk
    samples = sample_matches(lowered, terms)
    served = {leaf for leaf in set(term_leaf) if column_ready(actions[leaf])}
    rest_walk = _Walk([t for leaf, ts in _by_leaf(term_leaf, guess).items() if leaf not in served for t in ts],
                      0, term_leaf)
    rest = [rest_walk.cost(m, set()) if rest_walk.runs else 0.0 for m in samples]
    firsts = first_matches(cols, samples)
    best: tuple[tuple[float, float], Order, BitvectorColumns] | None = None
    for cut in cuts:
        by_cols = column_order(term_leaf, guess, actions, ports, cols, cut, steps, words)
        if by_cols is None:
            continue
        c = columns_cost(cols, cut, firsts, rest)
        if best is None or (sum(c), max(c)) < best[0]:
            best = ((sum(c), max(c)), *by_cols)
    if best is None:
        return order, planes, None
    if layout == "columns":
        return best[1], [], best[2]
    p = planes_cost(order, planes, term_leaf, samples)
    if best[0] < (sum(p), max(p)):
        return best[1], [], best[2]
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
    layers = [0] * groups
    for c, p in enumerate(cols.ports):
        layers[index[p] // 64] = max(layers[index[p] // 64], length[c])
    layers = [_chunked(n) for n in layers]
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
    runs_of = dict(zip(cols.ports, cols.runs))
    runs = [(first + new_prefix - old_prefix, n) if n else (0, 0)
            for first, n in (runs_of.get(p, (0, 0)) for p in ports)] if cols.runs else []
    return BitvectorStage(stage.terms - old_prefix + new_prefix, stage.fields, [move(b) for b in stage.bitmaps],
                          leaf_at + stage.term_leaf[old_prefix:], [], BitvectorColumns(ports, layers, runs))


def preferred_ports(stage: BitvectorStage | None, ports: list[Any]) -> list[Any]:
    """`ports` in the order a data plane free to number its ports should take: the stage's
    column order first (its ports' columns then need not move: reorder_columns), then the
    others as given."""
    if stage is None or stage.columns is None:
        return list(ports)
    have = set(ports)
    first = [p for p in stage.columns.ports if p in have]
    taken = set(first)
    return first + [p for p in ports if p not in taken]
