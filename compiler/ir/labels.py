"""Wide exact fields as small label ids: the IR rewritten for targets with 64-bit keys.

A topic level (compiler/language/topics.py) is a field as wide as the topic (512 bits, say),
matched only by equality. Every table on such a field holds exact values, and every value no
rule names behaves alike (a set of points or its complement is all a rule can say), so each
named value gets an id (1, 2, ... in value order) and every other value id 0; the tables then
match ids. `label_wide` does that for every field wider than `max_width`; a data plane first
looks the field's value up in the dictionary (missing: 0), then walks the rewritten tables.
The reference interpreter checks the rewrite: `labelled_values` maps a message's values the
way the data plane does, and the two pipelines must agree on every message.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from .pipeline import BitvectorField, Entry, FieldTable, Pipeline

LABEL_WIDTH = 32


class LabelError(ValueError):
    """A wide field matched by ranges: it has no exact dictionary."""


@dataclass
class Labels:
    by_field: dict[str, dict[int, int]]       # field path -> {value: id}

    def value(self, path: str, raw: int) -> int:
        d = self.by_field.get(path)
        return raw if d is None else d.get(raw, 0)


def _raw_entries(t: FieldTable) -> list[Entry]:
    if t.compression is None:
        return t.entries
    if t.compression.kind != "exact":
        raise LabelError(f"{t.name}: a range domain on a wide field")
    raw = {code: m[1] for m, code in t.compression.codes}
    return [Entry(e.state, ("exact", raw[e.match[1]]), e.next) if e.match[0] == "exact" else e
            for e in t.entries]


def _label_field(f: BitvectorField) -> tuple[BitvectorField, dict[int, int]]:
    """Intervals of one value each are the named values; every wider interval must carry the
    same bitmap (all unnamed values behave alike), which becomes id 0's."""
    starts, maps = f.starts, f.bitmaps
    ends = [s - 1 for s in starts[1:]] + [(1 << f.field_width) - 1]
    points = [(s, b) for s, e, b in zip(starts, ends, maps) if s == e]
    others = {b for s, e, b in zip(starts, ends, maps) if s != e}
    if len(others) > 1:
        raise LabelError(f"{f.name}: ranges on a field wider than 64 bits")
    other = others.pop() if others else maps[0]
    ids = {v: i + 1 for i, (v, _) in enumerate(points)}
    return (BitvectorField(f.name, f.var, LABEL_WIDTH, [0] + [ids[v] for v, _ in points],
                           [other] + [b for _, b in points]), ids)


def label_wide(p: Pipeline, widths: dict[str, int], max_width: int = 64) -> tuple[Pipeline, Labels]:
    """The pipeline with every field wider than `max_width` matched by label ids."""
    wide = {path for path, w in widths.items() if w > max_width}
    by_field: dict[str, dict[int, int]] = {}
    tables: list[FieldTable] = []
    for t in p.tables:
        if t.field not in wide:
            tables.append(t)
            continue
        if t.kind != "exact":
            raise LabelError(f"{t.name}: {t.kind} match on a field wider than {max_width} bits")
        entries = _raw_entries(t)
        d = by_field.setdefault(t.field, {})
        for e in entries:
            if e.match[0] == "exact":
                d.setdefault(e.match[1], 0)
        tables.append(replace(t, entries=entries, compression=None, field_width=LABEL_WIDTH))
    for d in by_field.values():                  # ids in value order, over every state's entries
        for i, v in enumerate(sorted(d)):
            d[v] = i + 1
    tables = [t if t.field not in by_field else
              replace(t, entries=[Entry(e.state, ("exact", by_field[t.field][e.match[1]]), e.next)
                                  if e.match[0] == "exact" else e for e in t.entries])
              for t in tables]
    bv = p.bitvector
    if bv is not None and any(f.name in wide for f in bv.fields):
        fields = []
        for f in bv.fields:
            if f.name in wide:
                f, by_field[f.name] = _label_field(f)
            fields.append(f)
        bv = replace(bv, fields=fields, planes=list(bv.planes))
    return replace(p, tables=tables, bitvector=bv), Labels(by_field)


def labelled_values(values: dict[str, int], labels: Labels) -> dict[str, int]:
    """A message's values as the labelled pipeline reads them."""
    return {k: labels.value(k, v) for k, v in values.items()}


def interval_of(f: BitvectorField, key: int) -> int:
    return bisect.bisect_right(f.starts, key) - 1
