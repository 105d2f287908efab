"""The kernel's network side of an attachment: XDP programs on interfaces, clsact qdiscs and
TC filters, interface names and indexes. One place that talks to netlink, for runtime, grow,
apps and detach alike."""
from __future__ import annotations

import socket
import struct

from .program import DataplaneError
from .xdp_features import XDP_ACT_BASIC, xdp_features


XDP_FLAGS = {"generic": 1 << 1, "native": 1 << 2}
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0


def ifindex(iface: str) -> int:
    try:
        return socket.if_nametoindex(iface)
    except OSError:
        raise DataplaneError(f"no such interface: {iface}") from None


def add_tc(ifname: str, fd: int, name: str, egress: bool, created: list[str]) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
        try:
            ipr.tc("add", "clsact", idx)
            created.append(ifname)
        except NetlinkError as exc:
            if exc.code != 17:                       # EEXIST: someone's clsact is there: share it
                raise DataplaneError(f"cannot add a clsact qdisc to {ifname}: {exc}") from exc
        ipr.tc("add-filter", "bpf", idx, ":1", fd=fd, name=name,
               parent="ffff:fff3" if egress else "ffff:fff2", classid=1, direct_action=True)


def del_clsact(ifnames: list[str]) -> None:
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        for ifname in ifnames:
            found = ipr.link_lookup(ifname=ifname)
            if found:
                try:
                    ipr.tc("del", "clsact", found[0])
                except Exception:
                    pass


def attach_xdp(fd: int, iface: str, mode: str, replace: bool = False) -> None:
    """Attach a loaded XDP program (the classifier, or the dispatcher of several apps) by its fd;
    `replace`: swap it for the one attached (the kernel does it atomically), else refuse when
    one is there."""
    import ctypes
    import os
    from .testrun import libbpf
    lib = libbpf()
    lib.bpf_xdp_attach.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p]
    flags = XDP_FLAGS[mode] | (0 if replace else XDP_FLAGS_UPDATE_IF_NOEXIST)
    rc = lib.bpf_xdp_attach(ifindex(iface), fd, flags, None)
    if rc < 0:
        raise DataplaneError(f"could not attach XDP to {iface} in {mode} mode ({os.strerror(-rc)})"
                             + ("; the driver may lack native XDP: try --mode generic" if mode == "native" else ""))


def remove_xdp(iface: str, mode: str) -> None:
    from bcc import BPF
    BPF.remove_xdp(iface.encode(), XDP_FLAGS.get(mode, 0))


def remove_ours_by_name(iface: str) -> list[str]:
    """Remove an XDP program named camus_xdp or camus_dispatch and TC filters named camus_tc_*
    from `iface`."""
    from .bpfinfo import prog_name
    removed = []
    if prog_name(xdp_prog_id(iface)) in ("camus_xdp", "camus_dispatch"):
        for mode in XDP_FLAGS:
            try:
                remove_xdp(iface, mode)
            except Exception:
                pass
        removed.append("XDP program")
    for direction, pref, _ in tc_filters(iface):
        del_tc_filter(iface, direction, pref)
        removed.append(f"TC {direction} filter")
    return removed


def xdp_prog_id(iface: str) -> int:
    """The id of the XDP program attached to `iface` (0: none, or no such interface)."""
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=iface)
        if not found:
            return 0
        xdp = ipr.get_links(found[0])[0].get_attr("IFLA_XDP")
        return int(xdp.get_attr("IFLA_XDP_PROG_ID") or 0) if xdp is not None else 0


TC_PARENT = {"ingress": 0xFFFFFFF2, "egress": 0xFFFFFFF3}    # clsact's two hooks
TCA_BPF_ID = 11            # linux/pkt_cls.h: the filter's program id (pyroute2 does not decode it)


def _bpf_filter_prog_id(options) -> int:   # type: ignore[no-untyped-def]
    """The program id in a bpf filter's options, read from the attribute's raw bytes."""
    raw = bytes(options.data[options.offset + 4:options.offset + options.length])
    pos = 0
    while pos + 4 <= len(raw):
        length, kind = struct.unpack_from("HH", raw, pos)
        if kind & 0x3FFF == TCA_BPF_ID and length >= 8:
            return int(struct.unpack_from("I", raw, pos + 4)[0])
        pos += max(4, (length + 3) & ~3)
    return 0


def tc_filters(iface: str) -> list[tuple[str, int, int]]:
    """(direction, pref, program id) of each camus_tc_* BPF filter on `iface`."""
    from pyroute2 import IPRoute
    out = []
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=iface)
        if not found:
            return []
        for direction, parent in TC_PARENT.items():
            for f in ipr.get_filters(index=found[0], parent=parent):
                opts = f.get_attr("TCA_OPTIONS")
                if f.get_attr("TCA_KIND") == "bpf" and opts is not None and \
                        str(opts.get_attr("TCA_BPF_NAME") or "").startswith("camus_tc_"):
                    out.append((direction, f["info"] >> 16, _bpf_filter_prog_id(opts)))
    return out


def del_tc_filter(iface: str, direction: str, pref: int) -> None:
    """Remove the filters at priority `pref` of `iface`'s ingress or egress hook (gone already: fine)."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=iface)
        if not found:
            return
        try:
            # with its kind, pyroute2 builds tcm_info from prio (without, it sends priority 0,
            # which the kernel takes for "every filter of the hook")
            ipr.tc("del-filter", "bpf", found[0], parent=TC_PARENT[direction], prio=pref)
        except NetlinkError as exc:
            if exc.code not in (2, 22):           # ENOENT / EINVAL: nothing there any more
                raise


def interface_exists(iface: str) -> bool:
    try:
        socket.if_nametoindex(iface)
        return True
    except OSError:
        return False


def native_xdp(iface: str) -> bool | None:
    """Whether IFACE's driver runs XDP natively, as the kernel reports it: asked in a
    millisecond, before the program is built, instead of learning it from the refused attach.
    None when the kernel cannot say."""
    features = xdp_features(ifindex(iface))
    return None if features is None else bool(features & XDP_ACT_BASIC)


def driver_name(iface: str) -> str:
    """The interface's driver as the kernel names it ("" for virtual ones without a device)."""
    import os
    link = f"/sys/class/net/{iface}/device/driver"
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else ""
