"""`camus-xdp bench run`: every broker side by side on one lab, one feed, the same subscribers.

For each number of subscribers a namespace lab is built (publisher, broker host = this
namespace, N subscriber namespaces with addresses and routes); for each number of
subscriptions the ITCH rules are compiled once (the XDP broker and both userspace brokers run
these very tables; the topic brokers get each subscriber's symbols as topics), and the expected
deliveries are computed from them. Each broker then runs two phases:

  throughput  the feed sent as fast as the sender goes, or at --burst-rate (capped at --duration s)
  latency     the feed at a fixed --latency-rate messages/s, for --latency-seconds

The sender is the XDP live-frames publisher (bench/xdp_sender.py: millions of frames a second
from one core, so a broker's lossless rate is its own) or, with `sender="c"`, the AF_PACKET one
(bench/c/send.c, about 160K frames/s here); both send the same frame file.

Receivers record every packet (or TCP chunk) with its kernel receive timestamp; afterwards the
records become Parquet under RUN_DIR, next to the feed, the expected deliveries and one line of
run facts per phase (runs.jsonl). `bench/analysis.py` (Spark) turns that into the report.
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from . import cpus
from .bpf_cpu import BpfStats, broker_seconds
from .brokers import TOPIC_BROKERS, Broker, available, make_broker, system_cpu_seconds
from .cbuild import binary
from .feeds import FeedConfig, add_order, itch_feed, message_seq_ts, parse_mold, rules_for, write_frames
from camus.lab.namespaces import FEED_PORT, Lab, free_net, pass_through, run_lab_prefix

SPEC = Path(__file__).resolve().parent.parent / "apps" / "itch" / "itch.p4"
MASK48 = (1 << 48) - 1


@dataclass
class BenchConfig:
    brokers: list[str]
    out: Path
    subscribers: list[int] = field(default_factory=lambda: [8])
    subscriptions: list[int] = field(default_factory=lambda: [1000, 100_000])
    messages: int = 300_000
    duration: float = 5.0
    burst_rate: int = 0              # the throughput phase's feed msgs/s (0: as fast as the sender goes)
    latency_rate: int = 20_000
    latency_seconds: float = 3.0
    interesting_share: float = 0.05
    seed: int = 1
    search: bool = True              # find each broker's highest lossless feed rate
    search_seconds: float = 2.0
    search_steps: int = 5
    loss_threshold: float = 0.001
    keepup_ms: float = 10.0          # a probe whose p99 exceeds this built a backlog
    sender: str = "xdp"              # xdp: live frames (bench/xdp_sender.py); c: AF_PACKET (bench/c/send.c)
    fanout: str = "auto"             # camus-xdp's copies: attach --fanout (dataplane/fanout.py)
    split_cpus: bool = False         # the sender on CPU 0, the broker and receivers on CPU 1 (bench/cpus.py)
    lab_prefix: str = ""             # the lab's names (namespaces PREFIX-s1..); "" = unique to this run


Progress = Callable[[str, float], None]       # (what is happening, fraction done)


def _records(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes() if path.exists() else b""
    out, pos = [], 0
    while pos + 12 <= len(data):
        ts, n = struct.unpack_from("<QI", data, pos)
        out.append((ts, data[pos + 12:pos + 12 + n]))
        pos += 12 + n
    return out


def _full_ts(rx: int, send48: int) -> int:
    """The send time from its low 48 bits, taken as the latest such time not after rx + 1 s."""
    t = (rx & ~MASK48) | send48
    if t > rx + 1_000_000_000:
        t -= 1 << 48
    return t


def deliveries(path: Path, subscriber: int, proto: str | None) -> dict[str, list]:
    """Receiver records -> rows (subscriber, seq, send_ts, rx_ts, packet)."""
    cols: dict[str, list] = {"subscriber": [], "seq": [], "send_ts": [], "rx_ts": [], "packet": []}
    recs = _records(path)
    if proto is None:                                   # UDP datagrams carrying MoldUDP64
        for k, (ts, payload) in enumerate(recs):
            for m in parse_mold(payload):
                if len(m) == 36:
                    seq, s48 = message_seq_ts(m)
                    for c, v in zip(cols.values(), (subscriber, seq, _full_ts(ts, s48), ts, k)):
                        c.append(v)
        return cols
    from .topic_clients import parse
    stream = b"".join(d for _, d in recs)
    ends, acc = [], 0
    for _, d in recs:
        acc += len(d)
        ends.append(acc)
    import bisect
    for end, payload in parse(proto, stream):
        if len(payload) != 36:
            continue
        k = bisect.bisect_left(ends, end)
        ts = recs[k][0]
        seq, s48 = message_seq_ts(payload)
        for c, v in zip(cols.values(), (subscriber, seq, _full_ts(ts, s48), ts, k)):
            c.append(v)
    return cols


def _write_parquet(cols: dict[str, list], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, type=pa.int64()) for k, v in cols.items()}), path)


class Runner:
    def __init__(self, cfg: BenchConfig, progress: Progress) -> None:
        self.cfg, self.progress = cfg, progress
        self.out = cfg.out
        self.runs = (self.out / "runs.jsonl").open("a")
        self.napi: list[int] = []            # --split-cpus: the feed's NAPI threads (their CPU counts)
        self.receiver_napi: list[int] = []   # --split-cpus: the subscribers' NAPI threads (not counted)

    # -- inputs ---------------------------------------------------------------------------
    def prepare_feed(self, lab: Lab) -> tuple[object, Path, Path, list[int]]:
        feed = itch_feed(FeedConfig(messages=self.cfg.messages, interesting_share=self.cfg.interesting_share,
                                    seed=self.cfg.seed))
        pub_mac = subprocess.run(["ip", "netns", "exec", lab.pub_ns, "cat", f"/sys/class/net/{lab.pub_if}/address"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        frames = write_frames(feed, self.out / "inputs" / f"frames-{lab.n}.bin", src_ip=f"{lab.net}.0.1",
                              dst_ip=f"{lab.net}.0.2", src_mac=bytes.fromhex(pub_mac.replace(":", "")),
                              dst_mac=lab.broker_mac(), port=FEED_PORT)
        raw = self.out / "inputs" / "messages.bin"
        raw.write_bytes(b"".join(add_order(*m) for m in feed.messages))
        cum = [0]                                  # messages in the first k frames
        for pk in feed.packets:
            cum.append(cum[-1] + len(pk))
        if not (self.out / "feed.parquet").exists():
            packet_of = {i: k for k, pk in enumerate(feed.packets) for i in pk}
            _write_parquet({"seq": [m[0] for m in feed.messages], "price": [m[2] for m in feed.messages],
                            "packet": [packet_of[i] for i in range(len(feed.messages))]}, self.out / "feed.parquet")
        return feed, frames, raw, cum

    def compile(self, subscriptions: int, subscribers: int, feed) -> tuple[object, Path, Path, dict[int, list[str]]]:
        from camus.compiler.compile import compile_rules
        from camus.compiler.language.spec_parser import load_spec
        from camus.compiler.backends.userspace import flat_tables, write_flat
        rules = rules_for(subscriptions, subscribers, seed=self.cfg.seed)
        d = self.out / "inputs" / f"n{subscribers}-m{subscriptions}"
        d.mkdir(parents=True, exist_ok=True)
        rules_path = d / "rules.txt"
        rules_path.write_text("\n".join(rules) + "\n")
        compiled = compile_rules(load_spec(SPEC), "\n".join(rules))
        flat = flat_tables(compiled.pipeline, compiled.spec)
        flat_path = write_flat(flat, d / "tables.flat")
        topics: dict[int, set[str]] = {p: set() for p in range(1, subscribers + 1)}
        for r in rules:
            m = re.match(r"stock == (\S+) .* fwd\((\d+)\)", r)
            if m:
                topics[int(m.group(2))].add(m.group(1))
        expected: dict[str, list] = {"seq": [], "subscriber": []}
        for m in feed.messages:
            for p in flat.classify(add_order(*m)):
                expected["seq"].append(m[0])
                expected["subscriber"].append(p)
        _write_parquet(expected, self.out / "expected" / f"subscribers={subscribers}" /
                       f"subscriptions={subscriptions}" / "part.parquet")
        return compiled, rules_path, flat_path, {p: sorted(t) for p, t in topics.items()}

    def wanted(self, subscribers: int, subscriptions: int) -> set[tuple[int, int]]:
        import pyarrow.parquet as pq
        t = pq.read_table(self.out / "expected" / f"subscribers={subscribers}" / f"subscriptions={subscriptions}" /
                          "part.parquet")
        return set(zip(t.column("seq").to_pylist(), t.column("subscriber").to_pylist()))

    # -- one phase ------------------------------------------------------------------------
    def phase(self, lab: Lab, broker: Broker, phase: str, frames: Path, raw: Path, cum: list[int],
              topics: dict[int, list[str]], subscriptions: int, rate: float | None = None,
              seconds: float | None = None, wanted: set[tuple[int, int]] | None = None) -> dict:
        """One phase. With `wanted` (a probe of the rate search) the deliveries are only counted
        against it, nothing is written."""
        cfg = self.cfg
        proto = TOPIC_BROKERS[broker.name][0] if broker.name in TOPIC_BROKERS else None
        if rate is None:
            rate = float(cfg.burst_rate) if phase == "throughput" else float(cfg.latency_rate)
        if seconds is None:
            seconds = cfg.duration if phase == "throughput" else cfg.latency_seconds
        cap = seconds + 120                       # receivers are stopped by the runner long before
        tmp = self.out / "tmp"
        tmp.mkdir(exist_ok=True)
        receivers = {}
        for p in lab.ports:
            out = tmp / f"sub{p}.bin"
            if proto is None:
                cmd = [str(binary("recv")), "udp", lab.sub_ip(p), str(FEED_PORT), str(out), str(cap), str(cap)]
            else:
                cmd = [sys.executable, "-m", "camus.bench.topic_clients", "sub", proto, f"{lab.net}.0.2",
                       str(TOPIC_BROKERS[broker.name][1]), str(out), str(cap), str(cap), *(
                           ("itch." if proto == "nats" else "itch/") + s for s in topics[p])]
                if not topics[p]:
                    continue
            if cfg.split_cpus:                 # the receivers are not the broker: not on its CPU
                cmd = [*cpus.on(cpus.SENDER_CPU), *cmd]
            proc = subprocess.Popen(["ip", "netns", "exec", lab.sub_ns(p), *cmd], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            if proc.stdout.readline().strip() != "ready":             # type: ignore[union-attr]
                proc.kill()
                raise RuntimeError(f"{broker.name}: receiver {p} did not start: {proc.communicate()[0][-300:]}")
            receivers[p] = (proc, out)
        softirq_cpu = cpus.BROKER_CPU if cfg.split_cpus else None     # None: the whole machine's
        cpu0, (busy0, _), bpf0 = broker.cpu_seconds(), system_cpu_seconds(), broker_seconds()
        soft0, napi0 = cpus.softirq_seconds(softirq_cpu), cpus.thread_seconds(self.napi)
        rnapi0 = cpus.thread_seconds(self.receiver_napi)
        t0 = time.time()
        if proto is None:
            avg = cum[-1] / (len(cum) - 1)
            pps = rate / avg if rate else 0
            sender = ([str(binary("send"))] if cfg.sender == "c"
                      else [sys.executable, "-m", "camus.bench.xdp_sender"])
            if cfg.split_cpus:
                sender = [*cpus.on(cpus.SENDER_CPU), *sender]
            r = subprocess.run(["ip", "netns", "exec", lab.pub_ns, *sender, lab.pub_if, str(frames),
                                str(pps), str(seconds)], capture_output=True, text=True)
            m = re.search(r"sent (\d+) frames in ([\d.]+) s", r.stdout)
            if not m:
                raise RuntimeError(f"sender failed: {r.stdout} {r.stderr}")
            sent_msgs, send_s = cum[int(m.group(1))], float(m.group(2))
        else:
            pin = [*cpus.on(cpus.SENDER_CPU)] if cfg.split_cpus else []
            r = subprocess.run(["ip", "netns", "exec", lab.pub_ns, *pin, sys.executable, "-m", "camus.bench.topic_clients",
                                "pub", proto, f"{lab.net}.0.2", str(TOPIC_BROKERS[broker.name][1]), str(raw),
                                str(rate), str(seconds)], capture_output=True, text=True)
            m = re.search(r"sent (\d+) messages in ([\d.]+) s", r.stdout)
            if not m:
                raise RuntimeError(f"publisher failed: {r.stdout} {r.stderr[-500:]}")
            sent_msgs, send_s = int(m.group(1)), float(m.group(2))
        self._wait_quiet([out for _, out in receivers.values()])
        receivers_s = (sum(cpus.process_seconds(proc.pid) for proc, _ in receivers.values())
                       + cpus.thread_seconds(self.receiver_napi) - rnapi0)
        for proc, _ in receivers.values():
            if proc.poll() is None:
                proc.send_signal(2)                          # SIGINT: receivers keep what came
        for proc, _ in receivers.values():
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        cpu1, (busy1, _), bpf1 = broker.cpu_seconds(), system_cpu_seconds(), broker_seconds()
        soft1, napi_s = cpus.softirq_seconds(softirq_cpu), cpus.thread_seconds(self.napi) - napi0
        key = (f"broker={broker.name}/subscribers={lab.n}/subscriptions={subscriptions}/phase={phase}")
        received, correct, lat = 0, set(), []
        for p, (_, out) in receivers.items():
            cols = deliveries(out, p, proto)
            received += len(cols["seq"])
            if wanted is None:
                _write_parquet(cols, self.out / "deliveries" / key / f"sub{p}.parquet")
            else:
                for seq, sub, tx, rx in zip(cols["seq"], cols["subscriber"], cols["send_ts"], cols["rx_ts"]):
                    if (seq, sub) in wanted:
                        correct.add((seq, sub))
                        lat.append(rx - tx)
            out.unlink(missing_ok=True)
        if wanted is not None:
            due = sum(1 for seq, _ in wanted if seq <= sent_msgs)
            lat.sort()
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] / 1e6 if lat else None
            return {"rate": rate, "achieved": round(sent_msgs / send_s) if send_s else 0, "sent": sent_msgs,
                    "split_cpus": cfg.split_cpus,
                    "expected": due, "correct": len(correct), "loss": 1 - len(correct) / due if due else 0.0,
                    "p99_ms": p99}
        facts = {"broker": broker.name, "subscribers": lab.n, "subscriptions": subscriptions, "phase": phase,
                 "rate": rate, "sent_messages": sent_msgs, "send_seconds": send_s, "started": t0,
                 "sender": cfg.sender if proto is None else proto,
                 "received_messages": received, "broker_cpu_s": round(cpu1 - cpu0, 6),
                 "system_busy_s": round(busy1 - busy0, 3), "softirq_s": round(soft1 - soft0, 3),
                 "bpf_s": round(bpf1 - bpf0, 6), "napi_s": round(napi_s, 6),
                 "receivers_cpu_s": round(receivers_s, 6), "split_cpus": cfg.split_cpus}
        self.runs.write(json.dumps(facts) + "\n")
        self.runs.flush()
        return facts

    def search(self, lab: Lab, broker: Broker, frames: Path, raw: Path, cum: list[int],
               topics: dict[int, list[str]], subscriptions: int, wanted: set[tuple[int, int]],
               fresh: Callable[[], None] = lambda: None) -> dict:
        """The highest feed rate the broker keeps up with: loss under the threshold and a p99
        latency under `keepup_ms` (a broker falling behind builds a queue, and its buffers would
        otherwise hide the shortfall for a short probe). Geometric bisection between the latency
        phase's rate and 30M messages/s (3M with the AF_PACKET sender); a rate the sender could not
        reach counts as achieved. `fresh()` runs before each probe (a userspace broker restarted: an
        overloaded probe leaves a full socket buffer that would spill into the next one)."""
        cfg = self.cfg
        # up to what the sender can send: ~12M msgs/s from XDP live frames, ~1M from AF_PACKET
        top = 30_000_000.0 if cfg.sender == "xdp" else 3_000_000.0
        lo, hi, best, probes = float(cfg.latency_rate), top, 0.0, []
        for _ in range(cfg.search_steps):
            rate = (lo * hi) ** 0.5
            fresh()
            r = self.phase(lab, broker, "probe", frames, raw, cum, topics, subscriptions, rate=rate,
                           seconds=cfg.search_seconds, wanted=wanted)
            probes.append(r)
            if r["loss"] <= cfg.loss_threshold and r["expected"] > 0 and (r["p99_ms"] or 0) <= cfg.keepup_ms:
                best = max(best, float(r["achieved"]))
                lo = rate
            else:
                hi = rate
        # the sender's own rate: what it achieved in any probe; a lossy probe the sender sent at
        # more than `best` shows the broker, not the sender, set the limit
        sent_best = max((float(r["achieved"]) for r in probes), default=0.0)
        lossy = [r for r in probes if r["loss"] > cfg.loss_threshold]
        out = {"broker": broker.name, "subscribers": lab.n, "subscriptions": subscriptions,
               "max_lossless_msgs_per_s": round(best), "max_sent_msgs_per_s": round(sent_best),
               "broker_bound": any(float(r["achieved"]) > best for r in lossy), "probes": probes}
        with (self.out / "maxrate.jsonl").open("a") as f:
            f.write(json.dumps(out) + "\n")
        return out

    @staticmethod
    def _wait_quiet(files: list[Path], quiet_s: float = 1.5, limit_s: float = 60.0) -> None:
        """After the sender: wait until the receivers' files stop growing (the broker drained)."""
        start = last_change = time.monotonic()
        size = -1
        while time.monotonic() - start < limit_s:
            now_size = sum(f.stat().st_size for f in files if f.exists())
            if now_size != size:
                size, last_change = now_size, time.monotonic()
            elif time.monotonic() - last_change >= quiet_s:
                return
            time.sleep(0.1)

    def _pin(self, broker: Broker) -> None:
        """With split CPUs a userspace broker's processes run beside its NAPI thread."""
        if self.cfg.split_cpus:
            for p in broker.procs:
                cpus.pin(p.pid, cpus.BROKER_CPU)

    def run(self) -> list[dict]:
        cfg = self.cfg
        steps = len(cfg.subscribers) * len(cfg.subscriptions) * len(cfg.brokers) * 2
        done, facts = 0, []
        with BpfStats():              # the kernel times camus-xdp's programs (bench/bpf_cpu.py)
            self._run_all(steps, done, facts)
        self.progress("done", 1.0)
        return facts

    def _run_all(self, steps: int, done: int, facts: list[dict]) -> None:
        cfg = self.cfg
        for n in cfg.subscribers:
            with Lab(cfg.lab_prefix or run_lab_prefix(), subscribers=n, routed=True, remote_endpoint=False,
                     net=free_net()) as lab:
                if cfg.split_cpus:          # the subscribers' receive work off the broker's CPU
                    self.receiver_napi = cpus.split_receivers(
                        [(lab.sub_ns(p), lab.sub_if(p, False)) for p in lab.ports],
                        [lab.sub_if(p, True) for p in lab.ports])
                self.progress(f"{n} subscribers: writing the feed", done / steps)
                feed, frames, raw, cum = self.prepare_feed(lab)
                for m in cfg.subscriptions:
                    self.progress(f"{n} subscribers, {m:,} subscriptions: compiling", done / steps)
                    compiled, rules_path, flat_path, topics = self.compile(m, n, feed)
                    wanted = self.wanted(n, m) if cfg.search else set()
                    for name in cfg.brokers:
                        work = self.out / "work" / name
                        work.mkdir(parents=True, exist_ok=True)
                        broker = make_broker(name, lab, work, fanout=cfg.fanout)
                        broker.start(compiled, SPEC, rules_path, flat_path)
                        self._pin(broker)

                        def fresh(broker: Broker = broker, compiled=compiled, rules_path: Path = rules_path,
                                  flat_path: Path = flat_path) -> None:
                            """A userspace broker may still hold a full socket buffer from an
                            overload: the next phase or probe starts on a fresh one."""
                            if broker.name in ("py", "c"):
                                broker.stop()
                                broker.start(compiled, SPEC, rules_path, flat_path)
                                self._pin(broker)
                        relay, napi = None, False
                        try:
                            # A veth takes XDP_TX frames into a peer with an XDP program: the camus-xdp
                            # broker has its own; the userspace brokers' end gets one that passes all.
                            if cfg.sender == "xdp" and name != "xdp" and name not in TOPIC_BROKERS:
                                relay = pass_through(lab.broker)
                            napi = cfg.split_cpus and (name == "xdp" or relay is not None)
                            if napi:                 # the feed's NAPI (the XDP program, the stack)
                                self.napi = cpus.split(lab.broker)
                            for phase in ("throughput", "latency"):
                                self.progress(f"{name}: {phase}, {n} subscribers, {m:,} subscriptions", done / steps)
                                facts.append(self.phase(lab, broker, phase, frames, raw, cum, topics, m))
                                done += 1
                                fresh()
                            if cfg.search:
                                self.progress(f"{name}: highest lossless rate, {n} subscribers, {m:,} subscriptions",
                                              done / steps)
                                self.search(lab, broker, frames, raw, cum, topics, m, wanted, fresh)
                        finally:
                            if napi:
                                cpus.unsplit(lab.broker)
                                self.napi = []
                            if relay is not None:
                                relay.remove_xdp(lab.broker.encode(), 0)
                            note = broker.stop()
                            if note:
                                (work / "broker.out").write_text(note + "\n")


def run_bench(cfg: BenchConfig, progress: Progress) -> list[dict]:
    for b in cfg.brokers:
        why = available(b)
        if why:
            raise RuntimeError(f"broker {b}: {why}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "inputs").mkdir(exist_ok=True)
    (cfg.out / "config.json").write_text(json.dumps({**asdict(cfg), "out": str(cfg.out)}, indent=1) + "\n")
    if cfg.split_cpus and (why := cpus.usable()):
        raise RuntimeError(f"--split-cpus: {why}")
    for b in ("send", "recv", "broker"):
        binary(b)
    runner = Runner(cfg, progress)
    try:
        return runner.run()
    finally:
        runner.runs.close()
