"""A publisher namespace joined to the host by a veth pair, for lab tests that attach the
classifier to the host side and send frames from the namespace."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SENDER = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for h in sys.argv[2:]:
    s.send(bytes.fromhex(h))
"""


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


@contextmanager
def veth_pair(ns: str, pub: str, brk: str, net: str) -> Iterator[None]:
    """Namespace `ns` holding `pub` (NET.1/24), joined to `brk` (NET.2/24) on the host; leftovers
    of an interrupted run removed first, everything removed after."""
    sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", brk, check=False)
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", brk, "type", "veth", "peer", "name", pub, "netns", ns)
        sh("ip", "addr", "add", f"{net}.2/24", "dev", brk)
        sh("ip", "link", "set", brk, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.1/24", "dev", pub)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", pub, "up")
        yield
    finally:
        sh("ip", "link", "del", brk, check=False)
        sh("ip", "netns", "del", ns, check=False)


def send_from(ns: str, pub: str, frames: list[bytes]) -> None:
    """Send raw frames out of `pub` inside `ns`."""
    sh("ip", "netns", "exec", ns, sys.executable, "-c", SENDER, pub, *[f.hex() for f in frames])
