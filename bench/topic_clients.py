"""Publisher and subscriber for the topic brokers (mosquitto/MQTT 3.1.1 or 5.0 (`mqtt5`),
nats-server, redis pub/sub), with the ITCH workload mapped to topics `itch/<stock>` (NATS:
`itch.<stock>`).

The wire protocols are small enough to speak directly: the publisher pre-encodes the whole run
and writes it in large chunks (stamping each chunk's send time into its messages), and the
subscriber only records what arrives with the kernel's receive timestamp (SO_TIMESTAMPNS on the
TCP socket); parsing happens after the run. So neither client is the bottleneck.

    python -m camus.bench.topic_clients sub PROTO HOST PORT OUT SECONDS IDLE TOPIC...
    python -m camus.bench.topic_clients pub PROTO HOST PORT MESSAGES_FILE RATE SECONDS
"""
from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from camus.bench.feeds import ADD_ORDER, STOCK_OFFSET, TIMESTAMP_OFFSET
from camus.edge.mqtt import varint

PROTOS = ("mqtt", "mqtt5", "nats", "redis")
SO_TIMESTAMPNS = 35
CHUNK_MESSAGES = 64


def topic(proto: str, stock: str) -> str:
    return f"itch.{stock}" if proto == "nats" else f"itch/{stock}"


def _resp(*parts: bytes) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def hello(proto: str, client_id: str) -> bytes:
    if proto in ("mqtt", "mqtt5"):              # MQTT 5: level 5 and an empty properties block
        level = b"\x04\x02\x00\x3c" if proto == "mqtt" else b"\x05\x02\x00\x3c\x00"
        body = b"\x00\x04MQTT" + level + struct.pack("!H", len(client_id)) + client_id.encode()
        return b"\x10" + varint(len(body)) + body
    if proto == "nats":
        return b'CONNECT {"verbose":false,"pedantic":false,"name":"%s"}\r\n' % client_id.encode()
    return b""


def subscribe(proto: str, topics: list[str]) -> bytes:
    if proto in ("mqtt", "mqtt5"):
        head = b"\x00\x01" if proto == "mqtt" else b"\x00\x01\x00"
        body = head + b"".join(struct.pack("!H", len(t)) + t.encode() + b"\x00" for t in topics)
        return b"\x82" + varint(len(body)) + body
    if proto == "nats":
        return b"".join(b"SUB %s %d\r\n" % (t.encode(), i + 1) for i, t in enumerate(topics))
    return _resp(b"SUBSCRIBE", *(t.encode() for t in topics))


def publish(proto: str, t: str, payload: bytes) -> tuple[bytes, int]:
    """The publish command and the offset of the payload in it."""
    if proto in ("mqtt", "mqtt5"):
        var = struct.pack("!H", len(t)) + t.encode() + (b"\x00" if proto == "mqtt5" else b"")
        head = b"\x30" + varint(len(var) + len(payload)) + var
    elif proto == "nats":
        head = b"PUB %s %d\r\n" % (t.encode(), len(payload))
        return head + payload + b"\r\n", len(head)
    else:
        head = b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n" % (len(t), t.encode(), len(payload))
        return head + payload + b"\r\n", len(head)
    return head + payload, len(head)


def parse(proto: str, data: bytes) -> list[tuple[int, bytes]]:
    """(end offset, payload) of every delivered message in a recorded stream."""
    out: list[tuple[int, bytes]] = []
    pos, n = 0, len(data)
    v5 = proto == "mqtt5"
    if proto in ("mqtt", "mqtt5"):
        while pos + 2 <= n:
            kind = data[pos]
            length, shift, i = 0, 0, pos + 1
            while i < n:
                b = data[i]
                length |= (b & 0x7F) << shift
                shift += 7
                i += 1
                if not b & 0x80:
                    break
            end = i + length
            if end > n:
                break
            if kind >> 4 == 3:                                    # PUBLISH (QoS 0)
                tl = int.from_bytes(data[i:i + 2], "big")
                body = i + 2 + tl
                if v5:                                            # its properties, skipped
                    plen, shift = 0, 0
                    while body < end:
                        b = data[body]
                        body += 1
                        plen |= (b & 0x7F) << shift
                        shift += 7
                        if not b & 0x80:
                            break
                    body += plen
                out.append((end, data[body:end]))
            pos = end
    elif proto == "nats":
        while pos < n:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                break
            line = data[pos:eol]
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                start = eol + 2
                if start + size + 2 > n:
                    break
                out.append((start + size, data[start:start + size]))
                pos = start + size + 2
            else:
                pos = eol + 2
    else:
        while pos < n:                                            # *3 $7 message $c chan $p payload
            if not data.startswith(b"*3\r\n", pos):
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    break
                pos = eol + 2
                continue
            items, p, ok = [], pos + 4, True
            for _ in range(3):
                if p >= n or data[p:p + 1] not in (b"$", b":"):
                    ok = False
                    break
                eol = data.find(b"\r\n", p)
                if eol < 0:
                    ok = False
                    break
                if data[p:p + 1] == b":":
                    items.append(data[p + 1:eol])
                    p = eol + 2
                    continue
                size = int(data[p + 1:eol])
                items.append(data[eol + 2:eol + 2 + size])
                p = eol + 2 + size + 2
            if not ok or p > n:
                break
            if items[0] == b"message":
                out.append((p - 2, items[2]))
            pos = p
    return out


def _subscriber(proto: str, host: str, port: int, out_path: str, seconds: float, idle: float,
                topics: list[str]) -> int:
    s = socket.create_connection((host, port), timeout=READY_BOUND_S)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
    s.sendall(hello(proto, f"sub-{out_path.rsplit('/', 1)[-1]}") + subscribe(proto, topics))
    if proto == "nats":
        s.sendall(b"PING\r\n")
    early = _await_subscribed(s, proto, len(topics))
    s.settimeout(0.1)
    start, last, total = time.monotonic(), 0.0, 0
    first_message = {"mqtt": b"\x30", "mqtt5": b"\x30", "nats": b"MSG ", "redis": b"message"}[proto]
    print("ready", flush=True)                 # the broker has confirmed every subscription
    with open(out_path, "wb") as f:
        f.write(struct.pack("<QI", time.time_ns(), len(early)) + early)
        total += len(early)
        while True:
            now = time.monotonic()
            if now - start > seconds or (last and now - last > idle):
                break
            try:
                data, anc, _, _ = s.recvmsg(1 << 20, 64)
            except socket.timeout:
                continue
            except KeyboardInterrupt:          # the runner's stop signal: keep what arrived
                break
            if not data:
                break
            if last or first_message in data[:64]:   # the idle clock starts with the first message,
                last = time.monotonic()              # not with the SUBACK (subscribing may take a while)
            ts = 0
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    ts = sec * 1_000_000_000 + nsec
            if proto == "nats" and b"PING\r\n" in data:
                s.sendall(b"PONG\r\n")
            f.write(struct.pack("<QI", ts or time.time_ns(), len(data)) + data)
            f.flush()                          # the runner watches the file grow
            total += len(data)
    print(f"received {total} bytes", flush=True)
    return 0


READY_BOUND_S = 60.0          # a broker that has not confirmed the subscriptions by then is broken


def subscribed(proto: str, data: bytes, n_topics: int) -> bool:
    """Has the broker confirmed the subscriptions in what it sent so far? MQTT: a SUBACK;
    NATS: the PONG to the PING sent after the SUBs (it answers in order); redis: one
    `subscribe` reply per channel."""
    if proto in ("mqtt", "mqtt5"):
        pos = 0
        while pos + 2 <= len(data):            # walk the control packets: type, remaining length
            kind, length, shift, i = data[pos] >> 4, 0, 0, pos + 1
            while i < len(data):
                length |= (data[i] & 0x7F) << shift
                shift += 7
                i += 1
                if not data[i - 1] & 0x80:
                    break
            else:
                return False
            if kind == 9 and i + length <= len(data):     # the whole SUBACK
                return True
            pos = i + length
        return False
    if proto == "nats":
        return b"PONG\r\n" in data
    return data.count(b"$9\r\nsubscribe\r\n") >= n_topics


def _await_subscribed(s: socket.socket, proto: str, n_topics: int) -> bytes:
    """Read until the broker confirms the subscriptions; returns what it sent meanwhile."""
    s.settimeout(READY_BOUND_S)
    got = b""
    while not subscribed(proto, got, n_topics):
        chunk = s.recv(1 << 16)
        if not chunk:
            raise SystemExit(f"{proto} broker closed the connection before confirming the subscriptions")
        got += chunk
    return got


def _drain(s: socket.socket) -> None:
    """Read and discard the server's replies (redis answers every PUBLISH)."""
    try:
        while s.recv(1 << 20):
            pass
    except OSError:
        pass


def publish_paced(proto: str, host: str, port: int, messages: list[tuple[str, bytes]], stamp_at: int,
                  stamp: Callable[[], bytes], rate: float, seconds: float = float("inf")) -> tuple[int, float]:
    """Publish (topic, payload) messages, pre-encoded, in chunks of CHUNK_MESSAGES at `rate`
    msgs/s (0: as fast as the socket takes them) for at most `seconds`; just before a chunk goes
    out, each of its messages gets `stamp()` written at byte `stamp_at` of its payload (the send
    time). Returns (messages sent, seconds taken)."""
    stream = bytearray()
    stamps: list[int] = []            # offsets of the stamp fields in the stream
    bounds: list[int] = [0]           # chunk ends
    for i, (t, payload) in enumerate(messages):
        cmd, off = publish(proto, t, payload)
        stamps.append(len(stream) + off + stamp_at)
        stream += cmd
        if (i + 1) % CHUNK_MESSAGES == 0:
            bounds.append(len(stream))
    if bounds[-1] != len(stream):
        bounds.append(len(stream))
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 << 20)
    s.sendall(hello(proto, "publisher"))
    threading.Thread(target=_drain, args=(s,), daemon=True).start()
    view = memoryview(stream)
    t0 = time.monotonic()
    sent = 0
    for c in range(len(bounds) - 1):
        if time.monotonic() - t0 > seconds:
            break
        if rate > 0:
            due = t0 + sent / rate
            while time.monotonic() < due:
                time.sleep(max(0.0, min(0.001, due - time.monotonic())))
        first, last = c * CHUNK_MESSAGES, min((c + 1) * CHUNK_MESSAGES, len(messages))
        now = stamp()
        for k in range(first, last):
            stream[stamps[k]:stamps[k] + len(now)] = now
        s.sendall(view[bounds[c]:bounds[c + 1]])
        sent = last
    elapsed = time.monotonic() - t0
    time.sleep(0.5)                    # let the broker drain before the connection closes
    s.close()
    return sent, elapsed


def _publisher(proto: str, host: str, port: int, messages_file: str, rate: float, seconds: float) -> int:
    raw = Path(messages_file).read_bytes()
    size = ADD_ORDER.size
    msgs = [raw[i:i + size] for i in range(0, len(raw), size)]
    items = [(topic(proto, m[STOCK_OFFSET:STOCK_OFFSET + 8].decode().strip()), m) for m in msgs]
    sent, elapsed = publish_paced(proto, host, port, items, TIMESTAMP_OFFSET,
                                  lambda: (time.time_ns() & 0xFFFFFFFFFFFF).to_bytes(6, "big"), rate, seconds)
    print(f"sent {sent} messages in {elapsed:.3f} s", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 7 and argv[0] == "sub" and argv[1] in PROTOS:
        return _subscriber(argv[1], argv[2], int(argv[3]), argv[4], float(argv[5]), float(argv[6]), argv[7:])
    if len(argv) == 7 and argv[0] == "pub" and argv[1] in PROTOS:
        return _publisher(argv[1], argv[2], int(argv[3]), argv[4], float(argv[5]), float(argv[6]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
