"""What the kernel keeps per interface under /sys/class/net that camus-xdp reads or sets: the
receive counters `stats` shows beside its own, and receive packet steering (RPS), off on a
classifying interface while camus-xdp copies its packets.

The receive counters: a frame the driver or its receive ring dropped before XDP ran (a broker that
cannot keep up) is counted there and nowhere else.

XDP hands a delivering packet to TC through a per-CPU ring slot named in the packet's metadata
(bpf/camus_xdp.c finish, bpf/camus_tc.c camus_tc_in): TC must run on the CPU that classified the
packet. RPS breaks that: it queues the packet XDP passed to another CPU's backlog, whose TC then
reads that CPU's ring, and the subscribers get nothing (measured: a lab with rps_cpus pointing at
the other CPU delivered none of the feed). So `attach` with a ports file turns RPS off on the
interface's receive queues and records the masks it found; `detach` writes them back. Multi-queue
NICs (RSS) are not affected: each queue's packets stay on its CPU from XDP to TC.
"""
from __future__ import annotations

from pathlib import Path

from .installed import valid_iface

SYS_NET = Path("/sys/class/net")
RX_COUNTERS = ("rx_packets", "rx_dropped", "rx_missed_errors", "rx_fifo_errors")


def receive_counters(iface: str) -> dict[str, int]:
    """IFACE's receive counters ({} when the interface is not in this network namespace); the
    error counters only where the driver has them. The name is checked first (valid_iface): it
    becomes part of a path."""
    base = SYS_NET / valid_iface(iface) / "statistics"
    out: dict[str, int] = {}
    for name in RX_COUNTERS:
        try:
            out[name] = int((base / name).read_text())
        except (OSError, ValueError):
            continue
    return out


def _masks(iface: str) -> dict[str, str]:
    """rx queue -> its rps_cpus mask (hex words, as the kernel prints them), every queue."""
    out = {}
    for q in sorted((SYS_NET / iface / "queues").glob("rx-*")):
        try:
            out[q.name] = (q / "rps_cpus").read_text().strip()
        except OSError:
            continue                        # RPS not built in, or the queue went away
    return out


def rps_is_on(mask: str) -> bool:
    """A mask with any CPU in it (`00000000`, `0` and `00,00000000` are off)."""
    try:
        return int(mask.replace(",", ""), 16) != 0
    except ValueError:
        return False


def rps_enabled(iface: str) -> dict[str, str]:
    """The receive queues of `iface` with RPS on, and their masks."""
    return {q: m for q, m in _masks(iface).items() if rps_is_on(m)}


def disable_rps(iface: str) -> dict[str, str]:
    """Turn RPS off on every receive queue of `iface` that has it; returns what was there, for
    restore_rps(). Raises OSError when a mask cannot be written (the caller undoes what it did)."""
    found = rps_enabled(iface)
    done: dict[str, str] = {}
    try:
        for q, mask in found.items():
            (SYS_NET / iface / "queues" / q / "rps_cpus").write_text("0\n")
            done[q] = mask
    except OSError:
        restore_rps(iface, done)
        raise
    return found


def restore_rps(iface: str, saved: dict[str, str]) -> None:
    """Write back the masks disable_rps() found; a queue or interface gone meanwhile is skipped."""
    for q, mask in saved.items():
        try:
            (SYS_NET / iface / "queues" / q / "rps_cpus").write_text(mask + "\n")
        except OSError:
            continue
