"""Same-semantics topic benchmark: one topic workload through camus-xdp (MQTT edge brokers and the
XDP broker), mosquitto and nats-server, every broker receiving exactly the same subscriptions.

The workload (bench/workloads.py): Zipf topics `site<s>/dev<d>/<metric>`, MQTT filters (half
exact, a quarter with one `+`, the rest `#` tails and a few wide ones) spread over the
subscribers. NATS gets each filter as subjects of the same meaning (`+` -> `*`; `a/#` -> `a` and
`a.>`). Every publication carries its sequence number and send time; each subscriber records
what arrives with the kernel's receive timestamp; afterwards each subscriber's deliveries are
compared with what its filters select (`topics.matches`): precision and recall must be 1.0.

Per broker and phase (`--rate` msgs/s, then as fast as the publisher goes): delivered msgs/s
(distinct deliveries over the time from the first send to the last delivery), loss, duplicates,
latency p50/p99. The publisher and subscribers are the same raw-socket clients for every broker
(bench/topic_clients.py).

    sudo python bench/topic_bench.py --subscriptions 1000 --subscribers 4 --messages 20000
    sudo python bench/topic_bench.py --brokers camus,mosquitto --mqtt 3.1.1,5     # MQTT 5 clients beside 3.1.1
"""
from __future__ import annotations

import argparse
import json
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

from camus.bench.topic_clients import parse, publish_paced
from camus.bench.workloads import topic_filters, topic_name
from camus.compiler.language.topics import matches
from camus.bench.brokers import TOPIC_BROKERS, make_broker
from camus.lab.namespaces import Lab, netns_popen, sh

HERE = Path(__file__).resolve().parent
SPEC = HERE.parent / "apps" / "topics" / "topics.p4"
EDGE_PORT = 9201


def nats_subjects(flt: str) -> list[str]:
    """An MQTT filter as NATS subjects with the same matches (for topics without '$' or '.')."""
    levels = ["*" if lv == "+" else lv for lv in flt.split("/")]
    if levels[-1] != "#":
        return [".".join(levels)]
    head = levels[:-1]
    return [">"] if not head else [".".join(head), ".".join(head + [">"])]


# -- the publisher (run in the publisher's namespace) -------------------------------------------
def publisher(proto: str, host: str, port: int, topics_file: str, rate: float, base: int = 0) -> int:
    names = Path(topics_file).read_text().split()
    items = [(t.replace("/", ".") if proto == "nats" else t, struct.pack("!QQ", base + seq, 0))
             for seq, t in enumerate(names)]
    sent, elapsed = publish_paced(proto, host, port, items, 8, lambda: struct.pack("!Q", time.time_ns()), rate)
    print(json.dumps({"sent": sent, "seconds": elapsed}), flush=True)
    return 0


# -- the runner ------------------------------------------------------------------------------
class Setup:
    """One broker on the lab: start(), where clients connect, installed(), stop(). The topic
    brokers are bench/brokers.py's; camus-xdp is the XDP broker with an edge broker per
    namespace (the publisher's and each subscriber's)."""

    def __init__(self, name: str, lab: Lab, work: Path, filters: dict[int, list[str]], mqtt5: bool = False) -> None:
        self.name, self.lab, self.work, self.filters = name, lab, work, filters
        self.mqtt5 = mqtt5                  # the MQTT brokers' clients speak MQTT 5
        self.procs: list[subprocess.Popen] = []
        self.broker = None if name == "camus" else make_broker(name, lab, work)

    @property
    def label(self) -> str:
        return f"{self.name}/5" if self.mqtt5 and self.proto == "mqtt5" else self.name

    @property
    def proto(self) -> str:
        base = "mqtt" if self.broker is None else TOPIC_BROKERS[self.name][0]
        return "mqtt5" if base == "mqtt" and self.mqtt5 else base

    @property
    def address(self) -> tuple[str, int]:
        """Where the lab's clients connect (camus-xdp: the edge broker in their own namespace)."""
        return ("127.0.0.1", 1883) if self.broker is None else (f"{self.lab.net}.0.2", TOPIC_BROKERS[self.name][1])

    def start(self) -> None:
        if self.broker is not None:
            self.broker.start(None, SPEC, SPEC, SPEC)     # (the topic brokers take no tables)
            return
        from camus.compiler.compile import compile_rules
        from camus.compiler.language.spec_parser import load_spec
        from camus.dataplane import runtime
        ports = self.lab.write_endpoint_ports(self.work / "ports.yaml", EDGE_PORT)
        (self.work / "none.rules").write_text("# edge brokers add the subscriptions\n")
        runtime.attach(self.lab.broker, compile_rules(load_spec(SPEC), ""), str(SPEC), str(self.work / "none.rules"),
                       "native", ports_path=str(ports))
        edge = [str(Path(sys.executable).parent / "camus-xdp"), "edge", "--spec", str(SPEC),
                "--listen", "127.0.0.1:1883"]
        edges = [(self.lab.pub_ns, ["--feed", f"{self.lab.net}.0.2:9200"])] + [
            (self.lab.sub_ns(p), ["--deliveries", f"0.0.0.0:{EDGE_PORT}", "--iface", self.lab.broker, "--port", str(p)])
            for p in self.lab.ports]
        for ns, extra in edges:
            self.procs.append(netns_popen(ns, *edge, *extra, bpffs=True, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        for ns, _ in edges:                   # each edge broker listens before clients come
            while ":1883" not in sh("ip", "netns", "exec", ns, "ss", "-ltn").stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the edge broker in {ns} did not start")
                time.sleep(0.1)

    def installed(self) -> bool:
        if self.broker is not None:
            return True
        from camus.dataplane import installed as state
        want = sum(len(set(f)) for f in self.filters.values())
        return len(state.load_installed(self.lab.broker).rule_lines) >= want

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            return
        from camus.dataplane import runtime
        for p in self.procs:                  # SIGTERM: each edge broker takes its rules out
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        runtime.detach(self.lab.broker)


def run_broker(setup: Setup, lab: Lab, topics: list[str], rates: list[float], work: Path) -> list[dict]:
    """Subscribe once, then one publisher run per rate (sequence numbers apart); each
    subscriber records until its deliveries stop."""
    proto = setup.proto
    host, port = setup.address
    subs = {}
    for p, fl in setup.filters.items():
        wanted = [s for f in fl for s in nats_subjects(f)] if proto == "nats" else fl
        out = work / f"{setup.label.replace('/', '-v')}-{p}.rec"
        subs[p] = (netns_popen(lab.sub_ns(p), sys.executable, "-m", "camus.bench.topic_clients", "sub", proto, host,
                       str(port), str(out), "900", "2.0", *wanted, stdout=subprocess.PIPE, text=True), out)
        assert subs[p][0].stdout.readline().strip() == "ready"            # type: ignore[union-attr]
    deadline = time.monotonic() + 600
    while not setup.installed():
        if time.monotonic() > deadline:
            raise RuntimeError("subscriptions were not installed in 600 s")
        time.sleep(0.2)
    time.sleep(1.0)
    tfile = work / "topics.txt"
    tfile.write_text("\n".join(topics) + "\n")
    starts, sent = [], []
    for k, rate in enumerate(rates):
        starts.append(time.time_ns())
        pub = netns_popen(lab.pub_ns, sys.executable, str(HERE / "topic_bench.py"), "pub", proto, host, str(port), str(tfile),
                  str(rate), str(k * len(topics)), stdout=subprocess.PIPE, text=True)
        sent.append(json.loads(pub.communicate(timeout=600)[0].strip().splitlines()[-1])["sent"])
    n = len(topics)
    per = [{"expected": 0, "got": 0, "false": 0, "dupes": 0, "lat": [], "last": starts[k], "each": []}
           for k in range(len(rates))]
    for p, (proc, out) in subs.items():
        proc.communicate(timeout=900)
        want = {i for i, t in enumerate(topics) if any(matches("mqtt", f, t) for f in setup.filters[p])}
        seen: list[set[int]] = [set() for _ in rates]
        data, stamps, pos, stream = out.read_bytes(), [], 0, bytearray()
        while pos + 12 <= len(data):                   # records: ts(8) len(4) bytes
            ts, size = struct.unpack_from("<QI", data, pos)
            stream += data[pos + 12:pos + 12 + size]
            stamps.append((len(stream), ts))
            pos += 12 + size
        j = 0
        for end, payload in parse(proto, bytes(stream)):
            while j < len(stamps) - 1 and stamps[j][0] < end:
                j += 1
            seq, sent_ns = struct.unpack("!QQ", payload[:16])
            k, i = divmod(seq, n)
            if k >= len(rates):
                continue
            ph = per[k]
            if i in seen[k]:
                ph["dupes"] += 1
                continue
            seen[k].add(i)
            ph["lat"].append(stamps[j][1] - sent_ns)
            ph["last"] = max(ph["last"], stamps[j][1])
        for k, ph in enumerate(per):
            ph["expected"] += len(want)
            ph["got"] += len(seen[k] & want)
            ph["false"] += len(seen[k] - want)
            ph["each"].append(round(len(seen[k] & want) / len(want), 4) if want else 1.0)
    rows = []
    for k, (rate, ph) in enumerate(zip(rates, per)):
        lat, got = sorted(ph["lat"]), ph["got"]
        secs = max(1e-9, (ph["last"] - starts[k]) / 1e9)

        def pick(q: float, lat: list[int] = lat) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6, 3) if lat else None
        rows.append({"broker": setup.label, "phase": "paced" if rate else "max", "rate": rate, "sent": sent[k],
                     "expected": ph["expected"], "delivered": got,
                     "recall": round(got / ph["expected"], 6) if ph["expected"] else 1.0,
                     "precision": round(got / (got + ph["false"]), 6) if got + ph["false"] else 1.0,
                     "duplicates": ph["dupes"], "delivered_per_s": round(got / secs),
                     "p50_ms": pick(0.5), "p99_ms": pick(0.99), "recall_per_subscriber": ph["each"]})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Delivered msgs/s (unpaced) and p99 (paced) per broker against subscriptions."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for broker in dict.fromkeys(r["broker"] for r in rows):
        for ax, phase, key in ((left, "max", "delivered_per_s"), (right, "paced", "p99_ms")):
            pts = sorted((r["subscriptions"], r[key]) for r in rows
                         if r["broker"] == broker and r["phase"] == phase and r[key] is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", label="camus-xdp" if broker == "camus" else broker)
    for ax, title in ((left, "delivered msgs/s, unpaced"), (right, "p99 latency (ms), paced")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("subscriptions")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("the same topic subscriptions through each broker (bench/topic_bench.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "pub":
        return publisher(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), int(sys.argv[7]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="camus,mosquitto,nats")
    ap.add_argument("--subscriptions", type=int, action="append")
    ap.add_argument("--subscribers", type=int, default=4)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=10_000, help="msgs/s of the paced phase (then: unpaced)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/camus-topic-bench"))
    ap.add_argument("--plot", type=Path, help="write the figure here (PNG); also from --replot")
    ap.add_argument("--replot", type=Path, help="plot the JSON last line of an earlier run's output, run nothing")
    ap.add_argument("--mqtt", default="3.1.1", help="the MQTT version(s) the MQTT brokers' clients speak: 3.1.1, 5 "
                    "or 3.1.1,5 (a row per version; NATS is NATS)")
    args = ap.parse_args()
    versions = args.mqtt.split(",")
    if not versions or any(v not in ("3.1.1", "5") for v in versions):
        ap.error(f"--mqtt {args.mqtt}: 3.1.1, 5 or 3.1.1,5")
    if args.replot:
        rows = json.loads(args.replot.read_text().strip().splitlines()[-1])["rows"]
        plot(rows, args.plot or args.replot.with_suffix(".png"))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    topics = [topic_name(rng) for _ in range(args.messages)]
    rows = []
    print(f"(command: {' '.join(['python', 'bench/topic_bench.py', *sys.argv[1:]])})", flush=True)
    print(f"{'broker':>10} {'subs':>7} {'phase':>6} {'sent':>7} {'expected':>9} {'recall':>7} {'prec':>6} "
          f"{'dup':>6} {'deliv/s':>9} {'p50 ms':>8} {'p99 ms':>8}", flush=True)
    for n in args.subscriptions or [1000]:
        flts = topic_filters(n, args.seed)
        filters = {p: flts[p - 1::args.subscribers] for p in range(1, args.subscribers + 1)}
        runs = [(name, v == "5") for name in args.brokers.split(",")
                for v in (versions if name == "camus" or TOPIC_BROKERS[name][0] == "mqtt" else versions[:1])]
        for name, mqtt5 in runs:
            with Lab(prefix="camus-tb", subscribers=args.subscribers, net="10.83", routed=True) as lab:
                setup = Setup(name, lab, args.out, filters, mqtt5)
                setup.start()
                try:
                    for r in run_broker(setup, lab, topics, [args.rate, 0.0], args.out):
                        r["subscriptions"] = n
                        rows.append(r)
                        print(f"{setup.label:>10} {n:>7} {r['phase']:>6} {r['sent']:>7} {r['expected']:>9} {r['recall']:>7} "
                              f"{r['precision']:>6} {r['duplicates']:>6} {r['delivered_per_s']:>9} "
                              f"{r['p50_ms']!s:>8} {r['p99_ms']!s:>8}", flush=True)
                finally:
                    setup.stop()
    if args.plot:
        plot(rows, args.plot)
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
