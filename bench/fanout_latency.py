"""When each subscriber gets its copy: TC clones against XDP broadcast, one packet at a time.

    sudo python bench/fanout_latency.py [--subscribers 2] [--subscribers 8] [--packets 3000]

A namespace lab of N subscribers (each a subscriber endpoint, GRO on at its end); one rule sends
every packet to all N. A raw socket in the publisher's namespace sends one-message ITCH packets
every 0.5 ms with its wall clock in the order reference; each subscriber's UDP socket reads them
with kernel receive timestamps (SO_TIMESTAMPNS). Printed per mode and subscriber: the median and
p99 of kernel receive time - send time (the stack's part) and of user receive time - send time
(with the receiver's wake-up), in µs. The sender's own syscall is in both, equally.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RECEIVER = r'''
import socket, struct, sys, time, json
OFF = int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 35, 1)                     # SO_TIMESTAMPNS
s.bind((sys.argv[1], 26400))
s.settimeout(3)
print("ready", flush=True)
out = []
try:
    while True:
        data, anc, _, _ = s.recvmsg(2048, 64)
        user = time.time_ns()
        kernel = next(struct.unpack("qq", d[:16]) for lvl, typ, d in anc)
        sent = int.from_bytes(data[OFF:OFF + 8], "big")
        out.append((kernel[0] * 10**9 + kernel[1] - sent, user - sent))
except socket.timeout:
    pass
print(json.dumps(out))
'''

SENDER = r'''
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame, n, off = bytes.fromhex(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for _ in range(n):
    s.send(frame[:off] + time.time_ns().to_bytes(8, "big") + frame[off + 8:])
    time.sleep(0.0005)
'''

MARK = 0x1122334455667788          # where the send time goes: the order reference's bytes


def pct(values: list[int], q: float) -> float:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))] / 1000, 1)


def measure(n: int, packets: int) -> list[dict]:
    from camus.compiler.codec.packets import build_packet, message_from_text
    from camus.compiler.compile import compile_rules
    from camus.compiler.language.spec_parser import load_spec
    from camus.data import apps_dir
    from camus.dataplane import runtime
    from camus.lab.namespaces import Lab, run_lab_prefix
    spec_path = apps_dir() / "itch" / "itch.p4"
    spec = load_spec(spec_path)
    rules = f"stock == GOOGL : fwd({', '.join(str(p) for p in range(1, n + 1))})\n"
    compiled = compile_rules(spec, rules)
    rows = []
    with Lab(run_lab_prefix("cl"), subscribers=n, remote_endpoint=False) as lab, tempfile.TemporaryDirectory() as tmp:
        ports = lab.write_endpoint_ports(Path(tmp) / "ports.yaml")
        (Path(tmp) / "rules.txt").write_text(rules)
        msg = message_from_text(spec, "stock=GOOGL price=10")
        msg["add_order.order_ref_number"] = MARK
        frame = build_packet(spec, [msg], dst_mac=lab.broker_mac(), src_ip=f"{lab.net}.0.1", dst_ip=f"{lab.net}.0.2")
        off = frame.index(MARK.to_bytes(8, "big"))
        for mode in ("tc", "xdp"):
            runtime.attach(lab.broker, compiled, str(spec_path), str(Path(tmp) / "rules.txt"), "native",
                           ports_path=str(ports), fanout_mode=mode)
            try:
                receivers = {}
                for p in lab.ports:
                    proc = subprocess.Popen(["ip", "netns", "exec", lab.sub_ns(p), sys.executable, "-c", RECEIVER,
                                             lab.sub_ip(p), str(off - 42)], stdout=subprocess.PIPE, text=True)
                    if proc.stdout.readline().strip() != "ready":          # type: ignore[union-attr]
                        raise SystemExit(f"receiver {p} did not start")
                    receivers[p] = proc
                subprocess.run(["ip", "netns", "exec", lab.pub_ns, sys.executable, "-c", SENDER, lab.pub_if,
                                frame.hex(), str(packets), str(off)], check=True)
                for p, proc in receivers.items():
                    got = json.loads(proc.communicate()[0].strip().splitlines()[-1])
                    if len(got) != packets:
                        raise SystemExit(f"{mode}: subscriber {p} got {len(got)} of {packets}")
                    rows.append({"subscribers": n, "mode": mode, "subscriber": p,
                                 "kernel_p50_us": pct([k for k, _ in got], 0.5),
                                 "kernel_p99_us": pct([k for k, _ in got], 0.99),
                                 "user_p50_us": pct([u for _, u in got], 0.5),
                                 "user_p99_us": pct([u for _, u in got], 0.99)})
                if mode == "xdp" and runtime.stats(lab.broker)["broadcast"] < packets:
                    raise SystemExit("xdp: the packets did not go by broadcast")
            finally:
                runtime.detach(lab.broker)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", type=int, action="append", help="subscribers, all subscribed (default 2 and 8)")
    ap.add_argument("--packets", type=int, default=3000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces, XDP)", file=sys.stderr)
        return 1
    rows = []
    print(f"{'subs':>5} {'mode':>4} {'sub':>4} {'kernel p50':>11} {'kernel p99':>11} {'user p50':>9} {'user p99':>9}   µs")
    for n in args.subscribers or [2, 8]:
        for r in measure(n, args.packets):
            rows.append(r)
            print(f"{n:>5} {r['mode']:>4} {r['subscriber']:>4} {r['kernel_p50_us']:>11} {r['kernel_p99_us']:>11} "
                  f"{r['user_p50_us']:>9} {r['user_p99_us']:>9}", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
