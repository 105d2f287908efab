"""XDP classifier cost on a live, varied feed: the kernel's own run time per packet.

    sudo python bench/xdp_feed_cost.py                 # 400K frames per case
    sudo python bench/xdp_feed_cost.py --frames 100000 --distinct 1024

bench/xdp_bench.py runs one packet `repeat` times with BPF_PROG_TEST_RUN: every table entry the
packet touches stays in L1 and the branch predictor learns the packet's twelve messages by
heart, which real feeds never allow. Here the classifier is attached (native XDP, no TC) to one
end of a veth, the XDP live-frames sender (bench/xdp_sender.py) sends `--distinct` different
frames in a loop into the other end, and the kernel's BPF statistics (kernel.bpf_stats_enabled:
run_time_ns / run_cnt of the entry program, tail calls included) give ns per packet. The same
feed goes through the parse-only floor (the same parser reading the same fields, classifying
nothing) and through the classifier with 10, 1K and 100K ITCH subscriptions, for 1 and 12
messages a packet; messages are on subscribed symbols at random prices, as in xdp_bench.
The statistics' own clock reads (a few ns per run) are in every figure alike.

Read the ratios with this in mind: the floor drops every packet, while the classifier hands the
packets it delivers to the stack (here without TC: XDP_PASS), whose work between two packets
evicts the tables from the caches, so the next packet's first lookups miss. A last case sends
the 100K classifier messages nobody subscribed to (dropped, like the floor's). The last line is
one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
SIZES = (10, 1000, 100_000)
BROKER, PEER = "cxf-brk0", "cxf-pub0"


def feed(spec, n_msgs: int, count: int, seed: int, syms: list[str], dst_mac: bytes) -> list[tuple[bytes, list[int]]]:
    """xdp_bench's packets (random prices on `syms`) as the sender's frames (no timestamps)."""
    from xdp_bench import packets
    return [(p, []) for p in packets(spec, n_msgs, count, seed, syms, dst_mac=dst_mac)]


def ns_per_packet(prog, frames: list[tuple[bytes, list[int]]], count: int) -> float:
    """Attach `prog` to the broker end, send `count` frames of `frames` (in a loop) from the
    peer; the kernel's mean run time of camus_xdp over them."""
    from bpf_cpu import run_times
    from xdp_sender import XdpSender
    from camus.dataplane.netlink import attach_xdp, remove_xdp
    sender = XdpSender(frames)
    try:
        attach_xdp(prog.fn.fd, BROKER, "native", replace=True)
        sender.send(PEER, min(count, 20_000))                 # warm-up: pages, caches
        before = run_times().get("camus_xdp", (0, 0))
        sender.send(PEER, count)
        time.sleep(0.1)                                      # the receiving NAPI drains
        after = run_times().get("camus_xdp", (0, 0))
    finally:
        remove_xdp(BROKER, "native")
        sender.bpf.cleanup()
    runs = after[1] - before[1]
    if runs < count // 2:
        raise RuntimeError(f"only {runs:,} of {count:,} frames reached the classifier")
    return (after[0] - before[0]) / runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=400_000, help="frames sent per case")
    ap.add_argument("--distinct", type=int, default=4096, help="different frames in the feed")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds, best kept")
    args = ap.parse_args()
    from bpf_cpu import BpfStats
    from camus.bench.workloads import itch_rules, symbols
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.compiler.backends.ebpf.tables import map_contents
    from camus.compiler.compile import compile_rules
    from camus.compiler.language.spec_parser import load_spec
    from camus.lab.namespaces import sh
    from camus.dataplane.maps import CFG_TC
    from camus.dataplane.program import DataplaneError, XdpProgram, require_root

    require_root()
    # One CPU: the sender's runs, the veth's NAPI and so the classifier all stay on it.
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    spec = load_spec(ROOT / "apps" / "itch" / "itch.p4")
    sh("ip", "link", "del", BROKER, check=False)
    sh("ip", "link", "add", BROKER, "type", "veth", "peer", "name", PEER)
    progs = []
    try:
        for dev in (BROKER, PEER):
            sh("ip", "link", "set", dev, "up")
        mac = bytes.fromhex(Path(f"/sys/class/net/{BROKER}/address").read_text().strip().replace(":", ""))
        cases: dict[str, tuple[object, list]] = {}
        try:
            floor = XdpProgram.load(spec, EbpfLimits(parse_only=True))
        except DataplaneError as exc:
            print(f"xdp_feed_cost: {exc}", file=sys.stderr)
            return 1
        progs.append(floor)
        all_syms = symbols(100)
        for n_msgs in (1, 12):
            cases[f"floor_{n_msgs}msg"] = (floor, feed(spec, n_msgs, args.distinct, 1, all_syms, mac))
        for n in SIZES:
            rules = itch_rules(n, seed=1)
            p = XdpProgram.load(spec)
            progs.append(p)
            p.write(map_contents(compile_rules(spec, "\n".join(rules)).pipeline, spec))
            p.maps.cfg(CFG_TC, 1)                            # as deployed: TC counts delivered rules
            subscribed = sorted({r.split()[2] for r in rules})
            for n_msgs in (1, 12):
                cases[f"{n}_{n_msgs}msg"] = (p, feed(spec, n_msgs, args.distinct, 2, subscribed, mac))
        # Most of a real feed is on symbols nobody subscribed to: each message misses the first
        # table and the packet is dropped, as the floor drops every packet.
        unwanted = [f"ZZ{i:03d}" for i in range(100)]
        cases["100000_12msg_unsubscribed"] = (progs[-1], feed(spec, 12, args.distinct, 3, unwanted, mac))
        best = {k: float("inf") for k in cases}
        with BpfStats():
            for _ in range(args.rounds):
                for name, (p, frames) in cases.items():
                    best[name] = min(best[name], ns_per_packet(p, frames, args.frames))
    finally:
        for p in progs:
            p.close()
        sh("ip", "link", "del", BROKER, check=False)
    print(f"{'subscriptions':>13} {'msgs/pkt':>8} {'ns/packet':>10} {'x floor':>8}   (live feed of {args.distinct:,} "
          f"distinct frames, {args.frames:,} per case, kernel BPF stats, best of {args.rounds})")
    figures: dict[str, float] = {k: round(v, 1) for k, v in best.items()}
    for n_msgs in (1, 12):
        print(f"{'floor':>13} {n_msgs:>8} {best[f'floor_{n_msgs}msg']:>10.0f} {'1':>8}")
    for n in SIZES:
        for n_msgs in (1, 12):
            ratio = best[f"{n}_{n_msgs}msg"] / best[f"floor_{n_msgs}msg"]
            figures[f"ratio_to_floor_{n}_{n_msgs}msg"] = round(ratio, 2)
            print(f"{n:>13} {n_msgs:>8} {best[f'{n}_{n_msgs}msg']:>10.0f} {ratio:>8.2f}")
    ratio = best["100000_12msg_unsubscribed"] / best["floor_12msg"]
    figures["ratio_to_floor_100000_12msg_unsubscribed"] = round(ratio, 2)
    print(f"{'100000':>13} {12:>8} {best['100000_12msg_unsubscribed']:>10.0f} {ratio:>8.2f}   (no message subscribed: "
          f"dropped, as the floor drops)")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
