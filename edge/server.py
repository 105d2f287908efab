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


def _accepting(broker: EdgeBroker, ctx: ssl.SSLContext | None):  # type: ignore[no-untyped-def]
    """The connection handler of one listener: on a TLS listener the handshake is done here
    (not inside the server), so a failed one is logged with its peer and reason and counted,
    as mosquitto logs each, instead of vanishing in asyncio's debug log."""
    if ctx is None:
        return broker.client
    ctx.sslobject_class = ssl.SSLObject     # (controller/tls.py's logging class: the lines here say it)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            await asyncio.wait_for(writer.start_tls(ctx), TLS_HANDSHAKE_S)
        except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError) as exc:
            broker.stats.tls_failed += 1
            why = "no handshake within %g s" % TLS_HANDSHAKE_S if isinstance(exc, asyncio.TimeoutError) else \
                (getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
            log.warning("TLS handshake with %s failed: %s", peer[0] if peer else "?", why)
            writer.transport.abort()
            return
        await broker.client(reader, writer)
    return on_client


async def serve(broker: EdgeBroker, listen: tuple[str, int], deliveries: tuple[str, int] | None,
                ready: asyncio.Event | None = None, ssl_context: ssl.SSLContext | None = None,
                more: list[tuple[str, int, ssl.SSLContext | None]] | None = None) -> None:
    """Run until cancelled: MQTT on `listen` (over TLS with `ssl_context`) and on each of `more`
    (host, port, TLS or None), copies from the XDP broker on `deliveries`."""
    from .connection import watch_keepalive
    server = await asyncio.start_server(_accepting(broker, ssl_context), *listen)
    others = [await asyncio.start_server(_accepting(broker, ctx), host, port) for host, port, ctx in (more or [])]
    watchdog = asyncio.get_running_loop().create_task(watch_keepalive(broker))
    sys_task = asyncio.get_running_loop().create_task(_sys_updates(broker)) if broker.sys_interval > 0 else None
    reading: socket.socket | None = None
    if deliveries is not None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(deliveries)
        try:          # bursts from the XDP broker: a deep receive queue (root may pass rmem_max)
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setblocking(False)
        asyncio.get_running_loop().add_reader(sock.fileno(), _drain, broker, sock)
        reading = sock
    if broker.filters:                      # persistent sessions taken back: their rules on the XDP broker
        asyncio.get_running_loop().create_task(broker.sync_quietly())
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
        watchdog.cancel()
        if sys_task is not None:
            sys_task.cancel()
        if reading is not None:
            asyncio.get_running_loop().remove_reader(reading.fileno())
            reading.close()
        await broker.withdraw()                                          # leave nothing behind
        if broker.store is not None:
            broker.store.close()
