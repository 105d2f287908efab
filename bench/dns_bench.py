"""What a DNS answer from XDP costs (apps/dns): ns per query through BPF_PROG_TEST_RUN for a
query the data plane answers itself (parse the name, walk the tables, build the response:
XDP_TX), one it hands to the host's resolver (the default) and one a drop rule stops, with N
answered names (N/2 exact names, N/2 `*.` wildcards) plus the app's own rules.

    sudo python bench/dns_bench.py [-n 1000 -n 100000]

Each figure is the median of 20,000 single runs (the kernel's own timing of each); the last line
is one JSON object.
"""
from __future__ import annotations

import sys

from scapy.layers.dns import DNS, DNSQR, DNSRROPT
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from camus.bench.single_runs import bench_main, time_cases
from camus.data import apps_dir


def rules(n: int) -> str:
    """The app's rules and n more answered names: host<i>.zone<i % 97>.example and *.svc<i>.example."""
    own = (apps_dir() / "dns" / "rules.txt").read_text()
    extra = [f'qname == "host{i}.zone{i % 97}.example" : answerDNS(10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255})'
             if i % 2 == 0 else f'qname == "*.svc{i}.example" : answerDNS(10.200.{i >> 8 & 255}.{i & 255})'
             for i in range(n)]
    return own + "\n".join(extra) + "\n"


def query(name: str) -> bytes:
    return bytes(Ether() / IP(src="10.9.0.2", dst="10.9.0.53") / UDP(sport=40000, dport=53) /
                 DNS(id=1, rd=1, qd=[DNSQR(qname=name)], ar=[DNSRROPT(rclass=1232)]))   # as dig sends it


def measure(n: int) -> dict[str, int]:
    return time_cases("dns", rules(n), {
        "answered": (query("www.example.com"), "XDP_TX"),
        "answered_wildcard": (query(f"a.svc{n - 1 if n % 2 == 0 else n - 2}.example"), "XDP_TX"),
        "to_resolver": (query("www.example.org"), "XDP_PASS"),
        "dropped": (query("x.ads.tracker.net"), "XDP_DROP")})


def main() -> int:
    return bench_main(__doc__ or "", "answered names besides the app's", "names",
                      [("answered", "answered"), ("answered_wildcard", "wildcard"), ("to_resolver", "resolver"),
                       ("dropped", "dropped")], "ns per query", measure)


if __name__ == "__main__":
    sys.exit(main())
