"""What `status`, `stats` and the metrics endpoint report about attached units, as plain data
with one stable schema (documented in README, "Operating camus-xdp"); the CLI renders it as text
or JSON, the metrics endpoint as Prometheus families.

Counters carry their unit: the XDP program counts packets for most things, messages for what
is decided per message (a packet of a MoldUDP64 feed holds up to 12), and copies per port.
"""
from __future__ import annotations

import os
import time
from typing import Any

from .bpfinfo import ProgInfo, obj_info
from .installed import Installed, live_state_path
from .maps import STAT_NAMES

SCHEMA = 1

# counter -> (unit, what it counts): bpf/camus_xdp.h CAMUS_STAT_*
STAT_INFO: dict[str, tuple[str, str]] = {
    "packets": ("packets", "packets the classifier saw"),
    "other": ("packets", "not feed traffic: passed untouched"),
    "malformed": ("packets", "feed packets with bad framing (passed or dropped by policy)"),
    "messages": ("messages", "messages classified"),
    "no_match": ("packets", "packets no subscriber wanted: dropped"),
    "explicit_drop": ("messages", "messages a drop rule matched"),
    "deliver": ("packets", "packets with at least one subscribed port"),
    "local": ("packets", "packets trimmed for this host's stack"),
    "redirected": ("packets", "packets sent straight from XDP to their one port"),
    "overflow": ("packets", "batches of more messages than the program classifies: to the stack"),
    "bypassed": ("messages", "messages sent to the cover of all filters under overload, not filtered"),
    "answered": ("packets", "DNS queries answered from XDP"),
    "rewritten": ("packets", "packets whose IPv6 destination got an ILA locator"),
    "broadcast": ("packets", "packets copied to their ports by XDP broadcast"),
    "broadcast_all": ("packets", "of those, broadcast to every fan port"),
    "cross_cpu": ("packets", "delivering packets TC met on another CPU (RPS on?): dropped"),
}
assert set(STAT_INFO) == set(STAT_NAMES), "every kernel counter has a unit and a description"


def _boot_time() -> float:
    """When the machine booted, in epoch seconds: both clocks read to the nanosecond (from
    /proc/uptime's hundredths two calls differed by enough to round a load time differently)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def prog_summary(prog_id: int) -> dict[str, Any] | None:
    """A loaded program as bpftool shows it: id, name, tag, load time (seconds since the epoch)."""
    from .testrun import libbpf
    if not prog_id:
        return None
    lib = libbpf()
    fd = lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return None
    try:
        info = obj_info(fd, ProgInfo())
        return {"id": prog_id, "name": info.name.decode(errors="replace"),        # type: ignore[attr-defined]
                "tag": bytes(info.tag).hex(),                                     # type: ignore[attr-defined]
                "loaded_at": round(_boot_time() + info.load_time / 1e9, 1)}       # type: ignore[attr-defined]
    finally:
        os.close(fd)


def unit_status(inst: Installed, live_root: int | None, interface_up: bool, held_by: str = "") -> dict[str, Any]:
    """One attached unit (schema: README, "Operating camus-xdp")."""
    from .grow import attached_prog_id
    lim = inst.limits()
    try:
        prog = prog_summary(attached_prog_id(inst)) if interface_up else None
    except Exception:       # a dispatcher or interface half gone: status still reports the rest
        prog = None
    return {
        "schema": SCHEMA, "unit": inst.unit, "iface": inst.iface, "app": inst.app or None, "mode": inst.mode,
        "spec": inst.spec, "rules_file": inst.rules, "rules": len(inst.rule_lines), "ports_file": inst.ports,
        "bank": inst.bank, "root": inst.root, "live_root": live_root,
        "attached_at": inst.attached_at or None, "program": prog,
        "interface_exists": interface_up, "update_pending": bool(inst.pending), "held_by": held_by or None,
        "capacity": {"states_per_bank": lim.max_states // 2, "bitvector_terms": 64 * lim.bv_words,
                     "bitmaps_per_bank": lim.max_bv_bitmaps // 2, "segments": lim.max_bv_segs,
                     "port_column_words": 4 * lim.bv_columns},
        "fanout": inst.fanout or None, "next_update": next_update(inst),
    }


def next_update(inst: Installed) -> str:
    """How the next `camus-xdp update` writes the tables: "delta" (a command left the live
    state: only the changed lines' states), "live" (a whole set through the live path, which then
    leaves it), "compile" (a whole compile: the bit-vector stage, state functions, topic levels)."""
    if live_state_path(inst.unit).exists():
        return "delta"
    return "live" if inst.live_path else "compile"


def grouped(counters: dict[str, int]) -> dict[str, dict[str, int]]:
    """runtime.stats() split by unit: packets, messages, and copies sent to each port."""
    out: dict[str, dict[str, int]] = {"packets": {}, "messages": {}, "port_copies": {}}
    for name, n in counters.items():
        if name.startswith("port "):
            out["port_copies"][name[5:]] = n
        else:
            out[STAT_INFO.get(name, ("packets", ""))[0]][name] = n
    return out
