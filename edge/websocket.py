"""MQTT over WebSockets (MQTT 5.0 6, MQTT 3.1.1 6): a listener browsers and WebSocket-only
networks reach, `ws://HOST:PORT/mqtt` (`wss://` with the edge's certificate), subprotocol
`mqtt`. Each WebSocket connection is handed to the same protocol code as a TCP one
(edge/connection.py) through a stream pair: binary messages in are the byte stream (an MQTT
packet may span messages, or a message hold several), what the broker writes goes out as binary
messages, one per burst of writes, with the same bound on what a client that does not read may
make the broker hold (the transport's buffer plus what waits to be framed).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import WSMsgType, web

log = logging.getLogger("camus.edge")
PATHS = ("/mqtt", "/")                  # mosquitto serves any path; clients mostly use /mqtt
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
MAX_MESSAGE = 16 << 20                  # the largest WebSocket message read (MQTT's own limit is --max-packet)


class _Transport:
    """What the broker asks of a connection's transport: its write buffer, and a way to drop it."""

    def __init__(self, stream: WsStream) -> None:
        self.stream = stream

    def get_write_buffer_size(self) -> int:
        tcp = self.stream.request.transport
        return self.stream.pending + (tcp.get_write_buffer_size() if tcp is not None else 0)

    def abort(self) -> None:
        tcp = self.stream.request.transport
        if tcp is not None:
            tcp.abort()
        self.stream.closing = True
        self.stream.wake.set()

    def is_closing(self) -> bool:
        return self.stream.closing


class WsStream:
    """The writer half of a WebSocket connection, as asyncio.StreamWriter's methods the broker
    uses: write() queues, a sender task frames what is queued as one binary message."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self.ws, self.request = ws, request
        self.out: list[bytes] = []
        self.pending = 0
        self.closing = False
        self.wake = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.transport = _Transport(self)

    def write(self, data: bytes) -> None:
        if self.closing or not data:
            return
        self.out.append(data)
        self.pending += len(data)
        self.drained.clear()
        self.wake.set()

    async def drain(self) -> None:
        await self.drained.wait()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return None                 # (no TCP_QUICKACK through the WebSocket layer)
        tcp = self.request.transport
        return tcp.get_extra_info(name, default) if tcp is not None else default

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return False                    # (a WebSocket has no half-close: the broker never asks for one)

    def close(self) -> None:
        self.closing = True
        self.wake.set()

    async def send_all(self) -> None:
        """Frame and send what is written until the connection closes; then close it."""
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                if self.out:
                    data, self.out, self.pending = b"".join(self.out), [], 0
                    await self.ws.send_bytes(data)
                if not self.out:
                    self.drained.set()
                if self.closing:
                    break
        except (ConnectionError, RuntimeError) as exc:
            log.debug("websocket %s: %s", self.request.remote, exc)
        finally:
            self.drained.set()
            await self.ws.close()


Handler = Callable[[asyncio.StreamReader, Any], Coroutine[Any, Any, None]]


def app(client: Handler) -> web.Application:
    """The aiohttp application serving MQTT over WebSockets to `client` (EdgeBroker.client)."""

    async def upgrade(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=SUBPROTOCOLS, max_msg_size=MAX_MESSAGE, autoping=True)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="MQTT over WebSockets: connect with a WebSocket client "
                                                 "(subprotocol mqtt)\n")
        await ws.prepare(request)
        reader = asyncio.StreamReader()
        stream = WsStream(ws, request)
        sender = asyncio.get_running_loop().create_task(stream.send_all())
        session: asyncio.Task[None] = asyncio.get_running_loop().create_task(client(reader, stream))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    reader.feed_data(msg.data)
                elif msg.type == WSMsgType.TEXT:          # MQTT is binary (6.0): the client is wrong
                    log.info("websocket client %s sent a text message: closed", request.remote)
                    break
        finally:
            reader.feed_eof()
            await session
            stream.close()
            await sender
        return ws

    application = web.Application(client_max_size=MAX_MESSAGE)
    for path in PATHS:
        application.router.add_get(path, upgrade)
    return application


async def start(client: Handler, places: list[tuple[str, int, ssl.SSLContext | None]]) -> web.AppRunner:
    """Serve MQTT over WebSockets on each (host, port, TLS or None); the runner stops them."""
    runner = web.AppRunner(app(client), access_log=None, handle_signals=False)
    await runner.setup()
    for host, port, ctx in places:
        await web.TCPSite(runner, host, port, ssl_context=ctx).start()
    return runner
