"""The broker benchmark's sender and broker on CPUs of their own (`camus-xdp bench run --split-cpus`).

On a veth the receiving side's NAPI poll — the broker's XDP program, the stack, TC — runs on the
CPU that sent the frame, so a fast sender is slowed to exactly what the broker absorbs and every
probe of the rate search looks lossless: the rate found is the sender's. With the broker's feed
interface in threaded NAPI mode (its poll loop becomes a kernel thread, `napi/<iface>-<id>`)
pinned to the other CPU, and the sender pinned to its own, the sender runs at its own speed and a
broker that cannot keep up loses frames; its lossless rate is then its own. On two cores the
broker has the second one to itself: its processes and its NAPI thread.

The receivers are not the broker: their veths' NAPI (the subscribers' IP and UDP receive) runs in
threads of its own too (`split_receivers`), beside the receivers' processes on the sender's CPU,
so neither their CPU time nor their competition for the broker's CPU is charged to the broker.
A veth hands a frame to its peer's NAPI only if nothing must be segmented on the way
(`veth_skb_is_eligible_for_gro`): TSO is turned off on the broker's end of each subscriber veth
for that (the lab's datagrams fit one frame; nothing is segmented either way). CPU time is read
per task from /proc/<tid>/schedstat (nanoseconds, not 10 ms ticks).
"""
from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

SENDER_CPU, BROKER_CPU = 0, 1
NAPI_PRIORITY = 50               # SCHED_FIFO priority of a broker's NAPI threads (split(realtime=True))
COMM_BYTES = 15                  # a thread's name is cut to this many characters


def usable() -> str | None:
    """Why the CPUs cannot be split here (None: they can)."""
    cpus = os.sched_getaffinity(0)
    if not {SENDER_CPU, BROKER_CPU} <= cpus:
        return f"needs CPUs {SENDER_CPU} and {BROKER_CPU} (this process may use {sorted(cpus)})"
    return None


def _tasks_named(match: Callable[[str], bool]) -> list[int]:
    """The processes and kernel threads whose name (comm) `match` accepts."""
    out = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if match(comm.read_text().strip()):
                out.append(int(comm.parent.name))
        except OSError:
            continue                                    # gone meanwhile
    return out


def napi_threads(iface: str) -> list[int]:
    """The kernel threads polling `iface` in threaded NAPI mode."""
    want = f"napi/{iface}-"[:COMM_BYTES]
    return _tasks_named(lambda name: name.startswith(want))


def _appearing(iface: str, known: list[int], where: str, hint: str) -> list[int]:
    """The NAPI threads of `iface` not in `known`, once the kernel has started them (a name cut to
    15 characters may match other interfaces' threads too: `known` leaves those out)."""
    deadline = time.monotonic() + 5
    while not (new := [t for t in napi_threads(iface) if t not in known]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{where}: no NAPI thread appeared ({hint})")
        time.sleep(0.05)
    return new


def split(iface: str, realtime: bool = False) -> list[int]:
    """Put `iface`'s NAPI in a kernel thread on BROKER_CPU; returns the threads pinned. With
    `realtime` the threads run SCHED_FIFO, as the softirq they replace would: at normal priority
    anything else runnable on the CPU delays the poll, and a veth's 256-frame ring overflows in a
    millisecond at a few hundred thousand frames/s (measured: 0.2-0.3% of the feed lost at 60% load)."""
    Path(f"/sys/class/net/{iface}/threaded").write_text("1\n")
    threads = _appearing(iface, [], iface, "does the kernel support threaded NAPI?")
    for tid in threads:
        os.sched_setaffinity(tid, {BROKER_CPU})
        if realtime:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(NAPI_PRIORITY))
    return threads


def split_receivers(ifaces: list[tuple[str, str]], broker_side: list[str]) -> list[int]:
    """Each subscriber veth (`(namespace, interface)`) polled by a NAPI thread on SENDER_CPU, the
    broker's end of each (`broker_side`) without TSO; returns the threads pinned."""
    for iface in broker_side:
        subprocess.run(["ethtool", "-K", iface, "tso", "off"], capture_output=True, check=True)
    threads: list[int] = []
    for ns, iface in ifaces:
        # /sys inside `ip netns exec` shows the namespace's own interfaces
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", f"echo 1 > /sys/class/net/{iface}/threaded"],
                       capture_output=True, check=True)
        threads += _appearing(iface, threads, f"{ns}/{iface}", "is GRO on?")
    for tid in threads:
        os.sched_setaffinity(tid, {SENDER_CPU})
    return threads


def unsplit(iface: str) -> None:
    try:
        Path(f"/sys/class/net/{iface}/threaded").write_text("0\n")
    except OSError:
        pass                                            # the interface went with its lab


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` and of its descendants onto `cpu` (a broker started through
    `ip netns exec` is the child of the process the runner holds)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                os.sched_setaffinity(int(task.name), {cpu})
            except OSError:
                pass                                    # exited meanwhile
        todo += children.get(p, [])


def thread_seconds(tids: list[int]) -> float:
    """CPU time the threads have run (schedstat: nanoseconds): a NAPI thread's is the receive
    work that otherwise counts as softirq time. A thread gone counts nothing."""
    total = 0
    for tid in tids:
        try:
            total += int(Path(f"/proc/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def ksoftirqd(cpu: int) -> list[int]:
    """The kernel thread that runs `cpu`'s softirqs when they are deferred (`ksoftirqd/<cpu>`)."""
    return _tasks_named(f"ksoftirqd/{cpu}".__eq__)


def process_seconds(pid: int) -> float:
    """CPU time every thread of `pid` has run so far (schedstat, nanoseconds)."""
    try:
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return 0.0
    return thread_seconds(tasks)


def _stat_ticks(cpu: int | None) -> list[int]:
    """One CPU's line of /proc/stat (None: the whole machine's): user, nice, system, idle, iowait,
    irq, softirq, steal... in ticks."""
    label = "cpu" if cpu is None else f"cpu{cpu}"
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f and f[0] == label:
            return [int(x) for x in f[1:]]
    return []


def softirq_seconds(cpu: int | None = None) -> float:
    """Softirq time so far of one CPU (None: the whole machine), from /proc/stat (10 ms ticks)."""
    f = _stat_ticks(cpu)
    return f[6] / os.sysconf("SC_CLK_TCK") if f else 0.0


def busy_seconds(cpu: int) -> float:
    """Time one CPU has not been idle so far (user, nice, system, irq, softirq; 10 ms ticks)."""
    f = _stat_ticks(cpu)
    return (f[0] + f[1] + f[2] + f[5] + f[6]) / os.sysconf("SC_CLK_TCK") if f else 0.0


def on(cpu: int) -> list[str]:
    """A command prefix that runs a program on `cpu`."""
    return ["taskset", "-c", str(cpu)]


HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


@contextmanager
def halt_poll(ns: int) -> Iterator[str | None]:
    """In a VM whose guest idles through cpuidle-haltpoll, poll `ns` before halting an idle vCPU,
    restored afterwards. A halted vCPU takes the host's scheduling to wake (this VM's kernel
    boots with guest_halt_poll_ns=0): a broker's NAPI thread woken by a burst then starts late
    and the veth's 256-frame ring overflows at a few percent of the CPU's capacity. Polling is
    idle time: no CPU figure counts it. Yields why it could not be set (None: set, or ns is 0)."""
    if ns <= 0:
        yield None
        return
    try:
        before = HALT_POLL.read_text().strip()
        HALT_POLL.write_text(f"{ns}\n")
    except OSError as exc:
        yield f"cannot set {HALT_POLL}: {exc.strerror or exc}"
        return
    try:
        yield None
    finally:
        HALT_POLL.write_text(before + "\n")
