"""The DNS app in the kernel (apps/dns): the XDP program answers the queries a rule answers
itself (XDP_TX with a well-formed response), and hands everything else on as the rules say.
Queries are real DNS packets built by scapy, run with BPF_PROG_TEST_RUN; responses are parsed
back with scapy and checked field by field."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.dns import DNS, DNSQR, DNSRROPT
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from camus.compiler.backends.ebpf.tables import map_contents

from camus.compiler.backends.ebpf.contents import LEAF_CALL, LEAF_DROP, MapContents
from camus.compiler.compile import compile_files
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.dataplane.program import XdpProgram
from camus.dataplane.reference import expected_verdict
from tests.conftest import APPS
from tests.dataplane.test_xdp_kernel import LIMITS

pytestmark = pytest.mark.bpf

CLIENT, SERVER = "10.9.0.2", "10.9.0.53"
CLIENT_MAC, SERVER_MAC = "02:00:00:00:00:02", "02:00:00:00:00:35"


def query(name: str, qtype: str = "A", edns: bool = False, rd: int = 1, qid: int = 0x1234) -> bytes:
    dns = DNS(id=qid, rd=rd, qd=DNSQR(qname=name, qtype=qtype), ar=[DNSRROPT(rclass=1232)] if edns else [])
    return bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER, id=7) /
                 UDP(sport=40123, dport=53) / dns)


COMPILED = compile_files(str(APPS / "dns" / "dns.p4"), str(APPS / "dns" / "rules.txt"))
CONTENTS: list[MapContents] = []            # what the fixture wrote (its port bits)


@pytest.fixture(scope="module")
def dns_prog():
    compiled = COMPILED
    prog = XdpProgram.load(compiled.spec, LIMITS)
    contents = map_contents(compiled.pipeline, compiled.spec, LIMITS)
    prog.write(contents)
    CONTENTS[:] = [contents]
    yield prog
    prog.remove(contents)
    prog.close()


@pytest.mark.parametrize("name, address", [("www.example.com", "10.0.0.105"), ("WWW.Example.Com.", "10.0.0.105"),
                                           ("authentication-service.example.com", "10.0.0.107"),
                                           ("a.b.cdn.example.com", "10.0.0.200")])
@pytest.mark.parametrize("edns", [False, True])
def test_a_query_a_rule_answers_is_answered_from_xdp(dns_prog: XdpProgram, name: str, address: str,
                                                     edns: bool) -> None:
    before = dns_prog.stats()["answered"]
    out = dns_prog.run(query(name, edns=edns))
    assert out.verdict == "XDP_TX"
    assert dns_prog.stats()["answered"] == before + 1
    r = Ether(out.packet)
    assert (r.src, r.dst) == (SERVER_MAC, CLIENT_MAC)
    assert (r[IP].src, r[IP].dst, r[UDP].sport, r[UDP].dport) == (SERVER, CLIENT, 53, 40123)
    assert r[IP].len == len(out.packet) - 14 and r[UDP].len == r[IP].len - 20
    fixed = r[IP].copy()
    fixed.chksum = None
    assert IP(bytes(fixed)).chksum == r[IP].chksum, "IPv4 header checksum"
    assert r[UDP].chksum == 0
    d = r[DNS]
    assert (d.id, d.qr, d.opcode, d.aa, d.rd, d.rcode) == (0x1234, 1, 0, 1, 1, 0)
    assert (d.qdcount, d.ancount, d.nscount, d.arcount) == (1, 1, 0, 0)
    assert d.qd[0].qname.decode().lower() == name.lower().rstrip(".") + "."
    assert (d.an[0].type, d.an[0].rclass, d.an[0].ttl, d.an[0].rdata) == (1, 1, 60, address)
    assert d.an[0].rrname.decode().lower() == name.lower().rstrip(".") + "."
    assert switch_answer(query(name, edns=edns)) == out.packet      # a v1model switch answers the same bytes


def switch_answer(frame: bytes) -> bytes | None:
    """The v1model program's answer (compiler/backends/p4/dns.py: its parser, the P4 entries, its
    ingress rewrite and deparser, walked in Python); None if it would not answer."""
    import ipaddress
    from camus.compiler.backends.p4.dns import answer_walk, parser_walk
    from camus.compiler.backends.p4.layout import dns_topic
    from camus.compiler.backends.p4.entries import p4_tables
    from camus.compiler.backends.p4.interp import EntryInterpreter
    name_at = 14 + 20 + 8 + 12
    if frame[12:14] != b"\x08\x00" or frame[14] & 0x0F != 5:
        return None                                  # the parser never reaches DNS: plain forwarding
    read = parser_walk(dns_topic(COMPILED.spec), frame[name_at:])
    if read is None or not read[2]:
        return None
    verdict = EntryInterpreter(p4_tables(COMPILED.pipeline, COMPILED.spec)).run(read[0])
    if verdict.answer is None:
        return None
    return answer_walk(frame, name_at, read[1], str(ipaddress.IPv4Address(verdict.answer)))


def test_what_no_answer_rule_decides_goes_on_unchanged(dns_prog: XdpProgram) -> None:
    cases = [(query("www.example.com", "AAAA"), "XDP_PASS"),     # answered: A only; the resolver does AAAA
             (query("www.example.org"), "XDP_PASS"),             # the default: the host's resolver
             (query("cdn.example.com"), "XDP_PASS"),             # '*.' needs a label more
             (query("x.ads.tracker.net"), "XDP_DROP"),
             (query("db.corp.internal"), "XDP_PASS")]            # fwd(2): to TC (no port here: passes up)
    for pkt, verdict in cases:
        before = dns_prog.stats()["answered"]
        out = dns_prog.run(pkt)
        assert out.verdict == verdict, Ether(pkt)[DNS].qd[0].qname
        assert dns_prog.stats()["answered"] == before
        if verdict == "XDP_PASS":
            assert out.packet.endswith(pkt)   # after the metadata for TC
        assert switch_answer(pkt) is None     # nor does a switch answer it


def test_not_a_plain_query_is_left_to_the_resolver(dns_prog: XdpProgram) -> None:
    response = bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER) / UDP(sport=1, dport=53) /
                     DNS(qr=1, qd=DNSQR(qname="www.example.com")))
    notify = bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER) / UDP(sport=1, dport=53) /
                   DNS(opcode=4, qd=DNSQR(qname="www.example.com")))
    options = bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER, options=b"\x01\x01\x01\x00") /
                    UDP(sport=1, dport=53) / DNS(qd=DNSQR(qname="www.example.com")))
    for pkt in (response, notify, options):
        out = dns_prog.run(pkt)
        assert out.verdict == "XDP_PASS" and out.packet.endswith(pkt)   # after the metadata for TC
        assert switch_answer(pkt) is None


def test_malformed_names_match_no_name(dns_prog: XdpProgram) -> None:
    """A compression pointer in a question, a label running past the datagram, a name longer
    than the field: depth 0, the default (the resolver decides), never a crash or an answer."""
    dns_head = bytes.fromhex("123401000001000000000000")
    for name in (b"\xc0\x0c", b"\x03www\x07exam", b"\x3f" + b"a" * 63 + b"\x3f" + b"b" * 63 + b"\x00"):
        pkt = bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER) / UDP(sport=1, dport=53) /
                    Raw(dns_head + name + b"\x00\x01\x00\x01"))
        before = dns_prog.stats()
        out = dns_prog.run(pkt)
        assert out.verdict == "XDP_PASS", name
        assert expected_verdict(COMPILED.spec, PipelineInterpreter(COMPILED.pipeline), pkt, 1).verdict == "XDP_PASS"
        assert dns_prog.stats()["malformed"] == before["malformed"]


LABELS = [b"www", b"img", b"x" * 63, b"a.b", b"A\0b", b"Ex"]
NAMED = ["www.example.com", "api.example.com", "cdn.example.com", "ads.tracker.net", "corp.internal", "example.org",
         "authentication-service.example.com", "example.com", ""]     # what the rules name, and near misses


def _wire(labels: list[bytes]) -> bytes:
    return b"".join(bytes([len(x)]) + x for x in labels) + b"\0"


def _case(text: str, flips: list[bool]) -> bytes:
    return "".join(c.upper() if f else c for c, f in zip(text, flips + [False] * len(text))).encode()


wire_names = st.one_of(
    st.builds(lambda pre, named, flips: _wire(pre + [lv for lv in _case(named, flips).split(b".") if lv]),
              st.lists(st.sampled_from(LABELS), max_size=3), st.sampled_from(NAMED), st.lists(st.booleans(), max_size=40)),
    st.binary(max_size=90))                                          # anything at all: pointers, cut labels


@settings(max_examples=300, deadline=None)
@given(name=wire_names)
def test_any_name_bytes_get_what_the_reference_gives(dns_prog: XdpProgram, name: bytes) -> None:
    """XDP's reading of a name (in place, from the datagram's bytes only) against the reference
    decoder and the IR, on valid, odd and malformed names; AAAA, so nothing is answered."""
    pkt = bytes(Ether(src=CLIENT_MAC, dst=SERVER_MAC) / IP(src=CLIENT, dst=SERVER) / UDP(sport=1, dport=53) /
                Raw(bytes.fromhex("123401000001000000000000") + name + b"\x00\x1c\x00\x01"))
    want, _ = PipelineInterpreter(COMPILED.pipeline).run_packet(COMPILED.spec, pkt)
    got = dns_prog.classify(pkt)
    assert len(got.messages) == len(want) == 1
    _, flags, ports = got.messages[0]
    a = want[0].actions
    assert (CONTENTS[0].ports_of(ports), bool(flags & LEAF_DROP), bool(flags & LEAF_CALL)) == \
        (tuple(a.ports), a.drop, bool(a.calls)), name


def test_under_overload_bypass_queries_still_reach_the_host(dns_prog: XdpProgram) -> None:
    """The bypass cover includes the host's stack when a rule has custom actions: a query XDP
    would have answered is not answered (no filtering), but goes up to the resolver with the
    cover's ports, never dropped for want of a port."""
    from camus.compiler.backends.ebpf.contents import LEAF_CALL
    from camus.dataplane.maps import CFG_BYPASS_PPS
    pkt = query("www.example.com")
    dns_prog.maps.cfg(CFG_BYPASS_PPS, 100)              # a bucket of one packet, refilled every 10 ms
    try:
        verdicts = []
        for _ in range(60):
            before = dns_prog.stats()["bypassed"]
            r = dns_prog.classify(pkt)
            if dns_prog.stats()["bypassed"] > before:
                assert r.verdict == "XDP_PASS" and r.flags & LEAF_CALL, r     # to the stack (and port 2)
                assert set(CONTENTS[0].ports_of(r.messages[0][2])) == {2}
            verdicts.append(r.verdict)
        assert verdicts.count("XDP_TX") >= 1 and verdicts.count("XDP_PASS") >= 20, verdicts
    finally:
        dns_prog.maps.cfg(CFG_BYPASS_PPS, 0)
