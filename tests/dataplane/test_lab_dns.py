"""Lab test (root, namespaces, `dig`): the DNS app attached with the CLI to a real veth. A
client namespace asks with `dig`; names a rule answers are answered by XDP itself (the resolver
process on the host never sees those queries), the others reach the resolver, which answers them
with an address of its own, so every answer says who gave it."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.dataplane import counting, runtime
from camus.dataplane import installed as state
from camus.lab.namespaces import pass_through
from tests.conftest import APPS
from tests.dataplane.vethlab import sh, veth_pair

pytestmark = [pytest.mark.netns, pytest.mark.skipif(shutil.which("dig") is None,
                                                   reason="dig (bind9-dnsutils; scripts/setup.sh installs it)")]
NS, CLI, BRK = "camus-test-dns", "cxd-cli0", "cxd-brk0"
RESOLVER_IP, CLIENT_IP, RESOLVER_ANSWER = "10.76.0.2", "10.76.0.1", "10.99.99.99"

# The host's own resolver: answers every A query with RESOLVER_ANSWER, prints each name it saw.
RESOLVER = """
import socket, sys
from scapy.layers.dns import DNS, DNSRR
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(4096)
    q = DNS(data)
    name = q.qd[0].qname
    print(name.decode(), flush=True)
    s.sendto(bytes(DNS(id=q.id, qr=1, rd=q.rd, qd=q.qd, an=[DNSRR(rrname=name, rdata=sys.argv[2], ttl=5)])), peer)
"""


@pytest.fixture
def dns_lab():
    with veth_pair(NS, CLI, BRK, "10.76.0"):            # the resolver at .2 on the host, the client at .1
        resolver = None
        try:
            pass_through(CLI, NS)           # the veth takes what XDP sends back (XDP_TX) only so
            resolver = subprocess.Popen([sys.executable, "-c", RESOLVER, RESOLVER_IP, RESOLVER_ANSWER],
                                        stdout=subprocess.PIPE, text=True)
            assert resolver.stdout is not None and resolver.stdout.readline().strip() == "ready"
            yield resolver
        finally:
            if resolver is not None:
                resolver.kill()
            if state.state_path(BRK).exists():
                runtime.detach(BRK)


def dig(name: str, *opts: str) -> list[str]:
    out = sh("ip", "netns", "exec", NS, "dig", f"@{RESOLVER_IP}", name, "A", "+short", "+tries=1", "+time=2", *opts,
             check=False)
    return [line for line in out.stdout.splitlines() if line and not line.startswith(";")]   # the addresses


def seen_by_resolver(resolver: subprocess.Popen) -> list[str]:
    resolver.kill()
    out, _ = resolver.communicate(timeout=5)
    return out.split()


def test_dig_gets_its_answer_from_xdp_and_the_resolver_never_sees_the_query(dns_lab, tmp_path) -> None:
    ports = tmp_path / "ports.txt"
    ports.write_text("2: local\n")                                    # fwd(2): to this host
    res = CliRunner().invoke(main, ["attach", BRK, "--spec", str(APPS / "dns" / "dns.p4"),
                                    "--rules", str(APPS / "dns" / "rules.txt"), "--ports", str(ports)])
    assert res.exit_code == 0, res.output
    assert dig("www.example.com") == ["10.0.0.105"]
    assert dig("WWW.EXAMPLE.COM", "+noedns") == ["10.0.0.105"]        # without EDNS too, any case
    assert dig("img.cdn.example.com") == ["10.0.0.200"]
    assert dig("www.example.org") == [RESOLVER_ANSWER]                  # no rule: the host's resolver
    assert dig("x.ads.tracker.net") == []                               # a drop rule: no answer at all
    time.sleep(0.2)
    assert runtime.stats(BRK)["answered"] == 3
    hits = dict((line, n) for line, n in counting.rule_counts(BRK))
    assert hits['qname == "www.example.com" : answerDNS(10.0.0.105)'] == 2
    assert hits['qname == "*.cdn.example.com" : answerDNS(10.0.0.200)'] == 1
    assert seen_by_resolver(dns_lab) == ["www.example.org."]
