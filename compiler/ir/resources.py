"""Resource report of a pipeline: entries per table, key widths, groups, bits of state."""
from __future__ import annotations

from typing import Any

from .pipeline import CoverInfo, Pipeline

REGISTER_BITS_PER_STATE_VAR = 64 * 3     # window index, count and sum per state variable


def resource_report(p: Pipeline) -> dict[str, Any]:
    bits = p.state_bits
    tables = []
    for t in p.tables:
        tables.append({
            "table": t.name, "kind": t.kind, "states": len(t.states), "entries": len(t.entries),
            "key_bits": bits + t.key_width,
            "compressed": None if t.compression is None else {
                "code_bits": t.compression.width, "domain_entries": len(t.compression.codes)},
        })
    domain = sum(len(t.compression.codes) for t in p.tables if t.compression)
    bv = p.bitvector
    if bv is not None:                             # one interval table per constrained field
        tables = [{"table": f.name, "kind": "bitvector", "states": 1, "entries": len(f.starts),
                   "key_bits": f.field_width, "compressed": None} for f in bv.fields]
    return {
        "strategy": "bitvector" if bv is not None else "bdd",
        "cover": p.cover.to_json() if p.cover is not None else None,
        "bitvector": None if bv is None else {"terms": bv.terms, "bitmaps": len(bv.bitmaps), "words": bv.words,
                                              "memory_bytes": bv.memory_bytes, "layout": _layout(bv)},
        "rules": p.rule_count,
        "tables": tables,
        "entries": p.entry_count,                  # match entries in the field tables
        "domain_entries": domain,                  # compression tables
        "leaf_entries": len(p.leaves),
        "total_entries": p.entry_count + domain + len(p.leaves),
        "groups": len(p.groups),
        "group_members": sum(len(g) for g in p.groups.values()),
        "state_bits": bits,
        "state_vars": len(p.state_vars),
        "register_bits": len(p.state_vars) * REGISTER_BITS_PER_STATE_VAR,
    }


def render_report(r: dict[str, Any]) -> str:
    lines = [f"{r['rules']} rules -> {r['entries']} table entries in {len(r['tables'])} field "
             f"table(s), {r['leaf_entries']} leaf entries, {r['groups']} multicast group(s)"]
    width = max([len(t["table"]) for t in r["tables"]] + [5])
    lines.append(f"  {'table':<{width}}  kind   states  entries  key bits")
    for t in r["tables"]:
        comp = ""
        if t["compressed"]:
            comp = (f"  (compressed to {t['compressed']['code_bits']}-bit codes, "
                    f"{t['compressed']['domain_entries']} domain entries)")
        lines.append(f"  {t['table']:<{width}}  {t['kind']:<5}  {t['states']:>6}  {t['entries']:>7}  "
                     f"{t['key_bits']:>8}{comp}")
    if r.get("cover"):
        lines.append(f"  a cover: {CoverInfo(**r['cover']).describe()} (over-delivers; the hosts behind it "
                     "filter exactly)")
    if r.get("bitvector"):
        b = r["bitvector"]
        lines.append(f"  bit-vector stage: {b['terms']} terms, {b['bitmaps']} distinct bitmaps of {b['words']} "
                     f"words, {b['memory_bytes'] / 1024:.0f} KiB of maps; {r['leaf_entries']} distinct actions")
        if b.get("layout"):
            lines.append(f"  layout: {b['layout']}")
    else:
        lines.append(f"  leaf table: {r['leaf_entries']} entries; state id: {r['state_bits']} bits; "
                     f"state variables: {r['state_vars']} ({r['register_bits']} register bits)")
    return "\n".join(lines)


def _layout(bv: Any) -> str:
    """How the stage's terms are laid out (structure/bv_layout.py), in a few words."""
    cols = bv.columns
    if cols is not None:
        runs = sum(1 for _, n in cols.runs if n)
        return (f"port columns, {len(cols.layers)} group(s) of 64 ports in {cols.words} words"
                + (f", {runs} port(s) with a run of {cols.run_bits} terms past the columns" if runs else ""))
    if bv.planes:
        return f"planes, {sum(len(p.leaves) for p in bv.planes)} action sets in {len(bv.planes)} plane(s)"
    return "terms by action set"
