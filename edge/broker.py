"""The edge broker: MQTT on one side, the XDP broker on the other (the eBPF pub/sub design).

Publishers and subscribers are ordinary MQTT 3.1.1 clients. A publication is labelled — its
topic written into the spec's topic field, the payload after the header — and sent to the XDP
broker's feed address, the publications read together batched into MoldUDP64 datagrams when the
spec frames them so (edge/framing.py); the XDP program classifies each by topic and sends a copy
to every edge broker with a matching subscription (each edge broker is one logical port of the
XDP broker; a copy keeps only that port's messages). An edge broker hands each publication to its
own clients whose filters match (a trie of their filters, edge/trie.py, with the MQTT semantics
the tables were compiled from), one TCP write per client for all that one wake-up read.

Subscriptions: the union of this edge's clients' filters is this port's rule set on the XDP
broker (`topic == "F" : fwd(PORT)`, one rule per distinct filter); changes within `batch_s`
go out as one update through the `RuleSink`, and SUBACK is sent once the tables hold them, so
a client that subscribed sees every later publication. Retained messages (MQTT 3.1.1 3.3.1.3)
are kept for the topics this edge's own clients publish to: the last one per topic (up to
MAX_RETAINED topics; an empty one clears it), sent with the retain flag to a new subscription
that matches, right after its SUBACK. The labelled datagrams carry no retain flag, so a retained
message published at another edge is not kept here. Sessions that survive a disconnect are not
kept (QoS 1/2 publications are acknowledged, delivered at QoS 0).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from camus.compiler.language import topics

from . import mqtt
from .framing import Framing, Message
from .trie import KNOWN_TOPICS, TopicTrie

__all__ = ["EdgeBroker", "EdgeStats", "Framing", "Message", "RuleSink", "serve"]
log = logging.getLogger("camus.edge")
SO_RCVBUFFORCE = 33
TCP_QUICKACK = 12
RCVBUF = 32 << 20
SLOW_CLIENT_BYTES = 16 << 20   # queued for one client beyond this: its publications are dropped
DRAIN = 256                 # datagrams read per wake-up of the deliveries socket
MAX_RETAINED = 100_000      # topics with a retained message (memory: a new topic past it is not kept)


class RuleSink(Protocol):
    def apply(self, port: int, filters: list[str]) -> None:
        """Make `filters` this port's rules on the XDP broker (blocking; raises on failure)."""


@dataclass
class Session:
    sid: int
    writer: asyncio.StreamWriter
    client_id: str = ""
    filters: set[str] = field(default_factory=set)
    stalled: bool = False       # publications are being dropped: it does not read them


@dataclass
class EdgeStats:
    published: int = 0          # publications sent to the XDP broker
    received: int = 0           # copies the XDP broker sent here
    delivered: int = 0          # PUBLISH packets written to local subscribers
    unmatched: int = 0          # copies no local client wanted (the XDP tables over-delivered)
    rejected: int = 0           # publications that could not be labelled (topic too long, ...)
    dropped: int = 0            # publications not written to a client that is not reading (QoS 0)
    unsent: int = 0             # publications the feed socket refused (no route, no buffer: QoS 0)
    not_retained: int = 0       # retained publications on new topics past MAX_RETAINED (sent on, not kept)


class EdgeBroker:
    def __init__(self, framing: Framing, feed: tuple[str, int] | None, port: int | None,
                 sink: RuleSink | None, batch_s: float = 0.02) -> None:
        self.framing, self.feed, self.port, self.sink, self.batch_s = framing, feed, port, sink, batch_s
        self.sessions: dict[int, Session] = {}
        self.filters: Counter[str] = Counter()         # filter -> sessions holding it
        self.trie = TopicTrie(framing.topic.flavor)     # filter -> sessions, for local delivery
        self.stats = EdgeStats()
        self._ids = itertools.count(1)
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._feed_failing = False                      # the last send to the feed failed (logged once)
        self._push: asyncio.Future[None] | None = None      # the batch being gathered
        self._pushing = asyncio.Lock()
        self._applied: list[str] | None = None
        self._wire: dict[str, bytes] = {}               # topic -> it as an MQTT string
        self.retained: dict[str, bytes] = {}            # topic -> its last retained payload

    # -- subscriptions -> the XDP broker's rules ----------------------------------------------
    async def _sync(self) -> None:
        """Push this edge's filter set once the batch window closes; every waiter shares it.
        Pushes run one at a time, each with the set as it is when its turn comes, so a later
        push can never be overtaken by an earlier one."""
        if self._push is not None:
            await self._push
            return
        push = self._push = asyncio.get_running_loop().create_future()
        await asyncio.sleep(self.batch_s)
        async with self._pushing:
            self._push = None                 # changes from here on go out with the next push
            wanted = sorted(self.filters)
            try:
                if self.sink is not None and self.port is not None and wanted != self._applied:
                    await asyncio.to_thread(self.sink.apply, self.port, wanted)
                    self._applied = wanted
                push.set_result(None)
            except Exception as exc:          # the waiting SUBACKs report the failure
                log.error("rule update failed: %s", exc)
                push.set_exception(exc)
        await push

    async def withdraw(self) -> None:
        """Take this edge's rules out of the XDP broker (on exit)."""
        async with self._pushing:
            if self.sink is not None and self.port is not None and self._applied:
                await asyncio.to_thread(self.sink.apply, self.port, [])
                self._applied = []

    def check_filter(self, flt: str) -> bool:
        try:
            topics.check_filter(self.framing.topic, flt)
            return True
        except topics.TopicError:
            return False

    # -- data ------------------------------------------------------------------------------
    def publish(self, pubs: list[mqtt.Publish]) -> None:
        """Send publications to the XDP broker, those that came together in as few datagrams
        as the framing allows (edge/framing.py); keep the retained ones."""
        for pub in pubs:
            if pub.retain:
                self._retain(pub.topic, pub.payload)
        if self.feed is None:
            for pub in pubs:
                self.deliver(pub.topic, pub.payload)   # no XDP broker: local only
            return
        frames = []
        for pub in pubs:
            try:
                frame = self.framing.encode(pub.topic, pub.payload)
            except topics.TopicError as exc:
                self.stats.rejected += 1
                log.warning("publication not sent: %s", exc)
                continue
            if len(frame) > self.framing.largest:
                self.stats.rejected += 1
                log.warning("publication on %r not sent: %d bytes with its header, a datagram to the XDP broker "
                            "holds at most %d", pub.topic, len(frame), self.framing.largest)
                continue
            frames.append(frame)
        unsent = 0
        for datagram in self.framing.datagrams(frames):
            try:
                self._out.sendto(datagram, self.feed)
            except OSError as exc:
                # The feed cannot take it (no route, no buffer): QoS 0 publications may be lost,
                # the publisher's session may not (everything it sends after would be lost too).
                unsent += self.framing.count(datagram)
                if not self._feed_failing:
                    log.warning("feed %s:%d: %s; publications are counted as unsent until it takes them again",
                                *self.feed, exc.strerror or exc)
                self._feed_failing = True
                continue
            if self._feed_failing:
                log.warning("feed %s:%d takes publications again (%d unsent)", *self.feed, self.stats.unsent + unsent)
                self._feed_failing = False
        self.stats.unsent += unsent
        self.stats.published += len(frames) - unsent

    def _retain(self, topic: str, payload: bytes) -> None:
        """The topic's retained message is now `payload`; an empty one removes it (3.3.1.3)."""
        if not payload:
            self.retained.pop(topic, None)
        elif topic in self.retained or len(self.retained) < MAX_RETAINED:
            self.retained[topic] = payload
        else:
            if not self.stats.not_retained:
                log.warning("%d topics hold a retained message: retained messages on new topics are not kept",
                            MAX_RETAINED)
            self.stats.not_retained += 1

    def send_retained(self, s: Session, filters: list[str]) -> int:
        """The retained messages matching any of `filters`, to a session that just subscribed to
        them, with the retain flag (once each). Returns how many."""
        flavor = self.framing.topic.flavor
        hits = [t for t in self.retained if any(topics.matches(flavor, f, t) for f in filters)]
        if hits:
            self._write(s, b"".join(mqtt.publish_packet(t, self.retained[t], retain=True) for t in hits), len(hits))
        return len(hits)

    def datagram(self, data: bytes, out: dict[int, list[bytes]] | None = None) -> None:
        """A copy from the XDP broker: its publications to the local clients that want them."""
        for topic, payload in self.framing.decode(data):
            self.stats.received += 1
            if not self.deliver(topic, payload, out):
                self.stats.unmatched += 1

    def deliver(self, topic: str, payload: bytes, out: dict[int, list[bytes]] | None = None) -> int:
        """Hand a publication to every local session with a matching filter (one copy each):
        written at once, or gathered per session in `out` for one write each (flush())."""
        hits = self.trie.match(topic)
        if hits:
            wire = self._wire.get(topic)
            if wire is None:
                if len(self._wire) >= KNOWN_TOPICS:
                    self._wire.clear()
                wire = self._wire[topic] = mqtt.encode_string(topic)
            packet = mqtt.publish_wire(wire, payload)
            for sid in hits:
                if out is not None:
                    out.setdefault(sid, []).append(packet)
                elif (s := self.sessions.get(sid)) is not None:
                    self._write(s, packet, 1)
        self.stats.delivered += len(hits)
        return len(hits)

    def flush(self, out: dict[int, list[bytes]]) -> None:
        for sid, packets in out.items():
            if (s := self.sessions.get(sid)) is not None:
                self._write(s, b"".join(packets), len(packets))

    def _write(self, s: Session, data: bytes, n: int) -> None:
        """Publications to a client, unless it has stopped reading: past `SLOW_CLIENT_BYTES`
        queued for it they are dropped (QoS 0 allows it) and counted, so one stalled subscriber
        cannot grow the edge broker without bound or hold up the others."""
        if s.writer.transport.get_write_buffer_size() > SLOW_CLIENT_BYTES:
            if not s.stalled:
                log.warning("session %s (%s) is not reading: dropping its publications", s.sid, s.client_id)
            s.stalled = True
            self.stats.dropped += n
            return
        s.stalled = False
        s.writer.write(data)

    # -- MQTT sessions -----------------------------------------------------------------------
    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        s = Session(next(self._ids), writer)
        try:
            first = await asyncio.wait_for(mqtt.read_packet(reader), 10)
            if first is None or first.kind != mqtt.CONNECT:
                raise mqtt.ProtocolError("the first packet must be CONNECT")
            hello = mqtt.parse_connect(first)
            if hello.level not in (3, 4):
                writer.write(mqtt.connack(mqtt.REFUSED_PROTOCOL))
                return
            s.client_id = hello.client_id
            self.sessions[s.sid] = s
            writer.write(mqtt.connack(0))
            buf = bytearray()
            sock = writer.get_extra_info("socket")
            while data := await reader.read(1 << 16):
                if sock is not None:      # ACK now: a publisher with Nagle on waits for our ACK, which
                    try:                  # QoS 0 never piggybacks, up to the 40 ms delayed-ACK timer
                        sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)
                    except OSError:
                        pass
                buf += data
                packets, used = mqtt.split_packets(buf)
                del buf[:used]
                pubs: list[mqtt.Publish] = []      # sent together: one datagram per batch
                for p in packets:
                    if p.kind == mqtt.PUBLISH:
                        try:
                            pubs.append(self._publication(s, p))
                        except mqtt.ProtocolError:
                            self.publish(pubs)     # the ones before it still go
                            raise
                        if len(pubs) == self.framing.batch:
                            self.publish(pubs)     # a full datagram leaves now: the subscribers'
                            pubs = []              # side works on it while we parse the rest
                        continue
                    self.publish(pubs)             # in order with what follows (a SUBSCRIBE)
                    pubs = []
                    if not await self._handle(s, p):
                        return
                self.publish(pubs)
                await writer.drain()
        except (mqtt.ProtocolError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as exc:
            log.info("session %s (%s) closed: %s", s.sid, s.client_id, exc)
        finally:
            self.sessions.pop(s.sid, None)
            if s.filters:
                self.filters.subtract(s.filters)
                self.filters += Counter()                   # drop filters nobody holds
                for flt in s.filters:
                    self.trie.remove(flt, s.sid)
                asyncio.get_running_loop().create_task(self._quiet_sync())
            writer.close()

    async def _quiet_sync(self) -> None:
        try:
            await self._sync()
        except Exception:
            pass                                            # logged in _sync

    @staticmethod
    def _publication(s: Session, p: mqtt.Packet) -> mqtt.Publish:
        """A PUBLISH parsed and acknowledged as its QoS asks (delivered on at QoS 0)."""
        pub = mqtt.parse_publish(p)
        if pub.qos == 1:
            s.writer.write(mqtt.ack(mqtt.PUBACK, pub.packet_id))
        elif pub.qos == 2:
            s.writer.write(mqtt.ack(mqtt.PUBREC, pub.packet_id))
        return pub

    async def _handle(self, s: Session, p: mqtt.Packet) -> bool:
        if p.kind == mqtt.PUBLISH:
            self.publish([self._publication(s, p)])
        elif p.kind == mqtt.PUBREL:
            s.writer.write(mqtt.ack(mqtt.PUBCOMP, int.from_bytes(p.body[:2], "big")))
        elif p.kind in (mqtt.SUBSCRIBE, mqtt.UNSUBSCRIBE):
            sub = mqtt.parse_subscribe(p, unsubscribe=p.kind == mqtt.UNSUBSCRIBE)
            codes = []
            for flt, _ in sub.filters:
                if p.kind == mqtt.SUBSCRIBE:
                    ok = self.check_filter(flt)
                    if ok and flt not in s.filters:
                        s.filters.add(flt)
                        self.filters[flt] += 1
                        self.trie.add(flt, s.sid)
                    codes.append(0 if ok else 0x80)
                elif flt in s.filters:
                    s.filters.discard(flt)
                    self.trie.remove(flt, s.sid)
                    self.filters[flt] -= 1
                    if self.filters[flt] <= 0:
                        del self.filters[flt]
            try:
                await self._sync()
            except Exception:
                codes = [0x80] * len(codes)                 # not installed: the client is told
            if p.kind == mqtt.SUBSCRIBE:
                s.writer.write(mqtt.suback(sub.packet_id, codes))
                self.send_retained(s, [f for (f, _), code in zip(sub.filters, codes) if code != 0x80])
            else:
                s.writer.write(mqtt.ack(mqtt.UNSUBACK, sub.packet_id))
        elif p.kind == mqtt.PINGREQ:
            s.writer.write(mqtt.pingresp())
        elif p.kind == mqtt.DISCONNECT:
            return False
        else:
            raise mqtt.ProtocolError(f"unexpected packet type {p.kind}")
        return True


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


async def serve(broker: EdgeBroker, listen: tuple[str, int], deliveries: tuple[str, int] | None,
                ready: asyncio.Event | None = None) -> None:
    """Run until cancelled: MQTT on `listen`, copies from the XDP broker on `deliveries`."""
    server = await asyncio.start_server(broker.client, *listen)
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
    if ready is not None:
        ready.set()
    try:
        async with server:
            await server.serve_forever()
    finally:
        if reading is not None:
            asyncio.get_running_loop().remove_reader(reading.fileno())
            reading.close()
        await broker.withdraw()                                          # leave nothing behind
