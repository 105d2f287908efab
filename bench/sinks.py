"""Benchmark subscribers as XDP programs (bpf/camus_sink.c) on their veths: count what a broker
delivered, measure its latency, drop it. The lab's recording receivers cost several microseconds
per copy on the sender's CPU, and that, not the broker, ended every lossless rate of
`camus-xdp bench run --split-cpus`; these cost ~100 ns, as if the subscribers were other hosts
behind a NIC. Used by bench/sink_bench.py.
"""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from camus.bench.clocks import realtime_minus_monotonic_ns

SOURCE = Path(__file__).resolve().parent.parent / "bpf" / "camus_sink.c"
PORTS = 256                       # subscriber ports the counters have room for (the lab's: 1..200)
BUCKET_NS = 20_000                # latency histogram: 20 µs buckets up to 12 ms, then one for the rest
BUCKETS = 601
CLONE_NEWNET = 0x40000000


@contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """Run the block with this thread in network namespace `ns` (named by `ip netns`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the broker's namespace")
    finally:
        os.close(home)
        os.close(target)


@dataclass(frozen=True)
class Counts:
    copies: dict[int, int]        # per subscriber port
    messages: dict[int, int]
    latency: list[int]            # copies per BUCKET_NS bucket (all subscribers)
    other: int = 0                # frames that were no broker's copy (passed or dropped)

    def minus(self, before: "Counts") -> "Counts":
        return Counts({p: v - before.copies.get(p, 0) for p, v in self.copies.items()},
                      {p: v - before.messages.get(p, 0) for p, v in self.messages.items()},
                      [a - b for a, b in zip(self.latency, before.latency)], self.other - before.other)

    @property
    def total_messages(self) -> int:
        return sum(self.messages.values())

    def latency_quantile_ms(self, q: float) -> float | None:
        """The upper edge of the bucket holding quantile `q` (None: no copy measured; the last
        bucket's edge means 'at least that')."""
        n = sum(self.latency)
        if not n:
            return None
        seen = 0
        for i, c in enumerate(self.latency):
            seen += c
            if seen >= q * n:
                return (i + 1) * BUCKET_NS / 1e6
        return BUCKETS * BUCKET_NS / 1e6


class Sinks:
    """The counting program attached to each (namespace, interface); detached on close."""

    def __init__(self, where: list[tuple[str, str]], ports: list[int]) -> None:
        self.ports = ports
        from camus.dataplane.program import bcc_module
        bcc = bcc_module()
        self.bpf = bcc.BPF(src_file=str(SOURCE).encode(), cflags=[
            f"-DSINK_PORTS={PORTS}", f"-DSINK_BUCKETS={BUCKETS}", f"-DSINK_BUCKET_NS={BUCKET_NS}"])
        fn = self.bpf.load_func(b"camus_sink", bcc.BPF.XDP)
        self.bpf[b"sink_cfg"][ctypes.c_int(0)] = ctypes.c_uint64(realtime_minus_monotonic_ns())
        self.where: list[tuple[str, str]] = []
        try:
            for ns, iface in where:
                with in_netns(ns):
                    self.bpf.attach_xdp(iface.encode(), fn, 0)
                self.where.append((ns, iface))
        except BaseException:
            self.close()
            raise

    def read(self) -> Counts:
        counts = self.bpf[b"counts"]
        copies, messages, other = {}, {}, 0
        for p in [0, *self.ports]:
            per_cpu = counts[ctypes.c_int(p)]
            other += sum(c.other for c in per_cpu)
            if p:
                copies[p] = sum(c.copies for c in per_cpu)
                messages[p] = sum(c.messages for c in per_cpu)
        lat = self.bpf[b"latency"]
        return Counts(copies, messages, [sum(lat[ctypes.c_int(i)]) for i in range(BUCKETS)], other)

    def close(self) -> None:
        for ns, iface in self.where:
            try:
                with in_netns(ns):
                    self.bpf.remove_xdp(iface.encode(), 0)
            except OSError:
                pass                                  # the namespace went with its lab
        self.where = []
        self.bpf.cleanup()
