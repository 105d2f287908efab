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

from camus.compiler.codec.attrs import ATTRS_FRAMINGS, ETHERTYPE_ATTRS
from camus.compiler.compile import Compiled
from camus.compiler.language.spec import Spec

from .attachment import Attachment, Progress, silent
from .dispatch import DISPATCH_PINS, KEY_ETHER, KEY_UDP, MAX_APPS, describe_key, dispatch_record_path
from .faults import fault
from .netlink import attach_xdp, remove_xdp
from .teardown import remove_unit
from .installed import Installed, pin_dir, valid_app
from .maps import MapSet
from .preflight import check_free
from .program import DataplaneError, bcc_module
from .testrun import libbpf



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


def load_dispatcher():
    from camus.data import bpf_dir
    bcc = bcc_module()
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
                fanout_mode: str = "auto", progress: Progress = silent) -> list[Installed]:
    """Install every app, then the dispatcher that hands each its frames; nothing is left
    installed when any step fails."""
    keys = plan(apps)
    check_free(iface, mode=mode)
    done: list[Installed] = []
    bpf = None
    attached = False
    try:
        for slot, app in enumerate(apps):
            done.append(Attachment.attach(iface, app.compiled, app.spec_path, app.rules_path, mode,
                                          ports_path=app.ports_path, xdp_redirect=xdp_redirect,
                                          fanout_mode=fanout_mode, app=app.name, app_id=slot,
                                          progress=progress).installed)
        bpf, fn = load_dispatcher()
        for key, slot in keys.items():
            write_key(bpf, key, slot)
        lib = libbpf()
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
        fault("apps:pinned")
        attach_xdp(fn.fd, iface, mode)
        attached = True
        record = {"iface": iface, "mode": mode, "apps": [a.name for a in apps],
                  "keys": {str(k): s for k, s in sorted(keys.items())}}
        path = dispatch_record_path(iface)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        return done
    except BaseException:
        if attached:
            remove_xdp(iface, mode)
        for inst in done:
            remove_unit(inst)
        shutil.rmtree(pin_dir(iface), ignore_errors=True)
        raise
    finally:
        if bpf is not None:
            bpf.cleanup()                # the pins and the attachment keep it alive


