"""An edge broker serving on a free loopback port in a thread of the test process (its own
event loop), for tests that drive it with real MQTT clients."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

from camus.compiler.language.spec_parser import load_spec
from camus.edge.broker import EdgeBroker, Framing
from camus.edge.server import serve
from tests.conftest import APPS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def topics_broker(**kwargs) -> EdgeBroker:  # type: ignore[no-untyped-def]
    """An edge broker over apps/topics/topics.p4 delivering locally (no XDP broker)."""
    return EdgeBroker(Framing(load_spec(APPS / "topics" / "topics.p4")), None, None, kwargs.pop("sink", None),
                      batch_s=0.0, **kwargs)


LOOPS: dict[int, asyncio.AbstractEventLoop] = {}     # the event loop serving each running() port


def on_loop(port: int, fn):  # type: ignore[no-untyped-def]
    """fn() evaluated on the event loop of the edge on `port`, between two of its callbacks: a
    figure the broker keeps consistent at the end of each step (read from the test's thread,
    it could be caught half-way through one)."""
    async def call():  # type: ignore[no-untyped-def]
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), LOOPS[port]).result(30)


def busy(port: int, seconds: float) -> None:
    """Block the event loop of the edge on `port` for `seconds` (from another thread): what a
    loaded host does to it."""
    LOOPS[port].call_soon_threadsafe(time.sleep, seconds)


@contextlib.contextmanager
def running(broker: EdgeBroker, ssl_context: ssl.SSLContext | None = None, websocket: int | None = None) -> Iterator[int]:
    """Serve `broker` until the block ends; yields its port (and MQTT over WebSockets on port
    `websocket`, when given)."""
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(serve(broker, ("127.0.0.1", port), None, started, ssl_context, None,
                                         [("127.0.0.1", websocket, None)] if websocket else None))
        await started.wait()
        ready.set()
        await task

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass                                   # the block's end stops it
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "the edge broker did not start"
    LOOPS[port] = loop
    try:
        yield port
    finally:
        LOOPS.pop(port, None)
        for t in asyncio.all_tasks(loop):
            loop.call_soon_threadsafe(t.cancel)
        thread.join(30)


def connect_packet(client_id: str, clean: bool = True, keepalive: int = 60, will: tuple[str, bytes, int] | None = None,
                   user: str | None = None, password: bytes | None = None, level: int = 4,
                   props: bytes = b"") -> bytes:
    """A CONNECT as a client sends it, built by hand for what client libraries will not send
    (a zero-length id without clean session, a silent client); at level 5 with `props` (the
    properties, without their length)."""
    import struct

    from camus.edge import mqtt
    flags = (0x02 if clean else 0) | (0x04 | will[2] << 3 if will else 0) | (0x80 if user is not None else 0) \
        | (0x40 if password is not None else 0)
    from camus.edge import mqtt5
    body = mqtt.encode_string("MQTT") + bytes([level, flags]) + struct.pack("!H", keepalive)
    if level == 5:
        body += mqtt5.block(props)
    body += mqtt.encode_string(client_id)
    if will:
        if level == 5:
            body += mqtt5.block()
        body += mqtt.encode_string(will[0]) + struct.pack("!H", len(will[1])) + will[1]
    if user is not None:
        body += mqtt.encode_string(user)
    if password is not None:
        body += struct.pack("!H", len(password)) + password
    return mqtt.client_packet(mqtt.CONNECT, body)


class RawClient:
    """A client on a plain blocking socket: packets in, packets out, nothing automatic (no
    acknowledgements, no pings), so a test can be the client that misbehaves."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def packet(self):  # type: ignore[no-untyped-def]
        """The next packet from the broker (None when it closed the connection)."""
        from camus.edge import mqtt
        while True:
            packets, used = mqtt.split_packets(self.buf)
            if packets:
                first = packets[0]
                whole = mqtt.client_packet(first.kind, first.body, first.flags)
                del self.buf[:len(whole)]
                return first
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self.buf += data

    def close(self) -> None:
        self.sock.close()
