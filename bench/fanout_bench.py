"""Fan-out cost: TC clones against one XDP broadcast, per delivered copy (#13 item 3).

    sudo python bench/fanout_bench.py [--subscribers 8] [--subscribers 64] [--messages 1] [--messages 12]

A namespace lab of N subscribers, each behind its own veth (GRO on at the far end, so it takes
XDP frames) and each a subscriber endpoint: every copy is rewritten to its MAC, IP and UDP port,
as in the broker benchmark. camus-xdp is attached to the broker interface once per fan-out mode
(`--fanout tc`, then `xdp`) and its classifier is run by BPF_PROG_TEST_RUN in live-frames mode
with the broker interface as the ingress: what the program returns is carried out for real
(XDP_PASS: up the stack into TC, which clones; XDP_REDIRECT: the broadcast and its egress
programs). The kernel's time per run covers the classification, the copies, their pruning and
transmission into the veths, and (softirqs run when a batch ends) the subscribers' receive side.

Cases: a packet of M ITCH messages going to K of the N ports, every copy keeping every message
(`whole`), or every second message for port 1 only, so K-1 copies are pruned to half (`pruned`);
K = 0 is the classification alone (dropped in XDP). Per copy = (ns per packet - the K = 0
figure) / copies made per packet; the last column says how many of the K copies were made (a
veth refuses frames while its ring is full: live frames come in bursts of 64 packets).

Three ways: TC clones; XDP broadcast through the devmap of the packet's port set (a group,
what `--fanout xdp` uses whenever the rules' leaves have that set, and `auto` from 16 copies);
and XDP broadcast to every port with the unwanted copies dropped (the fallback for a union of
sets no leaf has: the bench removes the groups and lets any K use it, to price it). The last
one pays for N copies whatever K is: where it beats TC sets dataplane/fanout.py's
BROADCAST_COPY_COST.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
from pathlib import Path

XDP_MD = struct.Struct("<6I")      # data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex


def rules_for(n: int, ks: list[int]) -> str:
    lines = [f"stock == G{k} : fwd({', '.join(str(p) for p in range(1, k + 1))})" for k in ks]
    return "\n".join(lines + ["stock == ONE : fwd(1)"]) + "\n"


def packet(spec, lab, k: int, m: int, pruned: bool) -> bytes:
    from camus.compiler.codec.packets import build_packet, message_from_text
    msgs = []
    for i in range(m):
        stock = "NONE" if k == 0 else ("ONE" if pruned and i % 2 else f"G{k}")
        msgs.append(message_from_text(spec, f"stock={stock} price=100"))
    return build_packet(spec, msgs, dst_mac=lab.broker_mac(), src_ip=f"{lab.net}.0.1", dst_ip=f"{lab.net}.0.2")


def measure(n: int, ms: list[int], repeat: int, rounds: int, endpoints: bool = True) -> list[dict]:
    from camus.compiler.compile import CompileOptions, compile_rules
    from camus.data import apps_dir
    from camus.compiler.language.spec_parser import load_spec
    from camus.dataplane import fanout, runtime
    from camus.dataplane.installed import pin_dir
    from camus.dataplane.maps import MapSet
    from camus.lab.namespaces import Lab, run_lab_prefix
    from camus.dataplane.testrun import libbpf, live_frames

    ks = sorted({1, max(1, n // 4), max(1, n // 2), n})
    spec_path = apps_dir() / "itch" / "itch.p4"
    spec = load_spec(spec_path)
    rules = rules_for(n, ks)
    compiled = compile_rules(spec, rules, options=CompileOptions(count_rules=0))
    rows: dict[tuple, dict] = {}
    with Lab(run_lab_prefix("cf"), subscribers=n, remote_endpoint=False) as lab, tempfile.TemporaryDirectory() as tmp:
        ports = (lab.write_endpoint_ports if endpoints else lab.write_ports)(Path(tmp) / "ports.yaml")
        rules_path = Path(tmp) / "rules.txt"
        rules_path.write_text(rules)
        ifindex = int(Path(f"/sys/class/net/{lab.broker}/ifindex").read_text())
        cases = [(k, m, pruned) for m in ms for k in [0, *ks] for pruned in ((False, True) if k > 1 and m > 1
                                                                                 else (False,))]
        frames = {c: packet(compiled.spec, lab, *c) for c in cases}
        for mode in ("tc", "xdp", "all"):
            inst = runtime.attach(lab.broker, compiled, str(spec_path), str(rules_path), "native",
                                  ports_path=str(ports), fanout_mode="tc" if mode == "tc" else "xdp")
            try:
                if mode == "all":            # no groups, and the devmap of all for any packet
                    maps = MapSet.from_pins(pin_dir(lab.broker))
                    plan = fanout.FanPlan(tuple((b, i) for b, i in inst.fan_entries), 1)
                    fanout.sync_groups(maps, -1, plan, [])
                    prog_fan = maps.lib.bpf_obj_get(str(pin_dir(lab.broker) / "prog_fan").encode())
                    fanout.install(maps, prog_fan, plan)
                    os.close(prog_fan)
                    maps.close()
                fd = libbpf().bpf_obj_get(str(pin_dir(lab.broker) / "prog_xdp").encode())
                for c in cases:
                    pkt = frames[c]
                    ctx = XDP_MD.pack(0, len(pkt), 0, ifindex, 0, 0)
                    before = runtime.stats(lab.broker)
                    live_frames(fd, pkt, ctx, 1000)                                  # warm up
                    ns = statistics.median(live_frames(fd, pkt, ctx, repeat) for _ in range(rounds))
                    after = runtime.stats(lab.broker)
                    k = c[0]
                    by_fan = after["broadcast"] - before["broadcast"]
                    if k and mode != "tc" and by_fan == 0:
                        raise SystemExit(f"case {c}: no broadcast in xdp mode (does {lab.sub_if(1, False)} take "
                                         "XDP frames?)")
                    # copies made: a veth refuses some when its ring is full (64-packet bursts)
                    made = sum(after.get(f"port {p}", 0) - before.get(f"port {p}", 0) for p in lab.ports)
                    row = rows.setdefault(c, {"subscribers": n, "to_ports": k, "messages": c[1], "pruned": c[2]})
                    row[f"{mode}_ns"] = int(ns)
                    row[f"{mode}_made"] = round(made / (k * (repeat * rounds + 1000)), 3) if k else None
                os.close(fd)
            finally:
                runtime.detach(lab.broker)
    out = []
    for (k, m, pruned), r in rows.items():
        base = rows[(0, m, False)]
        for mode in ("tc", "xdp", "all"):          # per copy actually made
            r[f"{mode}_ns_per_copy"] = (round((r[f"{mode}_ns"] - base[f"{mode}_ns"]) / (k * r[f"{mode}_made"]))
                                        if k and r[f"{mode}_made"] else None)
        out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", type=int, action="append", help="ports in the lab (default 8 and 64)")
    ap.add_argument("--messages", type=int, action="append", help="messages per packet (default 1 and 12)")
    ap.add_argument("--repeat", type=int, default=100_000, help="live-frame runs per measurement")
    ap.add_argument("--rounds", type=int, default=5, help="measurements per case (the median is shown)")
    ap.add_argument("--ifaces", action="store_true",
                    help="interface ports instead of endpoints: copies leave unchanged (the broker's MAC and "
                         "IP) and the subscriber's kernel drops them on arrival, so the figures are the "
                         "broker's side alone")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces, BPF)", file=sys.stderr)
        return 1
    rows = []
    print(f"{'subs':>5} {'to':>4} {'msgs':>5} {'copies':>7} {'TC ns/pkt':>10} {'XDP ns/pkt':>11} {'all ns/pkt':>11} "
          f"{'TC ns/copy':>11} {'XDP ns/copy':>12} {'all ns/copy':>12} {'XDP/TC':>7} {'all/TC':>7} "
          f"{'made TC/XDP/all':>16}")
    for n in args.subscribers or [8, 64]:
        for r in measure(n, args.messages or [1, 12], args.repeat, args.rounds, not args.ifaces):
            rows.append(r)
            per = [r[f"{m}_ns_per_copy"] for m in ("tc", "xdp", "all")]
            ratios = [f"{x / per[0]:.2f}" if per[0] and x is not None else "-" for x in per[1:]]
            print(f"{n:>5} {r['to_ports']:>4} {r['messages']:>5} {'pruned' if r['pruned'] else 'whole':>7} "
                  f"{r['tc_ns']:>10} {r['xdp_ns']:>11} {r['all_ns']:>11} " +
                  " ".join(f"{'-' if x is None else x:>{w}}" for x, w in zip(per, (11, 12, 12))) +
                  f" {ratios[0]:>7} {ratios[1]:>7} " +
                  ("/".join(f"{r[f'{m}_made']:.0%}" for m in ("tc", "xdp", "all")) if r["to_ports"] else "-"),
                  flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
