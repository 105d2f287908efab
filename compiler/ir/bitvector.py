"""The bit-vector stage of the Pipeline IR (structure/bitvector.py builds it, structure/bv_layout.py
lays its terms out): per field, elementary intervals -> bitmap of the terms that hold there; the
terms' bit order as planes or port columns. Re-exported by ir/pipeline.py."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pipeline import ActionSet


@dataclass
class BitvectorField:
    name: str                      # query-field path
    var: int                       # variable index (the spec's query-field order)
    field_width: int
    starts: list[int]              # elementary interval starts, ascending; starts[0] == 0
    bitmaps: list[int]             # per interval: index into BitvectorStage.bitmaps

    def interval(self, key: int) -> int:
        return bisect.bisect_right(self.starts, key) - 1


@dataclass
class BitvectorPlane:
    """Prefix words shared by up to 64 leaves: leaf g of `leaves` owns bits
    [g * share, (g + 1) * share) of each of the plane's words (structure/bitvector.term_order)."""
    words: int
    leaves: list[int]

    @property
    def share(self) -> int:
        return 64 // len(self.leaves)


COLUMN_CHUNK = 4       # port-column words are walked four at a time: a group's words are a multiple


@dataclass
class BitvectorColumns:
    """Port columns (structure/bitvector.column_order): column i stands for port `ports[i]`,
    bit i % 64 of the words of group i // 64; group g has `layers[g]` words, word l holding
    each of its ports' l-th likeliest term (a term forwarding to several ports sits in each of
    their columns). The AND of such a word over the fields is, bit for bit, the ports it
    delivers: a data plane unites it into the result as it is, whatever the number of action
    sets, and stops a group once its ports with terms left are all delivered. A column holds
    at most its group's words of terms; a port's further terms are its run, `runs[i]` = (first
    bit, terms), the runs one after another after the columns, tested for the ports the
    columns did not deliver."""
    ports: list[Any]
    layers: list[int]
    runs: list[tuple[int, int]] = field(default_factory=list)

    @property
    def words(self) -> int:
        return sum(self.layers)

    @property
    def run_bits(self) -> int:
        return sum(n for _, n in self.runs)


@dataclass
class BitvectorStage:
    """A bit-vector classifier (compiler/bitvector.py): per field, elementary intervals ->
    bitmap of the DNF terms that hold there; AND over fields; matching terms' leaves OR-ed."""
    terms: int                                  # bits: one per DNF term
    fields: list[BitvectorField]                # fields some term constrains, in spec order
    bitmaps: list[int]                          # distinct bitmaps (bit t: term t holds)
    term_leaf: list[int]                        # per bit: its term's leaf (Pipeline.leaves) = its
                                                # actions; 0: an empty bit (in the prefix only)
    planes: list[BitvectorPlane] = field(default_factory=list)   # the prefix: each leaf's likeliest
                                                # terms, plane after plane; after it the terms sorted
                                                # by leaf
    columns: BitvectorColumns | None = None     # or: the prefix is port columns (no planes)
    all_terms: int = field(init=False)

    def __post_init__(self) -> None:
        empty = sum(1 << t for t in range(self.prefix) if self.term_leaf[t] == 0)
        self.all_terms = ((1 << self.terms) - 1) & ~empty

    @property
    def prefix(self) -> int:
        """Bits in the prefix."""
        cols = self.columns
        return 64 * (sum(p.words for p in self.planes) + (cols.words if cols else 0)) + (cols.run_bits if cols else 0)

    @property
    def words(self) -> int:
        """64-bit words per bitmap."""
        return max(1, (self.terms + 63) // 64)

    @property
    def interval_count(self) -> int:
        return sum(len(f.starts) for f in self.fields)

    @property
    def memory_bytes(self) -> int:
        """Map memory on a host: the bitmaps, the interval tables and one leaf id per term."""
        return len(self.bitmaps) * self.words * 8 + self.interval_count * 12 + self.terms * 4

    def matching(self, values: dict[str, int]) -> tuple[int, list[tuple[str, int, int, int]]]:
        """The bitmap of matching terms, and per field (name, key, interval, bitmap id)."""
        acc = self.all_terms
        path = []
        for f in self.fields:
            key = values[f.name]
            i = f.interval(key)
            b = f.bitmaps[i]
            acc &= self.bitmaps[b]
            path.append((f.name, key, i, b))
        return acc, path

    def validate(self, leaves: "dict[int, ActionSet]") -> None:
        for f in self.fields:
            if not f.starts or f.starts[0] != 0 or any(a >= b for a, b in zip(f.starts, f.starts[1:])):
                raise ValueError(f"bit-vector field {f.name}: interval starts must ascend from 0")
            if f.starts[-1] >= 1 << f.field_width:
                raise ValueError(f"bit-vector field {f.name}: a start is wider than {f.field_width} bits")
            if len(f.bitmaps) != len(f.starts) or any(not 0 <= b < len(self.bitmaps) for b in f.bitmaps):
                raise ValueError(f"bit-vector field {f.name}: every interval needs a known bitmap")
        if any(not 0 <= b <= self.all_terms for b in self.bitmaps):
            raise ValueError(f"a bitmap is wider than the {self.terms} terms")
        if len(self.term_leaf) != self.terms or any(x not in leaves for x in self.term_leaf[self.prefix:]):
            raise ValueError("every bit-vector term needs a leaf")
        rest = self.term_leaf[self.prefix:]
        if not 0 <= self.prefix <= self.terms or any(a > b for a, b in zip(rest, rest[1:])):
            raise ValueError("bit-vector terms after the prefix must be sorted by leaf (one run of bits per leaf)")
        t = 0
        for p in self.planes:
            if not 0 < len(p.leaves) <= 64 or not 0 < p.words:
                raise ValueError("bit-vector prefix: a plane holds 1 to 64 leaves in at least one word")
            width = p.share * len(p.leaves)
            for _ in range(p.words):
                if any(self.term_leaf[t + b] not in (0, p.leaves[b // p.share] if b < width else 0)
                       for b in range(64)):
                    raise ValueError("bit-vector prefix: each leaf's bits must be its group of its plane's words")
                t += 64
        if self.columns is not None:
            self._validate_columns(self.columns, leaves)
        if any(b & ~self.all_terms for b in self.bitmaps):
            raise ValueError("bit-vector prefix: an empty bit is set in a bitmap")

    def _validate_columns(self, cols: BitvectorColumns, leaves: "dict[int, ActionSet]") -> None:
        if self.planes:
            raise ValueError("bit-vector prefix: port columns or planes, not both")
        if len(cols.layers) != -(-len(cols.ports) // 64) or any(n < COLUMN_CHUNK or n % COLUMN_CHUNK for n in cols.layers):
            raise ValueError("bit-vector columns: one group of a multiple of 4 words per 64 ports")
        if len(set(cols.ports)) != len(cols.ports):
            raise ValueError("bit-vector columns: a port has one column")
        t = 0
        for g, layers in enumerate(cols.layers):
            for _ in range(layers):
                for b in range(64):
                    leaf = self.term_leaf[t + b]
                    col = 64 * g + b
                    if leaf and (col >= len(cols.ports) or cols.ports[col] not in leaves[leaf].ports):
                        raise ValueError("bit-vector columns: a term sits in the column of a port it does not "
                                         "forward to")
                t += 64
        if cols.runs and len(cols.runs) != len(cols.ports):
            raise ValueError("bit-vector columns: one run (maybe empty) per port")
        for i, (first, n) in enumerate(cols.runs):
            if n and not t <= first <= first + n <= self.prefix:
                raise ValueError("bit-vector columns: a run lies outside the runs after the columns")
            if any(cols.ports[i] not in leaves[self.term_leaf[b]].ports for b in range(first, first + n)):
                raise ValueError("bit-vector columns: a run holds a term of another port")
        if t + cols.run_bits != self.prefix:
            raise ValueError("bit-vector columns: the runs must fill the bits between the columns and the rest")

    def to_json(self) -> dict[str, Any]:
        return {"terms": self.terms,
                "fields": [{"name": f.name, "var": f.var, "field_width": f.field_width,
                            "starts": f.starts, "bitmaps": f.bitmaps} for f in self.fields],
                "bitmaps": [format(b, "x") for b in self.bitmaps],
                "term_leaf": self.term_leaf,
                "planes": [{"words": p.words, "leaves": p.leaves} for p in self.planes],
                **({"columns": {"ports": self.columns.ports, "layers": self.columns.layers,
                                "runs": self.columns.runs}} if self.columns else {})}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "BitvectorStage":
        return cls(doc["terms"],
                   [BitvectorField(f["name"], f["var"], f["field_width"], list(f["starts"]), list(f["bitmaps"]))
                    for f in doc["fields"]],
                   [int(b, 16) for b in doc["bitmaps"]], list(doc["term_leaf"]),
                   [BitvectorPlane(p["words"], list(p["leaves"])) for p in doc.get("planes", [])],
                   BitvectorColumns(list(doc["columns"]["ports"]), list(doc["columns"]["layers"]),
                                    [(a, b) for a, b in doc["columns"].get("runs", [])])
                   if "columns" in doc else None)
