"""The ILA app in the kernel (apps/ila): XDP writes the rule's locator into the IPv6 destination's
top 64 bits and adjusts the UDP checksum; the packet then goes on as the rules say. Packets are
real IPv6/UDP datagrams built by scapy, run with BPF_PROG_TEST_RUN, parsed back and checked."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.compile import compile_files
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.conftest import APPS
from tests.dataplane.test_xdp_kernel import LIMITS

pytestmark = pytest.mark.bpf

META = 8                                   # XDP_PASS output: the metadata for TC, then the frame
COMPILED = compile_files(str(APPS / "ila" / "ila.p4"), str(APPS / "ila" / "rules.txt"))


def datagram(dst: str, payload: bytes = b"ILA payload", vlan: bool = False) -> bytes:
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    tag = Dot1Q(vlan=7) if vlan else None
    ip = IPv6(src="2001:db8:5ea::1:99", dst=dst, hlim=64) / UDP(sport=4000, dport=5000) / payload
    return bytes(eth / tag / ip if tag is not None else eth / ip)


@pytest.fixture(scope="module")
def ila_prog():
    prog = XdpProgram.load(COMPILED.spec, LIMITS)
    contents = map_contents(COMPILED.pipeline, COMPILED.spec, LIMITS)
    prog.write(contents)
    yield prog
    prog.remove(contents)
    prog.close()


def _udp_checksum_ok(frame: bytes) -> bool:
    ip6 = Ether(frame)[IPv6]
    sent = ip6[UDP].chksum
    fresh = ip6.copy()
    fresh[UDP].chksum = None
    return IPv6(bytes(fresh))[UDP].chksum == sent


@pytest.mark.parametrize("vlan", [False, True])
@pytest.mark.parametrize("dst, want", [("2001:db8:5ea::1:1", "2001:db8:a:1::1:1"),
                                       ("2001:db8:5ea::1:3", "2001:db8:b:1::1:3"),
                                       ("2001:db8:c:1:0:0:1:1", "2001:db8:5ea::1:1")])    # back to SIR
def test_the_locator_is_written_and_the_checksum_stays_valid(ila_prog: XdpProgram, dst: str, want: str,
                                                             vlan: bool) -> None:
    before = ila_prog.stats()["rewritten"]
    pkt = datagram(dst, vlan=vlan)
    out = ila_prog.run(pkt)
    assert out.verdict == "XDP_PASS"                 # to the host stack (and TC's ports): routed by the locator
    frame = out.packet[META:]
    assert len(frame) == len(pkt)
    got = Ether(frame)
    assert got[IPv6].dst == want and got[IPv6].src == "2001:db8:5ea::1:99"
    assert bytes(got[UDP].payload) == b"ILA payload"
    assert _udp_checksum_ok(frame)
    assert ila_prog.stats()["rewritten"] == before + 1
    if not vlan:                                     # the switch program parses untagged frames
        assert switch_rewrite(pkt) == frame          # a v1model switch writes the same bytes


def switch_rewrite(frame: bytes) -> bytes | None:
    """The v1model program's rewrite (compiler/backends/p4/ila.py: the P4 entries, its ingress
    rewrite, walked in Python); None if its entries do not rewrite this destination."""
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.backends.p4.ila import rewrite_walk
    from camus.compiler.backends.p4.interp import EntryInterpreter
    dst = int.from_bytes(frame[14 + 24:14 + 40], "big")
    verdict = EntryInterpreter(p4_tables(COMPILED.pipeline, COMPILED.spec)).run(
        {"ipv6.dst/hi": dst >> 64, "ipv6.dst/lo": dst & ((1 << 64) - 1)})
    return None if verdict.locator is None else rewrite_walk(frame, verdict.locator)


def test_packets_no_ila_rule_names_are_left_alone(ila_prog: XdpProgram) -> None:
    for dst, verdict in (("2001:db8:5ea::7", "XDP_PASS"),          # fwd(9): unknown identifier to the resolver
                         ("fe80::1", "XDP_DROP")):                  # nobody subscribed
        before = ila_prog.stats()["rewritten"]
        pkt = datagram(dst)
        out = ila_prog.run(pkt)
        assert out.verdict == verdict
        if verdict == "XDP_PASS":
            assert out.packet[META:] == pkt
        assert ila_prog.stats()["rewritten"] == before
    v4 = bytes(Ether() / IP(dst="10.0.0.1") / UDP(dport=5000) / b"x")
    assert ila_prog.run(v4).verdict == "XDP_PASS"   # not an IPv6 packet: not the feed, passed untouched


@settings(max_examples=60, deadline=None)
@given(identifier=st.integers(0, (1 << 64) - 1), sir=st.sampled_from([0x20010DB805EA0000, 0x20010DB8000C0001,
                                                                       0xFE80000000000000]),
       payload=st.binary(max_size=40), near=st.sampled_from([0, 0x10001, 0x10002, 0x10003, 0x10009]))
def test_any_address_goes_where_the_reference_says(ila_prog: XdpProgram, identifier: int, sir: int, payload: bytes,
                                                   near: int) -> None:
    """Differential: XDP's verdict and rewritten destination against the reference decoder + IR,
    for any identifier (and the ones the rules name) under each prefix."""
    ident = near if near else identifier
    dst = str(ipaddress.IPv6Address(sir << 64 | ident))
    pkt = datagram(dst, payload)
    want = expected_verdict(COMPILED.spec, PipelineInterpreter(COMPILED.pipeline), pkt, 1)
    out = ila_prog.run(pkt)
    assert out.verdict == want.verdict, dst
    calls = [args for _, a in want.messages.values() for name, args in a.calls if name == "ila"]
    if out.verdict == "XDP_PASS":
        got = Ether(out.packet[META:])
        locator = int(ipaddress.IPv6Address(calls[0][0])) >> 64 if calls else sir
        assert int(ipaddress.IPv6Address(got[IPv6].dst)) == locator << 64 | ident
        assert _udp_checksum_ok(out.packet[META:])
        if calls:
            assert switch_rewrite(pkt) == out.packet[META:]      # the switch's bytes are XDP's
    if not calls:
        assert switch_rewrite(pkt) is None
