"""A subscriber that stops reading: the edge broker drops its QoS 0 publications past a bound
(counted) instead of queueing without end, and the subscribers that read get everything."""
from __future__ import annotations

import asyncio
import socket

from camus.bench.topic_clients import hello, publish, subscribe
from camus.compiler.language.spec_parser import load_spec
from camus.edge import broker as edge_broker
from camus.edge.broker import EdgeBroker, Framing
from tests.conftest import APPS


async def _client(port: int, name: str, topics: list[str] | None, rcvbuf: int = 0):
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(hello("mqtt", name))
    assert (await reader.readexactly(4))[0] == 0x20             # CONNACK
    if topics:
        writer.write(subscribe("mqtt", topics))
        assert (await reader.readexactly(5))[0] == 0x90         # SUBACK
    return reader, writer


def test_a_stalled_subscriber_loses_publications_not_the_broker(monkeypatch) -> None:
    monkeypatch.setattr(edge_broker, "SLOW_CLIENT_BYTES", 1 << 20)
    broker = EdgeBroker(Framing(load_spec(APPS / "topics" / "topics.p4")), None, None, None, batch_s=0.0)
    payload, count = b"x" * 32768, 400                           # 13 MB for each subscriber

    async def main() -> None:
        server = await asyncio.start_server(broker.client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            _stalled = await _client(port, "stalled", ["plant/#"], rcvbuf=4096)    # never reads again
            reader, _ = await _client(port, "reader", ["plant/#"])
            _, pub = await _client(port, "pub", None)
            got = bytearray()

            async def read_all() -> None:
                want = count * (2 + 2 + len("plant/1") + len(payload) + 1)   # fixed header is 3 bytes
                while len(got) < want - count:
                    got.extend(await reader.read(1 << 20))
            reading = asyncio.create_task(read_all())
            for k in range(count):
                pub.write(publish("mqtt", "plant/1", payload)[0])
                if k % 16 == 0:
                    await pub.drain()
            await asyncio.wait_for(reading, 60)
            stalled = next(s for s in broker.sessions.values() if s.client_id == "stalled")
            assert stalled.writer.transport.get_write_buffer_size() <= (1 << 20) + 2 * 32800
            assert stalled.stalled and broker.stats.dropped > 0
            assert broker.stats.delivered == 2 * count            # matched for both, written for one
            assert got.count(payload) == count                    # the reader got every publication

    asyncio.run(main())
