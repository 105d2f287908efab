"""The same-semantics userspace broker in Python: what a Python user would write on top of the
compiled tables. One UDP socket in, per message a table walk, one packet per (input packet,
subscriber) out with exactly that subscriber's messages.

    python -m camus.bench.py_broker TABLES LISTEN_IP LISTEN_PORT PORTS

TABLES is compiler/backends/userspace.write_flat's file, PORTS lines "port ip udp_port" (as for the C
broker). Runs until SIGTERM; prints "ready" when bound and its counters at the end.
"""
from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

from camus.compiler.backends.userspace import read_flat

MOLD_HEADER = 20


def main(argv: list[str]) -> int:
    tables = read_flat(Path(argv[0]))
    dests = {}
    for line in Path(argv[3]).read_text().split("\n"):
        if line.strip():
            p, ip, port = line.split()
            dests[int(p)] = (ip, int(port))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    s.bind((argv[1], int(argv[2])))
    s.settimeout(0.2)
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    signal.signal(signal.SIGINT, lambda *_: running.__setitem__(0, False))
    mt = tables.mtype
    size = tables.msg_bytes
    pk_in = msgs = pk_out = 0
    print("ready", flush=True)
    while running[0]:
        try:
            data = s.recv(65535)
        except (socket.timeout, InterruptedError):
            continue
        pk_in += 1
        if len(data) < MOLD_HEADER:
            continue
        out: dict[int, list[bytes]] = {}
        pos, count = MOLD_HEADER, int.from_bytes(data[18:20], "big")
        for _ in range(count):
            n = int.from_bytes(data[pos:pos + 2], "big")
            if pos + 2 + n > len(data):
                break
            msg = data[pos + 2:pos + 2 + n]
            msgs += 1
            if n == size and (mt is None or msg[mt[0]] == mt[1]):
                for port in tables.classify(msg):
                    out.setdefault(port, []).append(data[pos:pos + 2 + n])
            pos += 2 + n
        for port, parts in out.items():
            if port in dests:
                s.sendto(data[:18] + len(parts).to_bytes(2, "big") + b"".join(parts), dests[port])
                pk_out += 1
    print(f"packets_in {pk_in} messages {msgs} packets_out {pk_out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
