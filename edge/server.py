"""The edge broker's network side: its MQTT listeners (each TLS handshake done per connection,
so a failed one is logged and counted), the socket the XDP broker's copies arrive on (drained in
bursts), and the $SYS timer. EdgeBroker (broker.py) holds the state they act on."""
from __future__ import annotations

import asyncio
import socket
import ssl

from .broker import EdgeBroker, log

SO_RCVBUFFORCE = 33
RCVBUF = 32 << 20
DRAIN = 256                 # datagrams read per wake-up of the deliveries socket


def _drain(broker: EdgeBroker, sock: socket.socket) -> None:
    """Every datagram waiting (up to DRAIN per wake-up), then one write per session: a burst
    from the XDP broker costs one event-loop turn and one TCP write per client, not one each."""
    out: dict[int, list[bytes]] = {}
    for _ in range(DRAIN):
        try:
            data = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            break
        except OSError as exc:              # an ICMP error queued on the socket: nothing lost here
            log.debug("deliveries socket: %s", exc)
            break
        broker.datagram(data, out)
    broker.flush(out)
    broker.commit()                         # what persistent sessions are owed, kept (edge/store.py)


async def _sys_updates(broker: EdgeBroker) -> None:
    while True:
        broker.publish_sys()
        await asyncio.sleep(broker.sys_interval)


TLS_HANDSHAKE_S = 15.0      # a client that has not finished its TLS handshake by then is let go


_HANDSHAKES: set[asyncio.Task[None]] = set()


class _BeforeTls(asyncio.Protocol):
    """A TLS listener's connection until its handshake is done. It reads nothing: the client's
    first bytes (its ClientHello, often sent with the connect) stay in the socket until
    `loop.start_tls` takes it over. A stream reader here would swallow them whenever they arrive
    before the handshake starts (a busy loop), and the handshake would wait for them forever."""

    def __init__(self, broker: EdgeBroker, ctx: ssl.SSLContext) -> None:
        self.broker, self.ctx = broker, ctx

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        loop = asyncio.get_running_loop()
        # Paused on the next turn, not now: the transport starts its reader just after this call
        # whether paused or not (Python 3.11), and a pause now would make that later one a no-op.
        # A read the poll finds before the pause runs is cancelled by it.
        loop.call_soon(transport.pause_reading)
        task = loop.create_task(_handshake(self.broker, self.ctx, transport))
        _HANDSHAKES.add(task)                # (the loop keeps only a weak reference to a task)
        task.add_done_callback(_HANDSHAKES.discard)


class _TlsStreams(asyncio.StreamReaderProtocol):
    """The MQTT streams over a TLS transport made after the connection: a client's EOF closes
    the connection (the TLS transport cannot half-close; asyncio warns if told otherwise)."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False


async def _handshake(broker: EdgeBroker, ctx: ssl.SSLContext, transport: asyncio.Transport) -> None:
    """The handshake done here (not inside the server), so a failed one is logged with its peer
    and reason and counted, as mosquitto logs each, instead of vanishing in asyncio's debug log;
    then the MQTT connection runs over the TLS transport."""
    peer = transport.get_extra_info("peername")
    reader = asyncio.StreamReader()
    protocol = _TlsStreams(reader, broker.client)
    loop = asyncio.get_running_loop()
    try:
        tls = await asyncio.wait_for(loop.start_tls(transport, protocol, ctx, server_side=True), TLS_HANDSHAKE_S)
    except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError, RuntimeError) as exc:
        broker.stats.tls_failed += 1
        why = "no handshake within %g s" % TLS_HANDSHAKE_S if isinstance(exc, asyncio.TimeoutError) else \
            (getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
        log.warning("TLS handshake with %s failed: %s", peer[0] if peer else "?", why)
        transport.abort()
        return
    if tls is None:                         # the client left during the handshake
        transport.abort()
        return
    protocol.connection_made(tls)           # starts broker.client on the TLS streams


def _accepting(broker: EdgeBroker, ctx: ssl.SSLContext | None):  # type: ignore[no-untyped-def]
    """The protocol factory of one listener: MQTT streams on a plain one; on a TLS one, the
    handshake first (_BeforeTls)."""
    if ctx is None:
        return lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), broker.client)
    ctx.sslobject_class = ssl.SSLObject     # (controller/tls.py's logging class: the lines here say it)
    return lambda: _BeforeTls(broker, ctx)


async def serve(broker: EdgeBroker, listen: tuple[str, int], deliveries: tuple[str, int] | None,
                ready: asyncio.Event | None = None, ssl_context: ssl.SSLContext | None = None,
                more: list[tuple[str, int, ssl.SSLContext | None]] | None = None,
                websockets: list[tuple[str, int, ssl.SSLContext | None]] | None = None) -> None:
    """Run until cancelled: MQTT on `listen` (over TLS with `ssl_context`) and on each of `more`
    (host, port, TLS or None), MQTT over WebSockets on each of `websockets` (edge/websocket.py),
    copies from the XDP broker on `deliveries`."""
    from .connection import watch_keepalive
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_accepting(broker, ssl_context), *listen)
    others = [await loop.create_server(_accepting(broker, ctx), host, port) for host, port, ctx in (more or [])]
    web_runner = None
    if websockets:
        from .websocket import start
        web_runner = await start(broker.client, websockets)
    watchdog = loop.create_task(watch_keepalive(broker))
    sys_task = loop.create_task(_sys_updates(broker)) if broker.sys_interval > 0 else None
    reading: socket.socket | None = None
    if deliveries is not None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(deliveries)
        try:          # bursts from the XDP broker: a deep receive queue (root may pass rmem_max)
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), _drain, broker, sock)
        reading = sock
    if broker.filters or broker.groups:     # persistent sessions taken back: their rules on the XDP broker
        loop.create_task(broker.sync_quietly())
    if ready is not None:
        ready.set()
    try:
        async with server:
            for other in others:
                await other.start_serving()
            await server.serve_forever()
    finally:
        for other in others:
            other.close()
        if web_runner is not None:
            await web_runner.cleanup()
        watchdog.cancel()
        if sys_task is not None:
            sys_task.cancel()
        if reading is not None:
            loop.remove_reader(reading.fileno())
            reading.close()
        await broker.withdraw()                                          # leave nothing behind
        if broker.store is not None:
            broker.store.close()
