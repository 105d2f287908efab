"""The broker benchmark's sender on a CPU of its own (`camus-xdp bench run --split-cpus`).

On a veth the receiving side's NAPI poll — the broker's XDP program, the stack, TC — runs on the
CPU that sent the frame, so a fast sender is slowed to exactly what the broker absorbs and every
probe of the rate search looks lossless: the rate found is the sender's. With the broker's feed
interface in threaded NAPI mode (its poll loop becomes a kernel thread, `napi/<iface>-<id>`)
pinned to the other CPU, and the sender pinned to its own, the sender runs at its own speed and a
broker that cannot keep up loses frames; its lossless rate is then its own. On two cores the
broker's processes, its NAPI thread and the receivers share the second one.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

SENDER_CPU, BROKER_CPU = 0, 1
COMM_BYTES = 15                  # a thread's name is cut to this many characters


def usable() -> str | None:
    """Why the CPUs cannot be split here (None: they can)."""
    cpus = os.sched_getaffinity(0)
    if not {SENDER_CPU, BROKER_CPU} <= cpus:
        return f"needs CPUs {SENDER_CPU} and {BROKER_CPU} (this process may use {sorted(cpus)})"
    return None


def napi_threads(iface: str) -> list[int]:
    """The kernel threads polling `iface` in threaded NAPI mode."""
    want = f"napi/{iface}-"[:COMM_BYTES]
    out = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip().startswith(want):
                out.append(int(comm.parent.name))
        except OSError:
            continue                                    # gone meanwhile
    return out


def split(iface: str) -> list[int]:
    """Put `iface`'s NAPI in a kernel thread on BROKER_CPU; returns the threads pinned."""
    Path(f"/sys/class/net/{iface}/threaded").write_text("1\n")
    deadline = time.monotonic() + 5
    while not (threads := napi_threads(iface)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{iface}: no NAPI thread appeared (does the kernel support threaded NAPI?)")
        time.sleep(0.05)
    for tid in threads:
        os.sched_setaffinity(tid, {BROKER_CPU})
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
    """CPU time (user + system) the threads have used: a NAPI thread's is the receive work that
    otherwise counts as softirq time."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for tid in tids:
        try:
            fields = Path(f"/proc/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


def on(cpu: int) -> list[str]:
    """A command prefix that runs a program on `cpu`."""
    return ["taskset", "-c", str(cpu)]
