"""What the kernel says an interface's driver does with XDP (the `netdev` generic netlink
family's xdp-features, kernels 6.3 and later): whether it runs programs itself (native mode,
asked before attach builds anything) and whether it takes redirected frames (fan-out). No
other dataplane import: the program, fan-out and netlink modules all ask it."""
from __future__ import annotations

NETDEV_CMD_DEV_GET = 1           # include/uapi/linux/netdev.h (the `netdev` generic netlink family)
XDP_ACT_BASIC = 1 << 0           # NETDEV_XDP_ACT_BASIC: the driver runs XDP programs itself (native mode)
XDP_ACT_NDO_XMIT = 1 << 2        # NETDEV_XDP_ACT_NDO_XMIT: it takes frames redirected by XDP


def xdp_features(ifindex: int) -> int | None:
    """The interface's NETDEV_XDP_ACT_* bits, from the kernel's netdev generic netlink family
    (kernels 6.3 and later); None when the kernel cannot say."""
    from pyroute2.netlink import NLM_F_REQUEST, genlmsg
    from pyroute2.netlink.generic import GenericNetlinkSocket

    class DevMsg(genlmsg):
        nla_map = (("NETDEV_A_DEV_UNSPEC", "none"), ("NETDEV_A_DEV_IFINDEX", "uint32"),
                   ("NETDEV_A_DEV_PAD", "none"), ("NETDEV_A_DEV_XDP_FEATURES", "uint64"))

    sock = GenericNetlinkSocket()
    try:
        sock.bind("netdev", DevMsg)
        msg = DevMsg()
        msg["cmd"], msg["version"] = NETDEV_CMD_DEV_GET, 1
        msg["attrs"] = [("NETDEV_A_DEV_IFINDEX", ifindex)]
        found = sock.nlm_request(msg, msg_type=sock.prid, msg_flags=NLM_F_REQUEST)
        features = found[0].get_attr("NETDEV_A_DEV_XDP_FEATURES") if found else None
        return None if features is None else int(features)
    except Exception:                    # no such family (older kernel), or it would not answer
        return None
    finally:
        sock.close()
