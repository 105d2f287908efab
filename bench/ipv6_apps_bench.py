"""What the IPv6 apps cost on XDP: ns per packet through BPF_PROG_TEST_RUN for
- ILA (apps/ila): a datagram to a SIR address whose identifier a rule maps (the locator written
  into the destination, UDP checksum adjusted) and one to an unknown identifier (to the resolver),
  with N identifier rules (tasks spread over 64 locators);
- hICN meter (apps/hicn): an interest for a metered name (its window count decides the port), one
  for one of N more name prefixes, and a data packet.
Feeds: bench/feeds.py (ila_datagrams, hicn_messages); the addresses are 128-bit fields matched as
two 64-bit words.

    sudo python bench/ipv6_apps_bench.py [-n 1000 -n 100000]

Each figure is the median of 20,000 single runs (the kernel's own timing of each: with `repeat`
the kernel reruns on the frame as the last run left it, and a rewritten datagram has a new
destination); the last line is one JSON object.
"""
from __future__ import annotations

import sys

from camus.bench.single_runs import bench_main, frame_of, time_cases
from camus.bench.feeds import HICN_NAMES, ILA_SIR, hicn_messages, ila_identifier
from camus.data import apps_dir

def v6(value: int) -> str:
    import ipaddress
    return str(ipaddress.IPv6Address(value))


def ila_rules(n: int) -> str:
    """n tasks (identifiers 0:0:1:x) on 64 hosts (locators 2001:db8:<h>:1::), besides the app's rules."""
    own = (apps_dir() / "ila" / "rules.txt").read_text()
    extra = [f"ipv6.dst == {v6(ILA_SIR << 64 | ila_identifier(i + 16))} : ila({v6((0x20010DB8 << 32 | i % 64 << 16 | 1) << 64)})"
             for i in range(n)]
    return own + "\n".join(extra) + "\n"


def hicn_rules(n: int) -> str:
    """The app's metered names and n more name prefixes b001:0:<k>::/64 forwarded by name (each
    metered name is a state variable, a decision variable of its own: a spec's counter holds 64)."""
    own = (apps_dir() / "hicn" / "rules.txt").read_text()
    extra = [f"kind == 1 and ipv6.dst == {v6((HICN_NAMES << 32 | k) << 64)}/64 : fwd({1 + k % 8})"
             for k in range(3, n + 3)]
    return own + "\n".join(extra) + "\n"


def measure(n: int) -> dict[str, int]:
    known = {"ipv6.dst": ILA_SIR << 64 | ila_identifier(16 + n - 1)}          # the last rule's task
    unknown = {"ipv6.dst": ILA_SIR << 64 | 0x123456789}
    figures = time_cases("ila", ila_rules(n), {"ila_rewritten": (frame_of(known), "XDP_PASS"),
                                              "ila_unknown": (frame_of(unknown), "XDP_PASS")})
    interest = {"hicn.kind": 1, "ipv6.dst": (HICN_NAMES << 32 | 1) << 64 | 9}     # a metered name
    named = {"hicn.kind": 1, "ipv6.dst": (HICN_NAMES << 32 | n + 2) << 64 | 7}      # the last name prefix
    data = hicn_messages(1, 1, data_share=1.0)[0]
    figures |= time_cases("hicn", hicn_rules(n), {"hicn_metered": (frame_of(interest), "XDP_PASS"),
                                                 "hicn_by_name": (frame_of(named), "XDP_PASS"),
                                                 "hicn_data": (frame_of(data), "XDP_PASS")})
    return figures


def main() -> int:
    return bench_main(__doc__ or "", "identifier rules / metered names", "rules",
                      [("ila_rewritten", "ILA rewritten"), ("ila_unknown", "ILA unknown"),
                       ("hicn_metered", "hICN metered"), ("hicn_by_name", "hICN by name"), ("hicn_data", "hICN data")],
                      "ns per packet", measure)


if __name__ == "__main__":
    sys.exit(main())
