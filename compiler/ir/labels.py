"""Wide exact fields as 64-bit labels: the IR rewritten for targets with 64-bit keys.

A topic level (compiler/language/topics.py) is a field as wide as the topic (512 bits, say):
the level's bytes, NUL-padded, matched only by equality. Every value no rule names behaves
alike there (a set of points or its complement is all a rule can say), so any one-to-one
relabelling of the named values keeps the tables' meaning. The label (`level_label`):

  * a level of at most 8 bytes: its bytes as a little-endian word (what an x86 load of them,
    masked, gives; unique, since a level holds no NUL) — the data plane computes it, no lookup;
  * a longer level a rule names: (k + 2) << 8 from a dictionary (k in value order), a word no
    short level can be (its low byte is 0 and a higher one is not); any other long level 1 << 8.

`label_wide` rewrites every table on a field wider than `max_width` to match labels; the data
plane looks up only long levels (the `labels` map). The reference interpreter checks the
rewrite: `labelled_values` maps a message's values as the data plane does, and the two
pipelines must agree on every message.
"""
from __future__ import annotations

from functools import partial
from typing import Callable
from dataclasses import dataclass, replace

from .pipeline import BitvectorField, Entry, FieldTable, Pipeline

LABEL_WIDTH = 64
OTHER_LONG = 1 << 8                       # a long level no rule names


class LabelError(ValueError):
    """A wide field matched by ranges: it has no exact dictionary."""


def level_label(raw: int, nbytes: int, long_ids: dict[int, int]) -> int:
    level = raw.to_bytes(nbytes, "big").rstrip(b"\0")
    if len(level) <= 8:
        return int.from_bytes(level, "little")
    return long_ids.get(raw, OTHER_LONG)


@dataclass
class Labels:
    by_field: dict[str, dict[int, int]]       # field path -> {long level value: label}
    nbytes: dict[str, int]                    # field path -> bytes of its values

    def value(self, path: str, raw: int) -> int:
        d = self.by_field.get(path)
        return raw if d is None else level_label(raw, self.nbytes[path], d)


def _raw_entries(t: FieldTable) -> list[Entry]:
    if t.compression is None:
        return t.entries
    if t.compression.kind != "exact":
        raise LabelError(f"{t.name}: a range domain on a wide field")
    raw = {code: m[1] for m, code in t.compression.codes}
    return [Entry(e.state, ("exact", raw[e.match[1]]), e.next) if e.match[0] == "exact" else e
            for e in t.entries]


def _label_field(f: BitvectorField, label: Callable[[int], int]) -> BitvectorField:
    """Intervals of one value each are the named values; every wider interval must carry the
    same bitmap (all unnamed values behave alike), which every label between them gets."""
    ends = [s - 1 for s in f.starts[1:]] + [(1 << f.field_width) - 1]
    points = sorted((label(s), b) for s, e, b in zip(f.starts, ends, f.bitmaps) if s == e)
    others = {b for s, e, b in zip(f.starts, ends, f.bitmaps) if s != e}
    if len(others) > 1:
        raise LabelError(f"{f.name}: ranges on a field wider than 64 bits")
    other = others.pop() if others else f.bitmaps[0]
    starts, maps, cur = [], [], 0
    for code, b in points:
        if code > cur:
            starts.append(cur)
            maps.append(other)
        starts.append(code)
        maps.append(b)
        cur = code + 1
    if cur < 1 << LABEL_WIDTH:
        starts.append(cur)
        maps.append(other)
    return BitvectorField(f.name, f.var, LABEL_WIDTH, starts, maps)


def label_wide(p: Pipeline, widths: dict[str, int], max_width: int = 64) -> tuple[Pipeline, Labels]:
    """The pipeline with every field wider than `max_width` matched by labels."""
    wide = {path for path, w in widths.items() if w > max_width}
    if not wide:
        return p, Labels({}, {})
    nbytes = {path: widths[path] // 8 for path in wide}
    named: dict[str, set[int]] = {path: set() for path in wide}
    tables: list[FieldTable] = []
    for t in p.tables:
        if t.field not in wide:
            tables.append(t)
            continue
        if t.kind != "exact":
            raise LabelError(f"{t.name}: {t.kind} match on a field wider than {max_width} bits")
        entries = _raw_entries(t)
        named[t.field].update(e.match[1] for e in entries if e.match[0] == "exact")
        tables.append(replace(t, entries=entries, compression=None, field_width=LABEL_WIDTH))
    bv = p.bitvector
    for f in bv.fields if bv is not None else []:
        if f.name in wide:
            ends = [s - 1 for s in f.starts[1:]] + [(1 << f.field_width) - 1]
            named[f.name].update(s for s, e in zip(f.starts, ends) if s == e)
    by_field = {}
    for path, values in named.items():     # long levels: ids in value order, over every table
        longs = sorted(v for v in values if len(v.to_bytes(nbytes[path], "big").rstrip(b"\0")) > 8)
        by_field[path] = {v: (k + 2) << 8 for k, v in enumerate(longs)}
    labels = Labels(by_field, nbytes)
    tables = [t if t.field not in wide else
              replace(t, entries=[Entry(e.state, ("exact", labels.value(t.field, e.match[1])), e.next)
                                  if e.match[0] == "exact" else e for e in t.entries])
              for t in tables]
    if bv is not None and any(f.name in wide for f in bv.fields):
        fields = [_label_field(f, partial(labels.value, f.name)) if f.name in wide else f for f in bv.fields]
        bv = replace(bv, fields=fields, planes=list(bv.planes))
    return replace(p, tables=tables, bitvector=bv), labels


def labelled_values(values: dict[str, int], labels: Labels) -> dict[str, int]:
    """A message's values as the labelled pipeline reads them."""
    return {k: labels.value(k, v) for k, v in values.items()}


def long_label_count(p: Pipeline, max_width: int = 64) -> int:
    """How many long-level labels `p` needs in one bank (what the data plane's labels map must
    hold): the distinct named values longer than 8 bytes of the fields wider than `max_width`."""
    widths = {t.field: t.field_width for t in p.tables if t.field is not None}
    if p.bitvector is not None:
        widths.update({f.name: f.field_width for f in p.bitvector.fields})
    if all(w <= max_width for w in widths.values()):
        return 0
    _, labels = label_wide(p, widths, max_width)
    return sum(len(d) for d in labels.by_field.values())
