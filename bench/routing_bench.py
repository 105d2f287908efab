"""Routing on subscriptions, measured: the Camus paper's memory-per-layer comparison on a k=4 fat
tree (MR vs TR, alpha 1 vs 10) and MST vs MST++ on a general graph of thousands of nodes.

    python bench/routing_bench.py [--quick] [--nodes N | --edge-list FILE] [--plots DIR]

Memory is table entries (match + leaf) after compiling every device's rule set; traffic is link
transmissions of messages delivered hop by hop through the compiled tables (interpreter), and a
transmission is a false positive when no host beyond that link wanted the message. Prints
tables; the last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"


def itch_subscriptions(hosts: list[str], per_host: int, seed: int, symbols: int = 100) -> dict[str, list[str]]:
    from camus.bench.workloads import symbols as syms
    rng = random.Random(seed)
    names = syms(symbols)
    return {h: [f"stock == {rng.choice(names)} and price > {rng.randint(1, 999)}" for _ in range(per_host)]
            for h in hosts}


def messages(n: int, seed: int, spec, symbols: int = 100) -> list[dict[str, int]]:
    from camus.bench.workloads import symbols as syms
    from camus.compiler.codec.packets import message_from_text
    rng = random.Random(seed)
    names = syms(symbols)
    return [message_from_text(spec, f"stock={rng.choice(names)} price={rng.randint(1, 1000)}") for _ in range(n)]


def measure(t, subs, policy: str, alpha: int, msgs, seed: int, spec) -> dict:
    from camus.compiler.compile import CompileOptions
    from camus.controller.devices import DeviceCompiler, memory_per_layer
    from camus.controller.routing import route
    from camus.controller.simulate import HostWants, Simulator, check
    t0 = time.perf_counter()
    routing = route(t, subs, policy)
    tables = DeviceCompiler(spec, CompileOptions(alpha=alpha)).compile(routing)
    compile_s = time.perf_counter() - t0
    sim = Simulator(routing, tables, HostWants(spec, subs))
    rng = random.Random(seed)
    traffic: dict[str, dict[str, int]] = {}
    tx = 0
    for m in msgs:
        d = check(sim, rng.choice(t.hosts), m, exact=alpha == 1)
        for a, _, useful in d.transmissions:
            layer = t.layer(a) or "host"
            row = traffic.setdefault(layer, {"transmissions": 0, "false_positive": 0})
            row["transmissions"] += 1
            row["false_positive"] += not useful
            tx += 1
    mem = memory_per_layer(routing, tables)
    return {"policy": policy, "alpha": alpha, "memory": mem, "traffic": traffic,
            "entries": sum(v["entries"] for v in mem.values()),
            "max_device_entries": max((v["max_entries"] for v in mem.values()), default=0),
            "transmissions_per_message": tx / max(1, len(msgs)),
            "false_positive_per_message": sum(v["false_positive"] for v in traffic.values()) / max(1, len(msgs)),
            "compile_s": round(compile_s, 2)}


def fat_tree_part(args, spec) -> list[dict]:
    from camus.controller.topology import fat_tree
    t = fat_tree(4)
    subs = itch_subscriptions(t.hosts, args.per_host, args.seed)
    msgs = messages(args.messages, args.seed, spec)
    out = []
    for policy in ("mr", "tr"):
        for alpha in (1, 10):
            out.append(measure(t, subs, policy, alpha, msgs, args.seed, spec))
    layers = ["edge", "aggregation", "core"]
    print(f"fat tree k=4: 20 switches, 16 hosts, {args.per_host} ITCH subscriptions per host, "
          f"{args.messages} messages from random publishers")
    print(f"{'policy':<6} {'alpha':>5} " + " ".join(f"{'mem ' + x:>16}" for x in layers) +
          " " + " ".join(f"{'FP tx ' + x:>16}" for x in layers) + f" {'tx/msg':>7}")
    for r in out:
        mem = [r["memory"].get(x, {}).get("entries", 0) for x in layers]
        fp = [r["traffic"].get(x, {}).get("false_positive", 0) for x in layers]
        print(f"{r['policy']:<6} {r['alpha']:>5} " + " ".join(f"{v:>16,}" for v in mem) + " " +
              " ".join(f"{v:>16,}" for v in fp) + f" {r['transmissions_per_message']:>7.2f}")
    return out


def graph_part(args, spec) -> list[dict]:
    from camus.controller.topology import from_edge_list, random_graph
    if args.edge_list:
        t = from_edge_list(Path(args.edge_list).read_text().splitlines(), name=Path(args.edge_list).stem)
    else:
        t = random_graph(args.nodes, seed=args.seed)
    subs = itch_subscriptions(t.hosts, args.graph_per_host, args.seed)
    msgs = messages(args.graph_messages, args.seed, spec)
    print(f"\ngeneral graph {t.name}: {len(t.devices):,} devices, {len(t.hosts):,} hosts, "
          f"{t.g.number_of_edges():,} links, {args.graph_per_host} subscriptions per host")
    out = []
    for policy in ("mst", "mst++"):
        r = measure(t, subs, policy, 1, msgs, args.seed, spec)
        out.append(r)
    print(f"{'policy':<6} {'entries':>10} {'max/device':>11} {'tx/msg':>8} {'FP tx/msg':>10} {'compile s':>10}")
    for r in out:
        print(f"{r['policy']:<6} {r['entries']:>10,} {r['max_device_entries']:>11,} "
              f"{r['transmissions_per_message']:>8.2f} {r['false_positive_per_message']:>10.2f} {r['compile_s']:>10}")
    return out


def plots(fat: list[dict], graph: list[dict], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    layers = ["edge", "aggregation", "core"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.2
    for i, r in enumerate(fat):
        xs = [j + i * width for j in range(len(layers))]
        axes[0].bar(xs, [r["memory"].get(x, {}).get("entries", 0) for x in layers], width,
                    label=f"{r['policy'].upper()} alpha {r['alpha']}")
        axes[1].bar(xs, [r["traffic"].get(x, {}).get("false_positive", 0) for x in layers], width)
    for ax, title in zip(axes, ("table entries per layer", "false-positive transmissions per layer")):
        ax.set_xticks([j + 1.5 * width for j in range(len(layers))], layers)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle("fat tree k=4: MR vs TR, alpha 1 vs 10")
    fig.tight_layout()
    fig.savefig(out / "fat_tree_memory_traffic.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    names = [r["policy"].upper() for r in graph]
    ax.bar(names, [r["entries"] for r in graph])
    ax.set(ylabel="table entries (all devices)", title="general graph: MST vs MST++")
    fig.tight_layout()
    fig.savefig(out / "mst_vs_mstpp.png", dpi=110)
    plt.close(fig)
    return ["fat_tree_memory_traffic.png", "mst_vs_mstpp.png"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (under a minute)")
    ap.add_argument("--per-host", type=int, default=100, help="ITCH subscriptions per fat-tree host")
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--nodes", type=int, default=2000, help="nodes of the generated general graph")
    ap.add_argument("--edge-list", help="a SNAP edge list instead of the generated graph")
    ap.add_argument("--graph-per-host", type=int, default=1)
    ap.add_argument("--graph-messages", type=int, default=100)
    ap.add_argument("--plots", default=str(ROOT / "runs" / "routing-plots"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.quick:
        args.per_host, args.messages, args.nodes, args.graph_messages = 25, 100, 300, 40
    from camus.compiler.language.spec_parser import load_spec
    spec = load_spec(SPEC)
    t0 = time.perf_counter()
    fat = fat_tree_part(args, spec)
    graph = graph_part(args, spec)
    made = plots(fat, graph, Path(args.plots))
    print(f"\nplots: {', '.join(str(Path(args.plots) / m) for m in made)}; {time.perf_counter() - t0:.1f} s")
    figures = {"fat_tree": [{k: r[k] for k in ("policy", "alpha", "entries", "max_device_entries",
                                               "transmissions_per_message", "false_positive_per_message")}
                            | {"memory_per_layer": {x: v["entries"] for x, v in r["memory"].items()},
                               "fp_per_layer": {x: v["false_positive"] for x, v in r["traffic"].items()}}
                            for r in fat],
               "graph": [{k: r[k] for k in ("policy", "entries", "max_device_entries", "transmissions_per_message",
                                            "false_positive_per_message", "compile_s")} for r in graph]}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
