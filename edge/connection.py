"""One client's network connection to the edge broker: MQTT 3.1.1 from CONNECT to the end.

CONNECT is answered as 3.1.1 says: a version 5 client is refused the way it can read (a version
5 CONNACK, reason 0x84) and logged; an empty client id is taken only with clean session; a
password file and ACL file (edge/auth.py) decide who connects and what it may publish and
subscribe to. Then packets are read in bulk (many PUBLISH packets per read, sent on together),
with the limits of `Limits`: a packet over `max_packet` closes the connection as soon as its
fixed header says so (nothing of it is kept), and unfinished packets of all connections
together stay under `max_buffered`, so slow or partial publishers cannot grow the broker: a
packet must arrive whole within `packet_timeout` of its first byte, and when one would pass the
bound the connection whose unfinished packet is oldest is closed to make room (stalled
publishers cannot starve a client that is sending); only when this connection's is the oldest is
it the one closed. The keep-alive watchdog (`watch_keepalive`) closes a
connection silent for 1.5 times its keep-alive; a connection that ends without DISCONNECT
publishes its will (EdgeBroker.close_session).
"""
from __future__ import annotations

import asyncio
import logging
import socket

from camus.compiler.language import topics

from . import mqtt
from .session import Session

log = logging.getLogger("camus.edge")
TCP_QUICKACK = 12
CONNECT_TIMEOUT_S = 10.0          # a connection must send CONNECT within this
KEEPALIVE_CHECK_S = 0.5           # how often the watchdog looks for silent clients
SYS_BROKER = "$SYS/broker/"       # the broker's own figures (EdgeBroker.sys_figures): not clients' to write


class Connection:
    def __init__(self, broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:  # type: ignore[no-untyped-def]
        self.broker, self.reader, self.writer = broker, reader, writer
        self.limits = broker.limits
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self.held = 0                  # bytes of an unfinished packet counted in broker.buffered
        self.since = 0.0               # when that packet's first byte came (loop time)
        self.session: Session | None = None
        self.acks: list[bytes] = []    # PUBACK/PUBREC for publications read, written once they are sent on

    async def run(self) -> None:
        b = self.broker
        s: Session | None = None
        clean = False
        try:
            s = self.session = await self._connect()
            if s is None:
                return
            clean = await self._serve(s)
        except mqtt.TooLarge as exc:
            b.stats.too_large += 1
            log.warning("client %s (%s): %s: connection closed (--max-packet)", self._name(s), self.peer, exc)
        except (mqtt.ProtocolError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as exc:
            log.info("client %s (%s) closed: %s", self._name(s), self.peer, exc or type(exc).__name__)
        finally:
            b.buffered -= self.held
            self.held = 0
            b.unfinished.pop(self, None)
            if s is not None:
                if s.expired:
                    b.stats.expired += 1
                    log.info("client %r: no packet for 1.5 x its keep-alive of %d s: disconnected",
                             s.client_id, s.keepalive)
                    s.expired = False
                log.info("client %r %s", s.client_id, "disconnected" if clean else "gone without DISCONNECT")
                b.close_session(s, self.writer, clean)
            self.writer.close()

    @staticmethod
    def _name(s: Session | None) -> str:
        return repr(s.client_id) if s is not None else "(before CONNECT)"

    async def _connect(self) -> Session | None:
        b = self.broker
        first = await asyncio.wait_for(mqtt.read_packet(self.reader, self.limits.max_packet), CONNECT_TIMEOUT_S)
        if first is None or first.kind != mqtt.CONNECT:
            raise mqtt.ProtocolError("the first packet must be CONNECT")
        hello = mqtt.parse_connect(first)
        if hello.level == 5:
            b.stats.refused += 1
            log.warning("client at %s speaks MQTT 5: refused (reason 0x84, unsupported protocol version); "
                        "this broker speaks MQTT 3.1.1 (mosquitto_pub/_sub -V mqttv311)", self.peer)
            self.writer.write(mqtt.connack_v5(mqtt.V5_UNSUPPORTED_VERSION))
            return None
        code, why = self._admit(hello)
        if code:
            b.stats.refused += 1
            log.warning("client %r at %s refused: %s", hello.client_id, self.peer, why)
            self.writer.write(mqtt.connack(code))
            return None
        s, present = b.open_session(hello, self.writer)
        log.info("client %r connected from %s (%s session%s, keep-alive %d s)", s.client_id, self.peer,
                 "clean" if hello.clean else "persistent", ", resumed" if present else "", hello.keepalive)
        self.writer.write(mqtt.connack(0, present))
        owed = s.resume(self.limits)                 # unacknowledged, then queued publications
        if owed:
            self.writer.write(owed)
        return s

    def _admit(self, hello: mqtt.Connect) -> tuple[int, str]:
        """A CONNACK refusal code and why, or (0, "")."""
        b = self.broker
        if hello.level not in (3, 4):
            return mqtt.REFUSED_PROTOCOL, f"protocol level {hello.level} (3.1.1 is 4, 3.1 is 3)"
        if not hello.client_id and not hello.clean:
            return mqtt.REFUSED_IDENTIFIER, "an empty client id needs clean session (3.1.3.1)"
        if hello.username is None:
            if not b.allow_anonymous:
                return mqtt.REFUSED_NOT_AUTHORIZED, "no user name, and anonymous clients are not allowed"
        elif b.passwords is not None and not b.passwords.check(hello.username, hello.password):
            return mqtt.REFUSED_CREDENTIALS, f"wrong user name or password (user {hello.username!r})"
        return 0, ""

    async def _serve(self, s: Session) -> bool:
        """Packets until the connection ends: True when it ended by DISCONNECT."""
        b, writer = self.broker, self.writer
        buf = bytearray()
        sock = writer.get_extra_info("socket")
        loop = asyncio.get_running_loop()
        while data := await self._read(buf, s, loop):
            s.seen = loop.time()
            if sock is not None:      # ACK now: a publisher with Nagle on waits for our ACK, which
                try:                  # QoS 0 never piggybacks, up to the 40 ms delayed-ACK timer
                    sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)
                except OSError:
                    pass
            buf += data
            packets, used = mqtt.split_packets(buf, self.limits.max_packet)
            del buf[:used]
            self._account(len(buf), s)
            pubs: list[mqtt.Publish] = []      # sent together: one datagram per batch
            for p in packets:
                if p.kind == mqtt.PUBLISH:
                    try:
                        pub = self._publication(s, p)
                    except mqtt.ProtocolError:
                        self._send_on(pubs)        # the ones before it still go
                        raise
                    if pub is not None:
                        pubs.append(pub)
                    if len(pubs) == b.framing.batch:
                        self._send_on(pubs)        # a full datagram leaves now: the subscribers'
                        pubs = []              # side works on it while we parse the rest
                    continue
                self._send_on(pubs)                # in order with what follows (a SUBSCRIBE)
                pubs = []
                if not await self._handle(s, p):
                    return True
            self._send_on(pubs)
            await writer.drain()
        return False

    def _send_on(self, pubs: list[mqtt.Publish]) -> None:
        """Publications read, sent on; then their PUBACKs and PUBRECs, once what they made the
        store keep (owed copies, retained messages: edge/store.py) is committed: an
        acknowledged publication survives a kill -9 of the edge from then on."""
        self.broker.publish(pubs)
        if self.acks:
            self.broker.commit()
            self.writer.write(b"".join(self.acks))
            self.acks.clear()

    async def _read(self, buf: bytearray, s: Session, loop: asyncio.AbstractEventLoop) -> bytes:
        """The next bytes; while a packet is unfinished, only until its time is up."""
        if not buf:
            return await self.reader.read(1 << 16)
        left = self.since + self.limits.packet_timeout - loop.time()
        try:
            return await asyncio.wait_for(self.reader.read(1 << 16), max(left, 0.0))
        except asyncio.TimeoutError:
            self.broker.stats.stalled += 1
            log.warning("client %r (%s): a packet unfinished after %g s (%d bytes of it came; --packet-timeout): "
                        "connection closed", s.client_id, self.peer, self.limits.packet_timeout, len(buf))
            raise mqtt.ProtocolError("packet not finished in time") from None

    def _account(self, unfinished: int, s: Session) -> None:
        """Count this connection's unfinished packet in the broker-wide bound; past the bound the
        connection with the oldest unfinished packet is closed first (this one, when it is that)."""
        b = self.broker
        if unfinished and not self.held:
            self.since = asyncio.get_running_loop().time()
        b.buffered += unfinished - self.held
        self.held = unfinished
        if unfinished:
            b.unfinished[self] = self.since
        else:
            b.unfinished.pop(self, None)
        while unfinished and b.buffered > self.limits.max_buffered:
            oldest = min(b.unfinished, key=b.unfinished.__getitem__)
            b.stats.over_memory += 1
            log.warning("client %s (%s): unfinished packets of all clients hold %d bytes, over the bound of %d "
                        "(--max-buffered): the oldest unfinished packet's connection is closed",
                        oldest._name(oldest.session), oldest.peer, b.buffered, self.limits.max_buffered)
            if oldest is self:
                raise mqtt.ProtocolError("memory bound for unfinished packets")
            oldest.evict()

    def evict(self) -> None:
        """Let this connection's unfinished packet go now (another needs the room): its bytes
        leave the bound at once, the connection is aborted."""
        self.broker.buffered -= self.held
        self.held = 0
        self.broker.unfinished.pop(self, None)
        self.writer.transport.abort()

    def _publication(self, s: Session, p: mqtt.Packet) -> mqtt.Publish | None:
        """A PUBLISH parsed and acknowledged as its QoS asks; None when it is not to be sent on
        (the ACL refuses it, or it is a QoS 2 publication received again before its PUBREL)."""
        b = self.broker
        pub = mqtt.parse_publish(p)
        if pub.qos == 1:
            self.acks.append(mqtt.ack(mqtt.PUBACK, pub.packet_id))
        elif pub.qos == 2:
            self.acks.append(mqtt.ack(mqtt.PUBREC, pub.packet_id))
            if pub.packet_id in s.awaiting_release:
                return None                      # a re-send: published once already (4.3.3)
            s.awaiting_release.add(pub.packet_id)
        if pub.topic.startswith(SYS_BROKER):
            b.stats.denied += 1
            log.warning("client %r: publishing to %r, the broker's own $SYS/broker topics: dropped", s.client_id,
                        pub.topic)
            return None
        if b.acl is not None and not b.acl.may_write(s.user, s.client_id, pub.topic):
            b.stats.denied += 1
            log.warning("client %r (user %r): publishing to %r is not in its ACL: dropped", s.client_id, s.user,
                        pub.topic)
            return None
        return pub

    async def _handle(self, s: Session, p: mqtt.Packet) -> bool:
        """One packet other than PUBLISH; False when the client disconnected."""
        b, writer = self.broker, self.writer
        if p.kind in (mqtt.PUBACK, mqtt.PUBREC, mqtt.PUBCOMP):
            writer.write(s.acknowledged(p.kind, _packet_id(p), self.limits))
        elif p.kind == mqtt.PUBREL:
            pid = _packet_id(p)
            s.awaiting_release.discard(pid)
            writer.write(mqtt.ack(mqtt.PUBCOMP, pid))
        elif p.kind == mqtt.SUBSCRIBE:
            await self._subscribe(s, mqtt.parse_subscribe(p))
        elif p.kind == mqtt.UNSUBSCRIBE:
            sub = mqtt.parse_subscribe(p, unsubscribe=True)
            for flt, _ in sub.filters:
                b.unsubscribe(s, flt)
            try:
                await b.sync()
            except Exception:
                pass                             # logged; UNSUBACK has no failure code
            writer.write(mqtt.ack(mqtt.UNSUBACK, sub.packet_id))
        elif p.kind == mqtt.PINGREQ:
            writer.write(mqtt.pingresp())
        elif p.kind == mqtt.DISCONNECT:
            s.will = None                        # a clean end: the will is discarded (3.14.4)
            return False
        elif p.kind == mqtt.CONNECT:
            raise mqtt.ProtocolError("a second CONNECT on one connection (3.1.0-2)")
        else:
            raise mqtt.ProtocolError(f"unexpected packet type {p.kind}")
        return True

    async def _subscribe(self, s: Session, sub: mqtt.Subscribe) -> None:
        b = self.broker
        codes: list[int] = []
        added: list[str] = []                    # filters new to this session
        for flt, qos in sub.filters:
            try:
                topics.check_filter(b.framing.topic, flt)
            except topics.TopicError as exc:
                log.info("client %r: filter %r refused: %s", s.client_id, flt, exc)
                codes.append(0x80)
                continue
            if b.acl is not None and not b.acl.may_read(s.user, s.client_id, flt):
                b.stats.denied += 1
                log.warning("client %r (user %r): subscribing to %r is not in its ACL: refused", s.client_id,
                            s.user, flt)
                codes.append(0x80)
                continue
            granted = min(qos, 2)
            if flt not in s.subs:
                added.append(flt)
            b.subscribe(s, flt, granted)
            codes.append(granted)
        try:
            await b.sync()
        except Exception:
            codes = [0x80] * len(codes)          # not installed: the client is told, and the
            for flt in added:                    # filters it did not hold before are taken back
                b.unsubscribe(s, flt)
        b.commit()                               # the subscriptions outlive the edge from here on
        self.writer.write(mqtt.suback(sub.packet_id, codes))
        await b.send_retained(s, {f: c for (f, _), c in zip(sub.filters, codes) if c != 0x80})
        b.commit()


def _packet_id(p: mqtt.Packet) -> int:
    if len(p.body) < 2:
        raise mqtt.ProtocolError("an acknowledgement without its packet id")
    return int.from_bytes(p.body[:2], "big")


async def watch_keepalive(broker) -> None:  # type: ignore[no-untyped-def]
    """Close the connection of every client silent for more than 1.5 times its keep-alive
    (3.1.2.10); its session then ends as a connection lost (its will is published)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(KEEPALIVE_CHECK_S)
        now = loop.time()
        for s in list(broker.sessions.values()):
            if s.writer is not None and s.keepalive and now - s.seen > 1.5 * s.keepalive:
                s.expired = True
                s.writer.transport.abort()
