"""A P4 switch simulated in software for mixed labs: it runs its table entries (P4 match
semantics via the entry interpreter) on the frames of its interfaces, and sends each port the
frame pruned to that port's messages (the program's egress pruning), never back out of the
ingress port.

Its entries come the way a real switch's do: over P4Runtime (gRPC, `--grpc HOST:PORT`: the
controller arbitrates, reads, writes deltas; `p4rt_server`), or offline from a directory of
the P4 back end's files (`--dir`: entries.txtpb and p4info.txtpb, followed when the controller
flips DIR to a new version).

    python -m camus.controller.softswitch --grpc 127.0.0.1:9559 --device-id 1 --spec SPEC --port 1=IF1 ...
    python -m camus.controller.softswitch --dir SWITCH_DIR/sw1 --spec SPEC --port 1=IF1 --port 2=IF2 ...
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import select
import signal
import socket
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import P4Tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.runtime import Names, p4info_pb2, p4runtime_pb2, tables_from_entities, text_format
from camus.compiler.codec.packets import decode_packet, mold_messages, udp_frame
from camus.compiler.language.spec_parser import load_spec

ETH_P_ALL = 3
PACKET_OUTGOING = 4


class SoftSwitch:
    def __init__(self, directory: Path | None, spec_path: str, ports: dict[int, str]) -> None:
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
        self.service: Any = None         # the P4Runtime server's state (--grpc): P4RuntimeSwitch
        self.stale = False

    def run_tables(self, tables: P4Tables) -> None:
        """From now on classify with these tables (one reference swap: a frame sees one set)."""
        self.interp = EntryInterpreter(tables)

    def reload(self) -> None:
        """Offline mode: follow DIR's version link; load its WriteRequest with its P4Info."""
        if self.dir is None:
            return
        try:
            target = os.readlink(self.dir) if self.dir.is_symlink() else str(self.dir)
        except OSError:
            return
        if target == self.version:
            return
        try:
            info = text_format.Parse((self.dir / "p4info.txtpb").read_text(), p4info_pb2.P4Info())
            req = text_format.Parse((self.dir / "entries.txtpb").read_text(), p4runtime_pb2.WriteRequest())
            tables = tables_from_entities(Names(info), self.spec, [u.entity for u in req.updates])
        except (OSError, text_format.ParseError, BackendError) as exc:
            print(f"not loaded {target}: {exc}", file=sys.stderr, flush=True)
            self.version = target
            return
        self.run_tables(tables)
        self.version = target
        print(f"loaded {target}", flush=True)

    def handle(self, ingress: int, frame: bytes) -> None:
        if self.service is not None and self.stale:        # P4Runtime writes since the last frame
            self.stale = False
            with self.service.lock:
                self.run_tables(self.service.tables())
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
            if self.service is not None:               # the program's egress counter, read over P4Runtime
                self.service.count("camus_delivered", p)

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
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--grpc", metavar="HOST:PORT", help="serve P4Runtime here (the controller's p4runtime address)")
    src.add_argument("--dir", help="offline: the switch's entries directory (the controller's DIR/<switch>)")
    ap.add_argument("--device-id", type=int, default=1, help="the P4Runtime device id (default 1)")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--port", action="append", required=True, help="N=IFACE, one per switch port")
    ap.add_argument("--tls-cert", help="P4Runtime over TLS: the switch's certificate (with --tls-key)")
    ap.add_argument("--tls-key", help="the switch certificate's private key")
    ap.add_argument("--tls-client-ca", help="mutual TLS: serve only clients whose certificate this CA signed")
    args = ap.parse_args(argv)
    ports = {}
    for item in args.port:
        n, _, ifname = item.partition("=")
        if not n.isdigit() or not ifname:
            ap.error(f"--port {item!r}: expected N=IFACE")
        ports[int(n)] = ifname
    sw = SoftSwitch(Path(args.dir) if args.dir else None, args.spec, ports)
    server = None
    if args.grpc:
        import grpc
        from camus.compiler.backends.p4.runtime import p4runtime_pb2_grpc

        from .p4rt_server import P4RuntimeSwitch
        service = P4RuntimeSwitch(args.device_id, sw.spec, Path(args.spec).read_text(),
                                  on_change=lambda: setattr(sw, "stale", True))
        sw.service = service
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(service, server)
        if args.tls_cert or args.tls_key or args.tls_client_ca:
            from .tls import TlsError, TlsFiles, grpc_server_credentials
            try:
                creds = grpc_server_credentials(TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca),
                                                require_client=bool(args.tls_client_ca))
            except TlsError as exc:
                ap.error(str(exc))
            bound = server.add_secure_port(args.grpc, creds)
        else:
            bound = server.add_insecure_port(args.grpc)
        if not bound:
            ap.error(f"--grpc {args.grpc}: cannot listen there")
        server.start()
    try:
        sw.serve()
    except KeyboardInterrupt:                 # Ctrl-C: a stop asked for, not an error (no traceback)
        print("software switch stopped", file=sys.stderr)
    finally:
        if server is not None:
            server.stop(grace=0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
