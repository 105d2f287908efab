"""How a delivering packet's copies are made: TC clones, or one XDP broadcast (bpf/camus_fan.c).

A TC clone builds an skb for the broker's own stack first and then clones it once per port;
an XDP broadcast copies the XDP frame straight to each interface of a devmap, whose egress
program prunes and rewrites each copy. Measured here (bench/fanout_bench.py,
bench/fanout_latency.py, README "Fan-out"): for a packet going to many ports a broadcast copy
costs the broker a half to a fifth of a TC clone's CPU, and it makes every copy where TC clones,
in bursts, were refused by the veths (half of them at 32 ports); for a few ports the CPU is about
the same and TC's copies reach the subscribers a little sooner. Modes (`attach --fanout`):
`auto` (the default) broadcasts any packet it can when every broadcast port is on a device
(a NIC or virtio-net: `/sys/class/net/IFACE/device`), and packets going to at least
AUTO_MIN_GROUP ports otherwise (veths), `xdp` any packet it can, `tc` none. Why the device
matters: a device frees the frames XDP sent it on its own transmit completion, on the broker's
CPU, as bench/sink_bench.py's subscribers do — there the broadcast kept up with 2x the feed
TC clones did (README, "Each broker's own rate"); a veth hands each frame to a receiving
process on another CPU, and there broadcast copies (a fresh page each, freed remotely) lost
feed frames at rates TC sustained (README, "Fan-out"). The broadcast has limits, so the
choice is made per port at attach and per packet in XDP:

- The egress program knows a copy's port only by its output interface, so only a port whose
  interface no other port uses can be in the devmap, and the interface must take XDP frames
  (`ndo_xdp_xmit`; a veth only when its peer has an XDP program or GRO on). The kernel says
  which do: the netdev family's `xdp-features` (NETDEV_XDP_ACT_NDO_XMIT). Other ports (and the
  host's stack) are served by TC.
- A broadcast copies the frame to every entry of its devmap. Each port set of the rules' leaves
  gets a devmap of its own (`fan_groups`), so a packet for such a set is copied to exactly its
  ports. A packet whose messages go to a union no leaf has can use the devmap of all ports, the
  copies for other ports being dropped by the egress program: XDP does that only when the
  packet goes to at least `min_copies` of them (three quarters: below that TC clones cost less).
"""
from __future__ import annotations

import ctypes
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .xdp_features import XDP_ACT_NDO_XMIT, xdp_features

if TYPE_CHECKING:                # ports.py needs PyYAML; the CLI imports this module without it
    from .ports import PortSpec

MODES = ("auto", "xdp", "tc")
# Cost of one broadcast copy (to a port that keeps it or not) against one TC clone, both
# including the egress pruning: bench/fanout_bench.py measured it (README, "Fan-out"); a
# broadcast to all ports pays off when the packet goes to at least this share of them.
BROADCAST_COPY_COST = 3 / 4
# `auto`: packets for fewer copies go by TC, whose copies reach subscribers sooner on veths,
# with the same CPU per copy at that size; from 16 copies on a broadcast costs half or less and
# makes every copy where TC, in 64-packet bursts, lost half of them at 32 (README, "Fan-out").
AUTO_MIN_GROUP = 16
MAX_FAN = 64                     # CAMUS_MAX_FAN: devmap entries
NDO_XMIT = XDP_ACT_NDO_XMIT      # the port's interface takes XDP frames (dataplane/netlink.py)
BPF_XDP_DEVMAP = 33              # the egress program's expected attach type


class DevmapVal(ctypes.Structure):   # struct bpf_devmap_val
    _fields_ = [("ifindex", ctypes.c_uint32), ("prog_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class FanPlan:
    ports: tuple[tuple[int, int], ...]   # (port bit, ifindex) of each devmap entry
    min_copies: int                      # broadcast to all entries a packet going to this many
    left_out: tuple[tuple[object, str], ...] = ()   # (port, why) of ports copied by TC only
    min_group: int = 1                   # broadcast through a group from this many copies

    @property
    def mask(self) -> list[int]:
        """The broadcast ports as port words."""
        words = [0] * max([4] + [(bit >> 6) + 1 for bit, _ in self.ports])
        for bit, _ in self.ports:
            words[bit >> 6] |= 1 << (bit & 63)
        return words

    def describe(self, bits: list[object]) -> str:
        if not self.ports:
            return "TC clones"
        names = ", ".join(str(bits[b]) for b, _ in self.ports)
        return (f"XDP broadcast to ports {names} for packets going to >= {self.min_group} of them (a devmap per "
                f"port set of the rules; all of them for a packet going to >= {self.min_copies} with no devmap of "
                "its own), TC clones otherwise")


def takes_xdp_frames(ifindex: int) -> bool:
    return bool((xdp_features(ifindex) or 0) & NDO_XMIT)


def on_device(iface: str) -> bool:
    """The interface has a device behind it (a NIC, virtio-net), not a veth or another virtual one."""
    return (Path("/sys/class/net") / iface / "device").exists()


def plan(bits: list[object], specs: dict[object, PortSpec], mode: str = "auto",
         takes_xdp: Callable[[int], bool] = takes_xdp_frames,
         ifindex_of: Callable[[str], int] = socket.if_nametoindex,
         device: Callable[[str], bool] = on_device) -> FanPlan:
    """Which ports get a devmap entry and when XDP broadcasts to all of them (module text)."""
    if mode not in MODES:
        raise ValueError(f"fan-out mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "tc":
        return FanPlan((), 0)
    users: dict[str, int] = {}
    for ps in specs.values():
        if ps.iface:
            users[ps.iface] = users.get(ps.iface, 0) + 1
    entries: list[tuple[int, int]] = []
    left_out: list[tuple[object, str]] = []
    for bit, port in enumerate(bits):
        ps = specs[port]
        if ps.kind == "local":
            continue                                  # the host's stack: TC's original
        if users[ps.iface or ""] > 1:
            left_out.append((port, f"{ps.iface} serves other ports too"))
            continue
        ifindex = ifindex_of(ps.iface or "")
        if not takes_xdp(ifindex):
            left_out.append((port, f"{ps.iface} does not take XDP frames (a veth needs XDP or GRO on its peer)"))
        elif len(entries) == MAX_FAN:
            left_out.append((port, f"more than {MAX_FAN} ports"))
        else:
            entries.append((bit, ifindex))
    if not entries:
        return FanPlan((), 0, tuple(left_out))
    on_devices = all(device(specs[bits[b]].iface or "") for b, _ in entries)
    least = 1 if mode == "xdp" or on_devices else AUTO_MIN_GROUP
    return FanPlan(tuple(entries), max(least, math.ceil(len(entries) * BROADCAST_COPY_COST)), tuple(left_out),
                   least)


def install(maps, fan_prog_fd: int, p: FanPlan) -> None:
    """Write the devmap (each entry with the egress program), interface -> port, then the
    config that lets XDP choose it: until that last write, every packet goes by TC."""
    for i, (bit, ifindex) in enumerate(p.ports):
        maps.update("fan_ports", ctypes.c_uint32(i), DevmapVal(ifindex, fan_prog_fd))
        maps.update("fan_port", ctypes.c_uint32(ifindex), ctypes.c_uint32(bit))
    maps.update("fan", ctypes.c_uint32(0), maps.structs.FanCfg(maps.structs.Words(*p.mask), len(p.ports), p.min_copies,
                                                  p.min_group))


MAX_GROUPS = 1024                # CAMUS_MAX_FAN_GROUPS
BPF_MAP_TYPE_DEVMAP = 14


def group_sets(leaf_ports: list[tuple[int, ...]], p: FanPlan) -> list[tuple[int, ...]]:
    """The port sets (as port words) worth a devmap of their own: those of the leaves whose
    ports are all devmap ports, at least `min_group` of them (XDP never broadcasts fewer), the
    most common first, at most MAX_GROUPS. A packet whose messages go to different sets (a union
    no leaf has) uses the devmap of all, or TC."""
    mask = p.mask
    counts: dict[tuple[int, ...], int] = {}
    for words in leaf_ports:
        words = tuple(words) + (0,) * (len(mask) - len(words))
        if (sum(bin(w).count("1") for w in words) >= max(1, p.min_group)
                and all(w & ~m == 0 for w, m in zip(words, mask))):
            counts[words] = counts.get(words, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:MAX_GROUPS]


def _libbpf_groups():
    from .testrun import libbpf
    lib = libbpf()
    lib.bpf_map_create.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                                   ctypes.c_uint32, ctypes.c_void_p]
    lib.bpf_map_get_next_key.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def group_keys(maps) -> set[tuple[int, ...]]:
    """The port sets fan_groups has a devmap for."""
    lib = _libbpf_groups()
    have: set[tuple[int, ...]] = set()
    port_set = maps.structs.PortSet
    key, nxt = port_set(), port_set()
    prev = None
    while lib.bpf_map_get_next_key(maps.fds["fan_groups"], prev, ctypes.byref(nxt)) == 0:
        have.add(tuple(nxt.w))
        ctypes.memmove(ctypes.byref(key), ctypes.byref(nxt), ctypes.sizeof(port_set))
        prev = ctypes.byref(key)
    return have


def sync_groups(maps, fan_prog_fd: int, p: FanPlan, sets: list[tuple[int, ...]]) -> tuple[int, int]:
    """Make fan_groups hold a devmap for each of `sets` and nothing else: new ones added, stale
    ones removed (a packet between the two finds its set or falls back, never a wrong group: a
    group's devmap holds exactly its set's ports). Returns (added, removed)."""
    import os
    lib = _libbpf_groups()
    have = group_keys(maps)
    ifindex = dict(p.ports)
    want = set(sets)
    added = 0
    for words in sets:
        if words in have:
            continue
        bits = [64 * w + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
        # Exactly as many entries as ports: a broadcast visits every slot of its devmap
        # (dev_map_enqueue_multi), and 64 slots for a 2-port group were 4% of the broker's CPU in
        # the sink bench's profile. The outer map takes any size (a devmap's inner-map check
        # compares type, key, value and flags, not max_entries).
        fd = lib.bpf_map_create(BPF_MAP_TYPE_DEVMAP, b"camus_fan_grp", 4, ctypes.sizeof(DevmapVal), len(bits), None)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "could not create a fan-out group devmap")
        try:
            for i, bit in enumerate(bits):
                val = DevmapVal(ifindex[bit], fan_prog_fd)
                if lib.bpf_map_update_elem(fd, ctypes.byref(ctypes.c_uint32(i)), ctypes.byref(val), 0) != 0:
                    raise OSError(ctypes.get_errno(), "could not fill a fan-out group devmap")
            maps.update("fan_groups", maps.structs.PortSet(maps.structs.Words(*words)), ctypes.c_int(fd))
            added += 1
        finally:
            os.close(fd)                          # fan_groups holds it now
    stale = have - want
    for words in stale:
        maps.delete("fan_groups", maps.structs.PortSet(maps.structs.Words(*words)))
    return added, len(stale)
