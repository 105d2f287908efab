"""Switch resources for the ITCH workload: entries per table, TCAM rows once range keys become
ternary (prefix expansion), multicast groups — beside the paper's 21,401 entries / 198 groups;
then one row per shipped app (the Camus paper's Table I: INT, hICN, ...) for its own rules: match
tables, entries, TCAM rows, SRAM words, register-backed state variables, multicast groups.

    python bench/p4_resources.py [--subscriptions N ...] [--app int --app hicn ...]

The last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, action="append", help="default 1000 10000 100000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--app", action="append", help="apps for the per-app rows (default int hicn ila itch ipfwd)")
    args = ap.parse_args()
    from camus.bench.workloads import itch_rules
    from camus.compiler.backends.p4.budget import Budget, over_budget, switch_resources
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.compile import compile_rules
    from camus.compiler.language.spec_parser import load_spec

    spec = load_spec(SPEC)
    figures = {}
    print(f"{'subs':>8} {'table':<22} {'entries':>8} {'TCAM rows':>10} {'SRAM words':>11}")
    for n in args.subscriptions or [1000, 10000, 100000]:
        t = p4_tables(compile_rules(spec, "\n".join(itch_rules(n, args.seed))).pipeline, spec)
        r = switch_resources(t)
        row = {}
        for name in t.order:
            x = r["tables"].get(name)
            if x:
                row[name] = x
                print(f"{n:>8} {name:<22} {x['entries']:>8} {x['tcam_rows']:>10} {x['sram_words']:>11}")
        match_entries = sum(v["entries"] for k, v in row.items() if k != "t_leaf")
        over = over_budget(r, Budget())
        print(f"{n:>8} {'match tables (total)':<22} {match_entries:>8} {r['tcam_rows']:>10} {r['sram_words']:>11}"
              f"   groups {len(t.groups)}; Tofino-1 pipe budget: {'fits' if not over else '; '.join(over)}")
        figures[str(n)] = {"tables": row, "match_entries": match_entries, "groups": len(t.groups),
                           "tcam_rows": r["tcam_rows"], "tcam_block_rows": r["tcam_block_rows"],
                           "sram_words": r["sram_words"], "fits_budget": not over}
    print("paper, 100K: 21,401 entries, 198 multicast groups")
    figures["apps"] = app_rows(args.app or ["int", "hicn", "ila", "itch", "ipfwd"])
    print(json.dumps(figures))
    return 0


def app_rows(apps: list[str]) -> dict[str, dict[str, int]]:
    """Each app's own rules through the switch back end (entries as P4Runtime would write them)."""
    from camus.compiler.backends.p4.budget import switch_resources
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.compile import compile_files
    from camus.data import apps_dir
    rows = {}
    print(f"\n{'app':<8} {'tables':>6} {'entries':>8} {'TCAM rows':>10} {'SRAM words':>11} {'state vars':>11} {'groups':>7}")
    for app in apps:
        spec = next(p for p in sorted((apps_dir() / app).glob("*.p4")))
        c = compile_files(str(spec), str(apps_dir() / app / "rules.txt"))
        t = p4_tables(c.pipeline, c.spec)
        r = switch_resources(t)
        used = [name for name in t.order if r["tables"].get(name)]
        row = {"tables": len(used), "entries": r["entries"], "tcam_rows": r["tcam_rows"],
               "sram_words": r["sram_words"], "state_vars": len(c.lowered.state_vars), "groups": len(t.groups)}
        rows[app] = row
        print(f"{app:<8} {row['tables']:>6} {row['entries']:>8} {row['tcam_rows']:>10} {row['sram_words']:>11} "
              f"{row['state_vars']:>11} {row['groups']:>7}")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
