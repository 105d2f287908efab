"""One subscription change into an attached interface's XDP maps as a delta (root).

    sudo python bench/delta_bench.py [-n 1000 -n 100000] [--changes 200]

Per size: ITCH subscriptions attached to a veth (no addresses: nothing is routed), taken over
by a `LiveClassifier` (one whole write into the other bank), then `--changes` changes, each one
subscription added or removed again: half for a symbol already held (a new subscriber on a busy
symbol: its price table is rebuilt), half for a symbol nobody held. Each change is timed from
the call to `apply` (compile + map writes) and, for the new symbols, until the attached program
classifies a packet of that symbol differently (BPF_PROG_TEST_RUN on the pinned program:
dropped before an add, delivered after; the other way round for a remove), so the time is
kernel-verified. The last line is one JSON object.
"""
from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"
IFACE, PEER = "cxdb0", "cxdb1"
XDP_DROP = 1


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class KernelCheck:
    """Whether the program attached to an interface delivers a packet (BPF_PROG_TEST_RUN on its
    pinned program): a change is timed until the kernel classifies by it."""

    def __init__(self, iface: str, price: int = 500) -> None:
        from camus.compiler.codec.packets import build_packet, message_from_text, packet_addresses
        from camus.compiler.language.spec_parser import load_spec
        from camus.dataplane import installed as state
        from camus.dataplane.testrun import libbpf, test_run
        self.spec, self.price = load_spec(SPEC), price
        self.build, self.msg, self.addr, self.run = build_packet, message_from_text, packet_addresses, test_run
        self.fd = libbpf().bpf_obj_get(str(state.pin_dir(iface) / "prog_xdp").encode())
        if self.fd < 0:
            raise RuntimeError(f"{iface}: no attached program pinned")

    def frame(self, stock: str) -> bytes:
        """An ITCH packet of one message on `stock` at the check's price."""
        m = self.msg(self.spec, f"stock={stock} price={self.price}")
        return self.build(self.spec, [m], **self.addr(self.spec, m))

    def delivered(self, pkt: bytes) -> bool:
        return self.run(self.fd, pkt).retval != XDP_DROP

    def wait(self, pkt: bytes, delivered: bool, timeout: float = 5.0) -> None:
        """Spin until the program delivers (or drops) `pkt`."""
        end = time.perf_counter() + timeout
        while self.delivered(pkt) != delivered:
            if time.perf_counter() > end:
                raise AssertionError("the change never reached the data plane")

    def close(self) -> None:
        os.close(self.fd)


def measure(n: int, changes: int) -> dict:
    from camus.bench.workloads import itch_rules, symbols
    from camus.compiler.compile import compile_rules
    from camus.compiler.language.spec_parser import load_spec
    from camus.dataplane import installed as state, runtime
    from camus.dataplane.live import LiveClassifier
    spec = load_spec(SPEC)
    lines = sorted({r for r in itch_rules(n, 1) if r.strip()})
    held = symbols(100)
    subprocess.run(["ip", "link", "del", IFACE], capture_output=True)
    subprocess.run(["ip", "link", "add", IFACE, "type", "veth", "peer", "name", PEER], check=True)
    subprocess.run(["ip", "link", "set", IFACE, "up"], check=True)
    workdir = Path(tempfile.mkdtemp(prefix="camus-delta-"))
    rules = workdir / "rules.txt"
    rules.write_text("".join(f"{ln}\n" for ln in lines))
    live = None
    try:
        t0 = time.perf_counter()
        runtime.attach(IFACE, compile_rules(spec, rules.read_text(), str(rules)), str(SPEC), str(rules), "native")
        attach_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        live = LiveClassifier(IFACE)
        takeover_s = time.perf_counter() - t0
        kernel = KernelCheck(IFACE)
        rng = random.Random(7)
        apply_ms, compile_ms, write_ms, classified_ms, writes = [], [], [], [], []
        for k in range(changes // 2):
            fresh = k % 2 == 1
            stock = f"Z{k:05d}" if fresh else rng.choice(held)
            rule = f"stock == {stock} and price > {rng.randint(1, 499)} : fwd({rng.randint(1, 200)})"
            pkt = kernel.frame(stock)
            for added, removed in (([rule], []), ([], [rule])):
                if fresh:
                    assert kernel.delivered(pkt) != bool(added), stock
                t = time.perf_counter()
                rep = live.apply(added, removed)
                done = time.perf_counter()
                if fresh:
                    kernel.wait(pkt, delivered=bool(added))             # the kernel sees it
                    classified_ms.append((time.perf_counter() - t) * 1e3)
                apply_ms.append((done - t) * 1e3)
                compile_ms.append(rep.compile_ms)
                write_ms.append(rep.write_ms)
                writes.append(rep.writes)
        kernel.close()
        return {"subscriptions": n, "attach_s": round(attach_s, 2), "takeover_s": round(takeover_s, 2),
                "changes": len(apply_ms),
                "apply_ms_p50": round(statistics.median(apply_ms), 2), "apply_ms_p99": round(_p(apply_ms, 0.99), 2),
                "apply_ms_max": round(max(apply_ms), 2),
                "compile_ms_p50": round(statistics.median(compile_ms), 2),
                "write_ms_p50": round(statistics.median(write_ms), 2),
                "classified_ms_p50": round(statistics.median(classified_ms), 2),
                "classified_ms_p99": round(_p(classified_ms, 0.99), 2),
                "writes_p50": statistics.median(writes), "writes_max": max(writes)}
    finally:
        if live is not None:
            live.close()
        if state.state_path(IFACE).exists():           # attach may have failed (and left nothing)
            runtime.detach(IFACE)
        subprocess.run(["ip", "link", "del", IFACE], capture_output=True)
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()


def main() -> int:
    from camus.bench.sizes import run_sizes, size_args
    from camus.dataplane.program import require_root
    require_root()
    default = [1000, 100000]
    ap = size_args(__doc__, default)
    ap.add_argument("--changes", type=int, default=200)
    args = ap.parse_args()
    return run_sizes("delta", f"delta_bench.py --changes {args.changes}", args.n or default,
                     f"{'subs':>8} {'attach':>7} {'takeover':>9} {'apply p50/p99/max':>20} "
                     f"{'compile/write p50':>18} {'classified p50/p99':>19} {'writes p50/max':>15}",
                     lambda n: measure(n, args.changes),
                     lambda n, r: f"{n:>8,} {r['attach_s']:>6.1f}s {r['takeover_s']:>8.1f}s "
                                  f"{r['apply_ms_p50']:>6.1f}/{r['apply_ms_p99']:.1f}/{r['apply_ms_max']:.1f} ms "
                                  f"{r['compile_ms_p50']:>7.1f}/{r['write_ms_p50']:.1f} ms "
                                  f"{r['classified_ms_p50']:>8.1f}/{r['classified_ms_p99']:.1f} ms "
                                  f"{r['writes_p50']:>7.0f}/{r['writes_max']}")


if __name__ == "__main__":
    sys.exit(main())
