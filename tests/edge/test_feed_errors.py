"""Publications the feed cannot carry: one too big for a datagram is rejected (counted, logged),
a datagram the feed socket refuses is counted as unsent; either way the publisher's session goes
on (it used to end, and everything the client sent after was lost)."""
from __future__ import annotations

import asyncio
import socket

from camus.bench.topic_clients import publish, subscribe
from camus.compiler.language.spec_parser import load_spec
from camus.edge.broker import EdgeBroker, Framing
from tests.conftest import APPS
from tests.edge.test_slow_client import _client

SPEC = APPS / "topics" / "topics.p4"


async def _until(cond, seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)


def test_a_publication_too_big_for_a_datagram_is_rejected_and_the_next_goes_out() -> None:
    feed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)          # the XDP broker's feed, here a socket
    feed.bind(("127.0.0.1", 0))
    feed.settimeout(5)
    framing = Framing(load_spec(SPEC))
    broker = EdgeBroker(framing, feed.getsockname(), None, None, batch_s=0.0)

    async def main() -> None:
        server = await asyncio.start_server(broker.client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            _, pub = await _client(port, "pub", None)
            pub.write(publish("mqtt", "plant/1", b"x" * 70_000)[0])    # past a UDP datagram's 65,507 bytes
            await pub.drain()
            await _until(lambda: broker.stats.rejected > 0)
            pub.write(publish("mqtt", "plant/2", b"small")[0])         # the same session, still open
            await pub.drain()
            data = await asyncio.get_running_loop().run_in_executor(None, feed.recv, 65536)
            assert [t for t, *_ in framing.decode(data)] == ["plant/2"]
            assert (broker.stats.rejected, broker.stats.published) == (1, 1)
            assert len(broker.sessions) == 1

    asyncio.run(main())
    feed.close()


def test_a_feed_that_refuses_datagrams_counts_them_and_keeps_the_session() -> None:
    # a broadcast address without SO_BROADCAST: every sendto fails (EACCES), as a missing route would
    broker = EdgeBroker(Framing(load_spec(SPEC)), ("255.255.255.255", 9), None, None, batch_s=0.0)

    async def main() -> None:
        server = await asyncio.start_server(broker.client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, pub = await _client(port, "pub", None)
            for k in range(3):
                pub.write(publish("mqtt", f"plant/{k}", b"v")[0])
            await pub.drain()
            await _until(lambda: broker.stats.unsent == 3)
            assert (broker.stats.unsent, broker.stats.published) == (3, 0)
            pub.write(subscribe("mqtt", ["plant/#"]))                   # the session answers still
            assert (await asyncio.wait_for(reader.readexactly(5), 5))[0] == 0x90     # SUBACK

    asyncio.run(main())
