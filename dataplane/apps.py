"""Several applications on one interface: dispatch by UDP port or EtherType.

`camus-xdp attach eth0 --app itch=itch.p4,rules.txt --app dns=dns.p4,dns_rules.txt` loads one
classifier per application, each exactly as `attach` would for that spec alone (its own maps,
rules, counters, ports file and TC filters), pinned as unit `eth0@itch`, `eth0@dns`
(dataplane/installed.py), and attaches a small dispatcher (bpf/camus_dispatch.c) that
tail-calls the application whose key the frame carries: the spec's `@pragma udp_port(...)`
ports, or EtherType 0x9001 for an attribute-encoding spec. `update`, `stats`, `overload` take
`--app NAME` and touch that application only.

All or nothing: keys are checked before anything is loaded (two applications claiming one
port, or a spec that takes any port, is refused with both names), and a failure part-way
removes every application already installed.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from camus.compiler.codec.attrs import ATTRS_FRAMINGS, ETHERTYPE_ATTRS
from camus.compiler.compile import Compiled
from camus.compiler.language.spec import Spec

from . import runtime
from .installed import PIN_ROOT, STATE_ROOT, Installed, load_installed, pin_dir, unit_name, valid_app, valid_iface
from .maps import MapSet
from .program import DataplaneError, _bcc, require_root
from .testrun import _libbpf

MAX_APPS = 16                     # bpf/camus_dispatch.c CAMUS_MAX_APPS (4 bits of a copy's mark)
KEY_ETHER = 1 << 16               # a key: which array (dispatch_ether / dispatch_udp) | the value
KEY_UDP = 2 << 16
DISPATCH_PINS = ("dispatch_progs", "dispatch_ether", "dispatch_udp", "dispatch_stats")


@dataclass
class App:
    """One application to attach: its name, compiled rules and the files they came from."""
    name: str
    compiled: Compiled
    spec_path: str
    rules_path: str
    ports_path: str | None = None


def dispatch_keys(spec: Spec) -> dict[int, str]:
    """The dispatcher keys a spec claims, each with how to say it in an error."""
    if spec.framing.kind in ATTRS_FRAMINGS:
        keys = [KEY_ETHER | ETHERTYPE_ATTRS]
    elif not spec.udp_ports:
        raise DataplaneError(f"spec {spec.name!r} takes any UDP port (no `@pragma udp_port(N)`), so it cannot "
                             "share an interface: give it its feed's port(s)")
    else:
        keys = [KEY_UDP | p for p in spec.udp_ports]
    return {k: describe_key(k) for k in keys}


def plan(apps: list[App]) -> dict[int, int]:
    """Dispatcher key -> application slot; refuses bad names, duplicates and shared keys."""
    if not 2 <= len(apps) <= MAX_APPS:
        raise DataplaneError(f"an interface serves 2 to {MAX_APPS} apps this way, not {len(apps)}"
                             + (" (one app: plain `attach --spec --rules`)" if len(apps) == 1 else ""))
    owner: dict[int, str] = {}
    keys: dict[int, int] = {}
    for slot, app in enumerate(apps):
        valid_app(app.name)
        if app.name in {a.name for a in apps[:slot]}:
            raise DataplaneError(f"two apps are named {app.name!r}")
        for key, what in dispatch_keys(app.compiled.spec).items():
            if key in owner:
                raise DataplaneError(f"apps {owner[key]!r} and {app.name!r} both take {what}: a frame must "
                                     "belong to one app (change one spec's udp_port)")
            owner[key], keys[key] = app.name, slot
    return keys


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


def _load_dispatcher():
    from camus.data import bpf_dir
    bcc = _bcc()
    source = (bpf_dir() / "camus_dispatch.c").read_text().replace(
        "/*@CAMUS_L2_H@*/", (bpf_dir() / "camus_l2.h").read_text())
    try:
        bpf = bcc.BPF(text=source.encode())
        fn = bpf.load_func(b"camus_dispatch", bcc.BPF.XDP)
    except Exception as exc:
        raise DataplaneError(f"could not load the dispatcher: {exc}") from exc
    return bpf, fn


def write_key(bpf, key: int, slot: int) -> None:
    """Frames with this key go to application `slot` (the arrays hold slot + 1; 0 is nobody)."""
    table = b"dispatch_ether" if key & KEY_ETHER else b"dispatch_udp"
    bpf[table][ctypes.c_uint32(key & 0xFFFF)] = ctypes.c_uint32(slot + 1)


def attach_apps(iface: str, apps: list[App], mode: str = "native", xdp_redirect: bool = False,
                fanout_mode: str = "auto") -> list[Installed]:
    """Install every app, then the dispatcher that hands each its frames; nothing is left
    installed when any step fails."""
    require_root()
    keys = plan(apps)
    runtime._ifindex(iface)
    if (runtime._state_path(iface).exists() or pin_dir(iface).exists()
            or dispatch_record_path(iface).exists()):
        raise DataplaneError(f"{iface} already has camus-xdp attached: `detach` it first")
    done: list[Installed] = []
    bpf = None
    attached = False
    try:
        for slot, app in enumerate(apps):
            done.append(runtime.attach(iface, app.compiled, app.spec_path, app.rules_path, mode,
                                       ports_path=app.ports_path, xdp_redirect=xdp_redirect, fanout_mode=fanout_mode,
                                       app=app.name, app_id=slot))
        bpf, fn = _load_dispatcher()
        for key, slot in keys.items():
            write_key(bpf, key, slot)
        lib = _libbpf()
        for slot, inst in enumerate(done):
            fd = lib.bpf_obj_get(str(inst.pins / "prog_xdp").encode())
            if fd < 0:
                raise DataplaneError(f"cannot open the pinned program of {inst.unit}")
            try:
                bpf[b"dispatch_progs"][ctypes.c_int(slot)] = ctypes.c_int(fd)
            finally:
                os.close(fd)
        pins = MapSet({name: bpf[name.encode()].map_fd for name in DISPATCH_PINS})
        pins.pin(pin_dir(iface))       # the program array's entries live as long as its pin
        if lib.bpf_obj_pin(fn.fd, str(pin_dir(iface) / "prog_dispatch").encode()) < 0:
            raise DataplaneError(f"could not pin the dispatcher under {pin_dir(iface)}")
        runtime._fault("apps:pinned")
        runtime.attach_xdp(bpf, fn, iface, mode)
        attached = True
        record = {"iface": iface, "mode": mode, "apps": [a.name for a in apps],
                  "keys": {str(k): s for k, s in sorted(keys.items())}}
        path = dispatch_record_path(iface)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        return done
    except BaseException:
        if attached:
            runtime._remove_xdp(iface, mode)
        for inst in done:
            runtime.remove_unit(inst)
        shutil.rmtree(pin_dir(iface), ignore_errors=True)
        raise
    finally:
        if bpf is not None:
            bpf.cleanup()                # the pins and the attachment keep it alive


def detach_apps(iface: str) -> str:
    """Remove the dispatcher and every app of `iface` (the record goes last, so an interrupted
    detach can start over)."""
    record = load_record(iface)
    note = ""
    if runtime.interface_exists(iface):
        try:
            runtime._remove_xdp(iface, record["mode"])
        except Exception as exc:
            raise DataplaneError(f"could not remove XDP from {iface}: {exc}") from exc
    else:
        note = f"{iface} no longer exists; removed its pinned maps and state"
    for app in record["apps"]:
        unit = unit_name(iface, app)
        if runtime._state_path(unit).exists():
            runtime.remove_unit(load_installed(unit))
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
        if runtime._state_path(unit).exists():
            runtime.remove_unit(load_installed(unit))
        shutil.rmtree(pin_dir(unit), ignore_errors=True)
    return len(units)


def dispatch_counts(iface: str) -> dict[str, int]:
    """Frames the dispatcher handed to each app, and `unclaimed` (passed to the stack)."""
    record = load_record(iface)
    fd = _libbpf().bpf_obj_get(str(pin_dir(iface) / "dispatch_stats").encode())
    if fd < 0:
        raise DataplaneError(f"cannot open {pin_dir(iface) / 'dispatch_stats'}: detach and attach again")
    maps = MapSet({"dispatch_stats": fd}, owned=True)
    try:
        out = {app: maps._percpu_sum("dispatch_stats", slot) for slot, app in enumerate(record["apps"])}
        out["unclaimed"] = maps._percpu_sum("dispatch_stats", MAX_APPS)
        return out
    finally:
        maps.close()
