"""The record of an interface that serves several apps (dataplane/apps.py installs them): where
it is, what it says, the dispatcher's counters, and removing the apps with it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .installed import PIN_ROOT, STATE_ROOT, load_installed, pin_dir, state_path, unit_name, valid_iface
from .netlink import interface_exists, remove_xdp
from .maps import MapSet
from .program import DataplaneError
from .testrun import libbpf
from .teardown import remove_unit

MAX_APPS = 16                     # bpf/camus_dispatch.c CAMUS_MAX_APPS (4 bits of a copy's mark)


KEY_ETHER = 1 << 16               # a key: which array (dispatch_ether / dispatch_udp) | the value


KEY_UDP = 2 << 16


DISPATCH_PINS = ("dispatch_progs", "dispatch_ether", "dispatch_udp", "dispatch_stats")


def dispatch_record_path(iface: str) -> Path:
    return STATE_ROOT / "dispatch" / f"{valid_iface(iface)}.json"


def shared_interfaces() -> list[dict]:
    """The dispatch record of every interface serving several apps."""
    folder = STATE_ROOT / "dispatch"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def describe_key(key: int) -> str:
    return f"EtherType 0x{key & 0xFFFF:04x}" if key & KEY_ETHER else f"UDP port {key & 0xFFFF}"


def load_record(iface: str) -> dict:
    path = dispatch_record_path(iface)
    if not path.exists():
        raise DataplaneError(f"{iface} does not serve several apps (no {path})")
    return json.loads(path.read_text())


def detach_apps(iface: str) -> str:
    """Remove the dispatcher and every app of `iface` (the record goes last, so an interrupted
    detach can start over)."""
    record = load_record(iface)
    note = ""
    if interface_exists(iface):
        try:
            remove_xdp(iface, record["mode"])
        except Exception as exc:
            raise DataplaneError(f"could not remove XDP from {iface}: {exc}") from exc
    else:
        note = f"{iface} no longer exists; removed its pinned maps and state"
    for app in record["apps"]:
        unit = unit_name(iface, app)
        if state_path(unit).exists():
            remove_unit(load_installed(unit))
        shutil.rmtree(pin_dir(unit), ignore_errors=True)
    shutil.rmtree(pin_dir(iface), ignore_errors=True)
    dispatch_record_path(iface).unlink(missing_ok=True)
    return note


def remove_leftover_apps(iface: str) -> int:
    """After a crash part-way through `attach_apps` (no record yet): remove the app units it
    had installed. Returns how many there were."""
    units = {q.stem for q in STATE_ROOT.glob(f"{valid_iface(iface)}@*.json")}
    units |= {q.name for q in PIN_ROOT.glob(f"{iface}@*")}
    for unit in sorted(units):
        if state_path(unit).exists():
            remove_unit(load_installed(unit))
        shutil.rmtree(pin_dir(unit), ignore_errors=True)
    return len(units)


def dispatch_counts(iface: str) -> dict[str, int]:
    """Frames the dispatcher handed to each app, and `unclaimed` (passed to the stack)."""
    record = load_record(iface)
    fd = libbpf().bpf_obj_get(str(pin_dir(iface) / "dispatch_stats").encode())
    if fd < 0:
        raise DataplaneError(f"cannot open {pin_dir(iface) / 'dispatch_stats'}: detach and attach again")
    maps = MapSet({"dispatch_stats": fd}, owned=True)
    try:
        out = {app: maps._percpu_sum("dispatch_stats", slot) for slot, app in enumerate(record["apps"])}
        out["unclaimed"] = maps._percpu_sum("dispatch_stats", MAX_APPS)
        return out
    finally:
        maps.close()
