"""Switch resources of a set of entries, against a budget (default: a Tofino-like pipe).

The model counts what decides whether entries fit a match-action pipeline:
  * exact tables live in SRAM: one word per entry per 128 bits of key + action data;
  * range keys become ternary rows (prefix expansion of every range) and LPM keys ternary
    rows, in TCAM blocks 44 bits wide: a row of a wider key spans several blocks;
  * multicast groups and their members in the replication engine.
The default budget is one Tofino-1 pipe: 12 stages x 80 SRAM blocks x 1,024 words, 12 stages x
24 TCAM blocks x 512 rows, 64K multicast groups. Figures are estimates (no compiler placement
here): they say early, before anything is written, that a rule set will not fit.

Where the figures come from (public material; Intel publishes no per-stage capacities):
  * 12 match-action stages per pipe, 80 SRAM and 24 TCAM blocks per stage, TCAM blocks of 512
    44-bit rows: the Tofino-1 figures the research literature on switch table placement uses
    (the RMT design it descends from had 106 SRAM blocks of 1K x 112 bits and 16 TCAM blocks of
    2K x 40 bits over 32 stages: Bosshart et al., SIGCOMM 2013);
  * SRAM blocks of 1,024 words of 128 bits: the P4.org forum's answer on Tofino SRAM blocks
    ("Questions on SRAM Block Usage in Tofino2": each block holds 1024 128-bit words, so an
    exact table takes at least 1,024 entries' room);
  * multicast group ids are 16 bits in the Tofino Native Architecture's public specification
    (MulticastGroupId_t), so at most 65,535 groups; the member budget (2^20) is ours: the
    replication engine's node memory is not public.
The Camus paper's Table I gives shares of "the switch" without its capacities, so its
percentages and ours differ by that denominator too (bench/p4_resources.py --table1).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ...logic.intervals import to_prefixes
from .entries import P4Tables

SRAM_WORD_BITS = 128
TCAM_BLOCK_BITS = 44
ACTION_BITS = 32          # action data per entry (the next state, a group or a port)


@dataclass(frozen=True)
class Budget:
    sram_words: int = 12 * 80 * 1024
    tcam_block_rows: int = 12 * 24 * 512
    multicast_groups: int = 65535
    group_members: int = 1 << 20

    @classmethod
    def load(cls, path: str | Path) -> "Budget":
        """A YAML (or JSON) mapping with any of the field names; the rest keep their defaults."""
        import yaml
        data = yaml.safe_load(Path(path).read_text()) or {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown budget keys {unknown}; known: {sorted(known)}")
        return cls(**{k: int(v) for k, v in data.items()})


def _words(bits: int, width: int) -> int:
    return -(-bits // width)


def switch_resources(tables: P4Tables) -> dict[str, Any]:
    """Per table: entries, SRAM words or TCAM rows/block-rows; totals; groups."""
    per: dict[str, dict[str, int]] = {}
    for e in tables.entries:
        key_bits = sum(tables.widths.get(m.field, 32) for m in e.matches)
        row = per.setdefault(e.table, {"entries": 0, "sram_words": 0, "tcam_rows": 0, "tcam_block_rows": 0})
        row["entries"] += 1
        if all(m.kind == "exact" for m in e.matches):
            row["sram_words"] += _words(key_bits + ACTION_BITS, SRAM_WORD_BITS)
            continue
        rows = 1
        for m in e.matches:
            if m.kind == "range":
                rows *= len(to_prefixes(m.value, m.arg, tables.widths[m.field]))
        row["tcam_rows"] += rows
        row["tcam_block_rows"] += rows * _words(key_bits, TCAM_BLOCK_BITS)
        row["sram_words"] += rows * _words(ACTION_BITS, SRAM_WORD_BITS)     # action data
    totals = {k: sum(r[k] for r in per.values()) for k in ("entries", "sram_words", "tcam_rows", "tcam_block_rows")}
    return {"tables": per, **totals, "multicast_groups": len(tables.groups),
            "group_members": sum(len(g) for g in tables.groups.values())}


def over_budget(report: dict[str, Any], budget: Budget) -> list[str]:
    """What exceeds the budget, one line each (empty: it fits)."""
    out = []
    for name, limit in asdict(budget).items():
        used = report.get(name, 0)
        if used > limit:
            out.append(f"{name.replace('_', ' ')}: {used:,} needed, budget {limit:,}")
    return out


def render_resources(report: dict[str, Any], budget: Budget, order: list[str]) -> str:
    lines = ["  switch tables:                      entries  SRAM words  TCAM rows  (x44-bit blocks)"]
    for name in order:
        r = report["tables"].get(name)
        if r:
            lines.append(f"    {name:<34} {r['entries']:>7} {r['sram_words']:>11} {r['tcam_rows']:>10} "
                         f"{r['tcam_block_rows']:>10}")
    b = asdict(budget)
    lines.append(f"    {'total':<34} {report['entries']:>7} {report['sram_words']:>11} {report['tcam_rows']:>10} "
                 f"{report['tcam_block_rows']:>10}")
    lines.append(f"    budget: SRAM {report['sram_words'] / b['sram_words']:.1%}, "
                 f"TCAM {report['tcam_block_rows'] / b['tcam_block_rows']:.1%}, "
                 f"multicast groups {report['multicast_groups']:,}/{b['multicast_groups']:,}")
    return "\n".join(lines)
