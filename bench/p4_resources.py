"""Switch resources for the ITCH workload: entries per table, TCAM rows once range keys become
ternary (prefix expansion), multicast groups — beside the paper's 21,401 entries / 198 groups;
then one row per shipped app (the Camus paper's Table I: INT, hICN, ...) for its own rules: match
tables, entries, TCAM rows, SRAM words, register-backed state variables, multicast groups.

    python bench/p4_resources.py [--subscriptions N ...] [--app int --app hicn ...]
    python bench/p4_resources.py --table1 [--hicn N]     # the Camus paper's Table I, row by row

The last line is one JSON object with the figures.

Table I's workloads (the paper, section VIII-F): ITCH, 100K `stock == S and price > P : fwd(H)`
(100 symbols, P in (0,1000), 200 hosts); INT, 100K `switch_id == S and hop_latency > L` filters
(100 switches, 1,000 hop_latency ranges: here disjoint latency bands [1000 k, 1000 (k+1)) ns, each
band to its collector port, the same bands on every switch); hICN, 1M unique content identifiers
(here exact IPv6 names, each to one of 64 ports). Each is compiled exactly (alpha 1) and costed
against the default budget (compiler/backends/p4/tofino.py names the source of each figure), then fitted as
`compile --target p4 --arch tna --state-bits B` would. The ITCH spec takes Camus's lower-resolution
domain for the price (`query_field_domain(add_order.price, 12)`: the paper's third TCAM technique);
B is the narrowest of 16, 24 and 32 bits that holds the row's state ids (a column of the table).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, action="append", help="default 1000 10000 100000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--app", action="append", help="apps for the per-app rows (default int hicn ila itch ipfwd)")
    ap.add_argument("--table1", action="store_true", help="the Camus paper's Table I rows, next to its percentages")
    ap.add_argument("--hicn", type=int, default=1_000_000, help="hICN names for --table1 (the paper: 1M)")
    args = ap.parse_args()
    if args.table1:
        print(json.dumps(table1(args.hicn)))
        return 0
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
    from camus.compiler.backends.p4.schema import p4_schema
    from camus.compiler.compile import compile_files
    from camus.data import apps_dir
    rows = {}
    print(f"\n{'app':<8} {'tables':>6} {'entries':>8} {'TCAM rows':>10} {'SRAM words':>11} {'state vars':>11} {'groups':>7}")
    for app in apps:
        spec = next(p for p in sorted((apps_dir() / app).glob("*.p4")))
        c = compile_files(str(spec), str(apps_dir() / app / "rules.txt"))
        t = p4_tables(c.pipeline, c.spec)
        r = switch_resources(t, p4_schema(c.spec))
        used = [name for name in t.order if r["tables"].get(name)]
        row = {"tables": len(used), "entries": r["entries"], "tcam_rows": r["tcam_rows"],
               "sram_words": r["sram_words"], "state_vars": len(c.lowered.state_vars), "groups": len(t.groups)}
        rows[app] = row
        print(f"{app:<8} {row['tables']:>6} {row['entries']:>8} {row['tcam_rows']:>10} {row['sram_words']:>11} "
              f"{row['state_vars']:>11} {row['groups']:>7}")
    return rows


PAPER_TABLE1 = {"ITCH": (3.7, 4.17, 46.0), "INT": (0.73, 3.45, 0.0), "hICN": (74.9, 0.69, 0.0)}   # SRAM, TCAM, groups %

INT_SPEC = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header int_t { bit<32> switch_id; bit<32> hop_latency; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; int_t int; }
@pragma query_field_exact(int.switch_id)
@pragma query_field(int.hop_latency)
"""

HICN_SPEC = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv6_t { bit<4> version; bit<8> traffic_class; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src; bit<128> dst; }
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; }
@pragma query_field_exact(ipv6.dst)
"""


def table1_workloads(hicn: int) -> dict[str, tuple[str, Callable[[], list[str]]]]:
    """Each row's spec text and a maker of its rules (each row's rules are made when it runs:
    the 1M names are not held while the other rows compile)."""
    # Camus's lower-resolution domain for the price (few distinct boundaries: 1..999)
    itch = SPEC.read_text().replace("@pragma query_field(add_order.price)\n", "@pragma query_field(add_order.price)\n"
                                    "@pragma query_field_domain(add_order.price, 12)\n")
    assert "query_field_domain" in itch
    return {"ITCH": (itch, lambda: itch_table1_rules()), "INT": (INT_SPEC, int_rules),
            "hICN": (HICN_SPEC, lambda: hicn_rules(hicn))}


def itch_table1_rules() -> list[str]:
    from camus.bench.workloads import itch_rules
    return itch_rules(100_000, 1)


def int_rules() -> list[str]:
    return [f"switch_id == {s} and hop_latency >= {1000 * k} and hop_latency < {1000 * (k + 1)} : fwd({1 + k % 8})"
            for s in range(1, 101) for k in range(1000)]


def hicn_rules(n: int) -> list[str]:
    """n distinct random 64-bit hICN name prefixes as exact IPv6 destinations, each to one of 64 ports."""
    import random
    rng = random.Random(1)
    names: set[int] = set()
    while len(names) < n:
        names.add(rng.getrandbits(64))
    return [f"ipv6.dst == b001:{(n >> 48) & 0xFFFF:x}:{(n >> 32) & 0xFFFF:x}:{(n >> 16) & 0xFFFF:x}:"
            f"{n & 0xFFFF:x}:: : fwd({1 + n % 64})" for n in sorted(names)]


def table1(hicn: int) -> dict[str, dict]:
    """The paper's Table I rows: ours exact and fitted, its percentages beside them."""
    import time
    from camus.compiler.backends.base import BackendError, OverBudget, TargetOptions
    from camus.compiler.backends.p4.budget import Budget, over_budget, sized_schema, switch_resources
    from camus.compiler.backends.p4.entries import p4_tables, state_id_bits
    from camus.compiler.backends.p4.program import check_whole_program
    from camus.compiler.backends.p4.schema import P4Options, p4_schema
    from camus.compiler.backends.registry import backend
    from camus.compiler.compile import compile_rules, no_cyclic_gc
    from camus.compiler.fitting import build_fitted, describe
    from camus.compiler.language.spec_parser import parse_spec
    b = Budget()
    out: dict[str, dict] = {}
    print(f"{'row':<6} {'filters':>9} {'entries':>8} {'ids':>4} {'SRAM':>7} {'TCAM':>7} {'groups':>7} {'stages':>6}   "
          f"{'paper SRAM/TCAM/groups':<24} fitted (TNA)")
    for name, (spec_text, make_rules) in table1_workloads(hicn).items():
        t0 = time.perf_counter()
        with no_cyclic_gc():
            spec = parse_spec(spec_text)
            rules = make_rules()
            count, text = len(rules), "\n".join(rules) + "\n"
            del rules
            # tables and figures only: each rule let go once its conjunctions are made (1M names)
            c = compile_rules(spec, text, keep_rules=False)
            pipeline, spec = c.pipeline, c.spec
            del c, text                       # the diagram and the lowering: not needed for the costing
            tables = p4_tables(pipeline, spec)
            del pipeline
            bits = next(n for n in (16, 24, 32) if state_id_bits(tables) <= n)
            schema = p4_schema(spec, P4Options(arch="tna", state_bits=bits))
            tables.widths.update(schema.key_widths())
            # costed as the program `compile --target p4 --arch tna` writes: sizes from the entries,
            # the template's route table too
            try:                              # a whole TNA program (with its route table), or a control block
                check_whole_program(spec, "tna")
                whole = True
            except BackendError:
                whole = False
            _, schema = sized_schema(spec, P4Options(arch="tna", state_bits=bits), tables, whole)
            r = switch_resources(tables, schema)
            del tables
            over = over_budget(r, b)          # the entries are gone by now: only a row over budget
            try:                              # is compiled again, for the fitting driver
                fitted = describe(build_fitted(compile_rules(spec, "\n".join(make_rules()) + "\n"), backend("p4"),
                                               TargetOptions(arch="tna", state_bits=bits)).compiled) \
                    if over else "exact"
            except OverBudget as exc:
                fitted = f"does not fit: {exc.headline()}"
            except BackendError as exc:
                fitted = f"refused: {exc}"
        row = {"filters": count, "entries": r["entries"], "sram_pct": 100 * r["sram_alloc_words"] / b.sram_words,
               "tcam_pct": 100 * r["tcam_alloc_block_rows"] / b.tcam_block_rows,
               "groups_pct": 100 * r["multicast_groups"] / b.multicast_groups,
               "multicast_nodes": r["multicast_nodes"], "multicast_copies": r["multicast_copies"],
               "stages": r["stages"], "state_bits": bits,
               "tables": {k: v for k, v in r["tables"].items()},
               "paper": dict(zip(("sram_pct", "tcam_pct", "groups_pct"), PAPER_TABLE1[name])),
               "fitted": fitted, "seconds": round(time.perf_counter() - t0, 1)}
        out[name] = row
        p = PAPER_TABLE1[name]
        print(f"{name:<6} {count:>9,} {r['entries']:>8,} {bits:>4} {row['sram_pct']:>6.2f}% {row['tcam_pct']:>6.2f}% "
              f"{row['groups_pct']:>6.2f}% {r['stages']:>6}   {p[0]:>5}% / {p[1]:>5}% / {p[2]:>4}%     {fitted}",
              flush=True)
    print("budget: one Tofino-1 pipe (compiler/backends/p4/tofino.py, each figure with its source: 12 stages x 80 "
          "SRAM RAMs of 1,024 x 128-bit words, 12 x 24 TCAMs of 512 x 44 bits, 65,535 multicast group ids)")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
