"""The reference packet parser: what every data plane is compared with, malformed input too."""
from __future__ import annotations

import struct

import pytest

from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.compile import compile_files
from camus.compiler.codec.packets import build_packet, decode_packet, message_from_text
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.codec.pcap import PcapError, read_pcap, write_pcap
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS

ITCH = load_spec(APPS / "itch" / "itch.p4")
INT = load_spec(APPS / "int" / "int.p4")


def msgs(n: int) -> list[dict[str, int]]:
    return [message_from_text(ITCH, f"stock=S{i} price={100 + i} shares={i} buy_sell_indicator='B'")
            for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_moldudp64_round_trip(n: int) -> None:
    sent = msgs(n)
    pkt = build_packet(ITCH, sent, sequence=77)
    assert len(pkt) == 14 + 20 + 8 + 20 + n * (2 + 36)
    got = decode_packet(ITCH, pkt)
    assert got.error is None and [m.values for m in got.messages] == sent
    assert all(m.subscribable and m.length == 36 for m in got.messages)
    assert got.offsets["moldudp64"] == 42


def test_truncation_at_every_byte_never_misdelivers() -> None:
    sent = msgs(3)
    pkt = build_packet(ITCH, sent)
    for cut in range(len(pkt)):
        got = decode_packet(ITCH, pkt[:cut])          # never raises
        assert got.error is not None
        # a cut frame is shorter than its IP and UDP lengths say: malformed as a whole
        assert got.messages == []


def _edit(pkt: bytes, off: int, data: bytes) -> bytes:
    return pkt[:off] + data + pkt[off + len(data):]


def test_lies_and_foreign_traffic() -> None:
    pkt = build_packet(ITCH, msgs(3))
    lying_count = _edit(pkt, 42 + 18, struct.pack("!H", 5))
    got = decode_packet(ITCH, lying_count)
    assert len(got.messages) == 3 and "count says 5" in got.error
    lying_len = _edit(pkt, 62 + 38, struct.pack("!H", 300))
    got = decode_packet(ITCH, lying_len)
    assert len(got.messages) == 1 and "runs past the packet" in got.error
    fragment = _edit(pkt, 14 + 6, struct.pack("!H", 0x2000))
    assert decode_packet(ITCH, fragment).error == "IPv4 fragment"
    tcp = _edit(pkt, 14 + 9, b"\x06")
    assert decode_packet(ITCH, tcp).error == "not UDP"
    assert "not the feed's" in decode_packet(ITCH, build_packet(ITCH, msgs(1), dst_port=53)).error
    arp = pkt[:12] + b"\x08\x06" + pkt[14:]
    assert decode_packet(ITCH, arp).error.startswith("not IP")


def test_vlan_tags_are_skipped() -> None:
    pkt = build_packet(ITCH, msgs(2))
    one = pkt[:12] + b"\x81\x00\x00\x64" + pkt[12:]
    two = pkt[:12] + b"\x88\xa8\x00\x01\x81\x00\x00\x64" + pkt[12:]
    for p in (one, two):
        got = decode_packet(ITCH, p)
        assert got.error is None and [m.values for m in got.messages] == msgs(2)


def test_other_itch_message_types_are_framed_but_not_subscribed() -> None:
    body = msgs(1)
    pkt = bytearray(build_packet(ITCH, body * 2))
    pkt[64] = ord("E")                                 # first message: Order Executed type
    got = decode_packet(ITCH, bytes(pkt))
    assert [m.subscribable for m in got.messages] == [False, True]
    short = bytearray(build_packet(ITCH, body))
    short[60:62] = b"\x00\x00"                          # zero-length message: skipped cleanly
    got = decode_packet(ITCH, bytes(short))
    assert got.messages == [] and "runs past" not in (got.error or "")


def test_int_reports_and_packet_level_fields() -> None:
    values = message_from_text(INT, "switch_id=7 hop_latency=200000 flow_dst=10.1.2.3")
    pkt = build_packet(INT, [values])
    got = decode_packet(INT, pkt)
    assert got.error is None and got.messages[0].values == values
    c = compile_files(APPS / "int" / "int.p4", APPS / "int" / "rules.txt")
    verdicts, err = PipelineInterpreter(c.pipeline).run_packet(INT, pkt)
    assert err is None and verdicts[0].actions.ports == (1, 3)   # slow hop + 10.1/16 flow


def test_pcap_round_trip_and_errors(tmp_path) -> None:
    frames = [(i * 1_000_000, build_packet(ITCH, msgs(i + 1))) for i in range(3)]
    path = tmp_path / "feed.pcap"
    write_pcap(path, frames)
    assert list(read_pcap(path)) == frames
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40)
    with pytest.raises(PcapError, match="pcapng"):
        list(read_pcap(bad))
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(PcapError, match="truncated"):
        list(read_pcap(path))


def test_message_frame_writes_the_packet_level_fields_and_keeps_the_parse() -> None:
    """The packet one message means (issue 45: specs over the standard headers): TTL, DSCP and
    ports written where the headers hold them, the IPv4 checksum right again, the IPv6 UDP
    checksum too; a value for a field that decides the parse (protocol) is not written."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from camus.compiler.codec.packets import message_frame
    spec = parse_spec("@pragma query_field_exact(ipv4.dstAddr)\n@pragma query_field(ipv4.ttl)\n"
                      "@pragma query_field(ipv4.diffserv)\n@pragma query_field(ipv4.protocol)\n"
                      "@pragma query_field(udp.srcPort)\n@pragma query_field_exact(udp.dstPort)\n", "s.p4")
    values = message_from_text(spec, "dstAddr=10.9.8.7 ttl=3 diffserv=184 protocol=6 srcPort=1023 dstPort=53")
    frame = message_frame(spec, values)
    pkt = Ether(frame)
    assert (pkt[IP].dst, pkt[IP].ttl, pkt[IP].tos, pkt[IP].proto) == ("10.9.8.7", 3, 184, 17)
    assert (pkt[UDP].sport, pkt[UDP].dport) == (1023, 53)
    chk = pkt[IP].chksum
    del pkt[IP].chksum
    assert Ether(bytes(pkt))[IP].chksum == chk                         # the header checksum is right
    decoded = decode_packet(spec, frame)
    assert decoded.error is None and decoded.messages[0].values == {**values, "ipv4.protocol": 17}
    spec6 = parse_spec("@pragma query_field_exact(ipv6.dstAddr)\n@pragma query_field(ipv6.hopLimit)\n"
                       "@pragma query_field_exact(udp.dstPort)\n", "s6.p4")
    frame6 = message_frame(spec6, message_from_text(spec6, "dstAddr=2001:db8::1 hopLimit=9 dstPort=443"))
    pkt6 = Ether(frame6)
    assert (pkt6[IPv6].dst, pkt6[IPv6].hlim, pkt6[UDP].dport) == ("2001:db8::1", 9, 443)
    chk6 = pkt6[UDP].chksum
    del pkt6[UDP].chksum
    assert Ether(bytes(pkt6))[UDP].chksum == chk6                      # the UDP checksum covers the port
