"""Which ports an XDP broadcast may serve, and when XDP chooses it (dataplane/fanout.py).
The plan needs no root (the interfaces' XDP abilities are passed in); the last test asks a real
kernel about a veth."""
from __future__ import annotations

import subprocess

import pytest

from camus.dataplane import fanout
from camus.dataplane.ports import PortSpec


def _specs(n: int, shared: int = 0, local: bool = False) -> tuple[list[object], dict[object, PortSpec]]:
    """n ports on interfaces ifN (ifindex 100 + N); the last `shared` of them on one interface."""
    specs: dict[object, PortSpec] = {}
    for p in range(1, n + 1):
        iface = "shared" if p > n - shared else f"if{p}"
        specs[p] = PortSpec(p, "remote" if p % 2 else "iface", iface, b"\x02" * 6, "10.0.0.1", 1)
    if local:
        specs["host"] = PortSpec("host", "local")
    return list(specs), specs


def _plan(bits, specs, mode="auto", able=lambda ifindex: True, device=lambda iface: False):
    """The plan with interface numbers 100, 101, ... by name (no such interfaces exist here);
    by default every interface is virtual (a veth)."""
    numbers = {name: 100 + i for i, name in enumerate(sorted({s.iface for s in specs.values() if s.iface}))}
    return fanout.plan(bits, specs, mode, able, numbers.__getitem__, device), numbers


def test_every_port_on_its_own_xdp_capable_interface_gets_an_entry() -> None:
    bits, specs = _specs(8, local=True)
    p, numbers = _plan(bits, specs, "xdp")
    assert [b for b, _ in p.ports] == list(range(8))                  # the host's stack is not one
    assert [i for _, i in p.ports] == [numbers[f"if{n}"] for n in range(1, 9)]
    assert p.min_group == 1                   # xdp: any packet with a group devmap
    assert p.min_copies == 6                  # ceil(8 * 3/4): a broadcast to all pays for 8 copies
    assert p.left_out == ()
    assert p.describe(bits) == ("XDP broadcast to ports 1, 2, 3, 4, 5, 6, 7, 8 for packets going to >= 1 of them "
                                "(a devmap per port set of the rules; all of them for a packet going to >= 6 with "
                                "no devmap of its own), TC clones otherwise")


def test_auto_broadcasts_from_sixteen_copies() -> None:
    bits, specs = _specs(40)
    p, _ = _plan(bits, specs)
    assert (p.min_group, p.min_copies) == (fanout.AUTO_MIN_GROUP, 30) == (16, 30)
    bits, specs = _specs(8)
    p, _ = _plan(bits, specs)
    assert (p.min_group, p.min_copies) == (16, 16)   # never to all of 8 (each packet goes by TC)


def test_auto_broadcasts_from_one_copy_when_every_broadcast_port_is_on_a_device() -> None:
    bits, specs = _specs(8, local=True)
    p, _ = _plan(bits, specs, device=lambda iface: True)
    assert (p.min_group, p.min_copies) == (1, 6)          # as `xdp`: NICs free their frames locally
    assert "packets going to >= 1 of them" in p.describe(bits)
    p, _ = _plan(bits, specs, device=lambda iface: iface != "if3")
    assert p.min_group == fanout.AUTO_MIN_GROUP           # one veth among them: as before
    p, _ = _plan(bits, specs, "tc", device=lambda iface: True)
    assert p == fanout.FanPlan((), 0)                     # tc stays tc


def test_a_veth_is_not_a_device_and_a_nic_or_virtio_is() -> None:
    from pathlib import Path
    assert not fanout.on_device("lo")
    nics = [d.name for d in Path("/sys/class/net").iterdir() if (d / "device").exists()]
    assert all(fanout.on_device(n) for n in nics)
    assert not fanout.on_device("no-such-interface")


def test_ports_sharing_an_interface_or_without_xdp_frames_stay_with_tc() -> None:
    bits, specs = _specs(6, shared=2)
    p, _ = _plan(bits, specs, "xdp", able=lambda ifindex: ifindex != 101)   # if2 (numbered by name from 100)
    assert [bits[b] for b, _ in p.ports] == [1, 3, 4]
    assert dict(p.left_out) == {2: "if2 does not take XDP frames (a veth needs XDP or GRO on its peer)",
                                5: "shared serves other ports too", 6: "shared serves other ports too"}
    assert p.min_copies == 3                  # ceil(3 * 3/4)


def test_modes() -> None:
    bits, specs = _specs(9)
    assert _plan(bits, specs, "tc")[0] == fanout.FanPlan((), 0)
    assert _plan(bits, specs, "tc")[0].describe(bits) == "TC clones"
    assert _plan(bits, specs, "xdp")[0].min_copies == 7     # broadcast to all: for 7 of the 9 or more
    assert _plan(bits, specs, "auto")[0].min_group == 16
    with pytest.raises(ValueError, match="fan-out mode 'fast'"):
        _plan(bits, specs, "fast")


def test_no_capable_port_means_tc_only() -> None:
    bits, specs = _specs(3)
    p, _ = _plan(bits, specs, able=lambda ifindex: False)
    assert p.ports == () and p.describe(bits) == "TC clones" and len(p.left_out) == 3


def test_at_most_max_fan_entries() -> None:
    bits, specs = _specs(fanout.MAX_FAN + 2)
    p, _ = _plan(bits, specs)
    assert len(p.ports) == fanout.MAX_FAN
    assert [why for _, why in p.left_out] == [f"more than {fanout.MAX_FAN} ports"] * 2


@pytest.mark.netns
def test_the_kernel_says_a_veth_takes_xdp_frames_once_its_peer_has_gro() -> None:
    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)
    subprocess.run(["ip", "link", "del", "cxf-a"], capture_output=True)
    sh("ip", "link", "add", "cxf-a", "type", "veth", "peer", "name", "cxf-b")
    try:
        sh("ip", "link", "set", "cxf-a", "up")
        sh("ip", "link", "set", "cxf-b", "up")
        sh("ethtool", "-K", "cxf-b", "gro", "off")
        a = int(open("/sys/class/net/cxf-a/ifindex").read())
        assert not fanout.xdp_features(a) & fanout.NDO_XMIT
        sh("ethtool", "-K", "cxf-b", "gro", "on")
        assert fanout.xdp_features(a) & fanout.NDO_XMIT
    finally:
        subprocess.run(["ip", "link", "del", "cxf-a"], capture_output=True)


def test_groups_only_for_sets_the_plan_would_broadcast() -> None:
    bits, specs = _specs(20)
    p, _ = _plan(bits, specs, "auto")                               # groups from 16 copies
    wide, narrow, host = ((1 << 17) - 1, 0, 0, 0), (0b11, 0, 0, 0), ((1 << 20), 0, 0, 0)
    assert fanout.group_sets([wide, narrow, wide, host], p) == [wide]   # the 2-port set goes by TC;
    assert fanout.group_sets([narrow, wide], _plan(bits, specs, "xdp")[0]) == [narrow, wide]   # bit 20: no port
