"""What attach checks and prepares before anything is compiled, built or loaded: root, the
interface free of other XDP programs, the BPF filesystem, the ports file."""
from __future__ import annotations

import subprocess
from pathlib import Path

from .bpfinfo import prog_name
from .dispatch import dispatch_record_path
from .installed import pin_dir, state_path, unit_name
from .netlink import driver_name, ifindex, native_xdp, xdp_prog_id
from .program import DataplaneError, require_root


def ensure_bpffs() -> None:
    """Pins need the BPF filesystem at /sys/fs/bpf; mount it when the system has not."""
    mounts = Path("/proc/mounts").read_text()
    if any(line.split()[1:3] == ["/sys/fs/bpf", "bpf"] for line in mounts.splitlines()):
        return
    done = subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], capture_output=True, text=True)
    if done.returncode != 0:
        raise DataplaneError(f"cannot mount the BPF filesystem at /sys/fs/bpf: {done.stderr.strip()}")


def port_specs(ports_path: str | None) -> tuple[list[object] | None, dict]:
    """The ports file's ports in file order and their specs; (None, {}) without a file."""
    if ports_path is None:
        return None, {}
    from .ports import PortsError, load_ports
    try:
        specs = load_ports(ports_path)
    except PortsError as exc:
        raise DataplaneError(str(exc)) from exc
    return list(specs), specs


def check_free(iface: str, app: str = "", mode: str = "native") -> None:
    """Whether IFACE can take camus-xdp, found in milliseconds before anything is compiled or
    built: root, the interface, no camus-xdp there already, no other XDP program (the kernel
    refuses a second one, native or generic, only once the program is built: 12 s later, with
    `Device or resource busy`), and in native mode a driver that runs XDP itself."""
    require_root()
    ifindex(iface)
    unit = unit_name(iface, app)
    if state_path(unit).exists() or pin_dir(unit).exists():
        raise DataplaneError(f"{unit} already has camus-xdp attached: use `update` or `detach`")
    if app:
        return                          # an app's unit: the dispatcher's attach checks the interface
    if dispatch_record_path(iface).exists():
        raise DataplaneError(f"{iface} already has camus-xdp attached (several apps): `detach` it first")
    found = xdp_prog_id(iface)
    if found:
        name = prog_name(found) or "?"
        if name.startswith("camus"):
            raise DataplaneError(f"{iface} runs a camus-xdp program (id {found}, {name}) with no record of it (an "
                                 f"earlier run was killed?): `camus-xdp detach {iface}` removes it")
        raise DataplaneError(f"{iface} already runs an XDP program: {name} (id {found}; `bpftool prog show id "
                             f"{found}` says more). An interface holds one XDP program, native or generic: remove "
                             f"it first (`ip link set dev {iface} xdp off`, or `xdp-loader unload {iface} --all` if "
                             f"xdp-loader loaded it), or attach camus-xdp to another interface")
    if mode == "native" and native_xdp(iface) is False:
        driver = driver_name(iface)
        raise DataplaneError(f"{iface}'s driver{f' ({driver})' if driver else ''} has no native XDP, as the kernel "
                             f"reports it: attach with --mode generic (XDP on the kernel's socket buffers: the "
                             f"same filtering, slower), or use an interface whose driver supports XDP")
