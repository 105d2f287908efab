"""A P4 switch simulated in software for mixed labs: it runs the entries the controller wrote
for it (DIR/entries.p4rt.json, P4 match semantics via the entry interpreter) on the frames of
its interfaces, and sends each port the frame pruned to that port's messages (the program's
egress pruning), never back out of the ingress port. It follows DIR when the controller flips
it to a new version.

    python -m camus.controller.softswitch --dir SWITCH_DIR/sw1 --spec SPEC --port 1=IF1 --port 2=IF2 ...
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

from camus.compiler.backends.p4_entries import tables_from_p4runtime
from camus.compiler.backends.p4_interp import EntryInterpreter
from camus.compiler.codec.packets import decode_packet, mold_messages, udp_frame
from camus.compiler.language.spec_parser import load_spec

ETH_P_ALL = 3
PACKET_OUTGOING = 4


class SoftSwitch:
    def __init__(self, directory: Path, spec_path: str, ports: dict[int, str]) -> None:
        self.dir, self.spec, self.ports = directory, load_spec(spec_path), ports
        self.version = ""
        self.interp: EntryInterpreter | None = None
        self.socks: dict[int, socket.socket] = {}
        for p, ifname in ports.items():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((ifname, 0))
            self.socks[p] = s
        self.by_fd = {s.fileno(): p for p, s in self.socks.items()}
        self.forwarded = 0

    def reload(self) -> None:
        try:
            target = os.readlink(self.dir) if self.dir.is_symlink() else str(self.dir)
        except OSError:
            return
        if target == self.version:
            return
        try:
            doc = json.loads((self.dir / "entries.p4rt.json").read_text())
        except (OSError, ValueError):
            return
        self.interp = EntryInterpreter(tables_from_p4runtime(doc, self.spec))
        self.version = target
        print(f"loaded {target}", flush=True)

    def handle(self, ingress: int, frame: bytes) -> None:
        if self.interp is None:
            return
        decoded = decode_packet(self.spec, frame)
        if not decoded.messages:
            return
        ihl = (frame[14] & 0x0F) * 4
        payload = frame[14 + ihl + 8:]
        raw = mold_messages(payload, with_prefix=True) if self.spec.framing.kind == "moldudp64" else [payload]
        out: dict[int, list[bytes]] = {}
        for m in decoded.messages:
            if not m.subscribable or m.index >= len(raw):
                continue
            for p in self.interp.run(m.values).ports:
                if p != ingress and p in self.socks:
                    out.setdefault(int(p), []).append(raw[m.index])
        src_ip = str(ipaddress.IPv4Address(frame[14 + 12:14 + 16]))
        dst_ip = str(ipaddress.IPv4Address(frame[14 + 16:14 + 20]))
        dport = int.from_bytes(frame[14 + ihl + 2:14 + ihl + 4], "big")
        for p, msgs in sorted(out.items()):
            if self.spec.framing.kind == "moldudp64":
                body = payload[:18] + len(msgs).to_bytes(2, "big") + b"".join(msgs)
            else:
                body = msgs[0]
            self.socks[p].send(udp_frame(body, dport, src_ip=src_ip, dst_ip=dst_ip, src_mac=frame[6:12],
                                         dst_mac=frame[0:6]))
            self.forwarded += 1

    def serve(self) -> None:
        running = [True]
        signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
        print("ready", flush=True)
        while running[0]:
            self.reload()
            ready, _, _ = select.select(list(self.socks.values()), [], [], 0.05)
            for s in ready:
                frame, addr = s.recvfrom(65535)
                if addr[2] == PACKET_OUTGOING:
                    continue
                self.handle(self.by_fd[s.fileno()], frame)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="the switch's entries directory (the controller's DIR/<switch>)")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--port", action="append", required=True, help="N=IFACE, one per switch port")
    args = ap.parse_args(argv)
    ports = {}
    for item in args.port:
        n, _, ifname = item.partition("=")
        if not n.isdigit() or not ifname:
            ap.error(f"--port {item!r}: expected N=IFACE")
        ports[int(n)] = ifname
    SoftSwitch(Path(args.dir), args.spec, ports).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
