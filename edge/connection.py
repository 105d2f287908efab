"""One client's network connection to the edge broker: MQTT 3.1.1 or 5.0 from CONNECT to the end.

CONNECT is answered as its version says (a version 5 client gets reason codes and properties:
its assigned client id, the topic aliases and packet size it may use, a cut keep-alive; enhanced
authentication is refused with reason 0x8C); a 3.1.1 empty client id is taken only with clean
session; a password file and ACL file (edge/auth.py) decide who connects and what it may publish
and subscribe to. A version 5 connection the broker closes gets a DISCONNECT with the reason.
Then packets are read in bulk (many PUBLISH packets per read, sent on together),
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

from . import mqtt, mqtt5
from .session import SUB_ID_SHIFT, Session
from .shared import HOMES_REFRESH_S, shared_parts

log = logging.getLogger("camus.edge")
TCP_QUICKACK = 12
CONNECT_TIMEOUT_S = 10.0          # a connection must send CONNECT within this
KEEPALIVE_CHECK_S = 0.5           # how often the watchdog looks for silent clients
LINGER_S = 1.0                    # an MQTT 5 client told why it is disconnected: its last bytes drained
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
        self.v5 = False                # the client speaks MQTT 5
        self.aliases: dict[int, str] = {}     # MQTT 5 topic aliases the client set
        self.will_on_disconnect = False       # MQTT 5 DISCONNECT 0x04: publish the will all the same

    async def run(self) -> None:
        b = self.broker
        s: Session | None = None
        clean = told = False
        try:
            s = self.session = await self._connect()
            if s is None:
                return
            clean = await self._serve(s)
        except mqtt.TooLarge as exc:
            b.stats.too_large += 1
            log.warning("client %s (%s): %s: connection closed (--max-packet)", self._name(s), self.peer, exc)
            told = self._disconnect(mqtt5.PACKET_TOO_LARGE)
        except (mqtt.ProtocolError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as exc:
            log.info("client %s (%s) closed: %s", self._name(s), self.peer, exc or type(exc).__name__)
            if isinstance(exc, mqtt.ProtocolError):
                told = self._disconnect(exc.reason if isinstance(exc, mqtt5.Refused) else mqtt5.PROTOCOL_ERROR,
                                        str(exc))
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
                b.close_session(s, self.writer, clean and not self.will_on_disconnect)
            if told:                            # (the session no longer writes here)
                await self._linger()
            self.writer.close()

    def _disconnect(self, reason: int, text: str | None = None) -> bool:
        """An MQTT 5 client is told why the broker closes its connection (3.14); True if it was."""
        if self.v5 and self.session is not None and not self.writer.is_closing():
            self.writer.write(mqtt5.disconnect(reason, text))
            return True
        return False

    async def _linger(self) -> None:
        """After a DISCONNECT the broker sent: its side closed, what the client still sends read
        and dropped (up to LINGER_S) so the close is not a reset that loses the DISCONNECT."""
        if self.writer.is_closing() or not self.writer.can_write_eof():
            return
        try:
            self.writer.write_eof()
            deadline = asyncio.get_running_loop().time() + LINGER_S
            while await asyncio.wait_for(self.reader.read(1 << 16), max(deadline - asyncio.get_running_loop().time(), 0)):
                pass
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass

    @staticmethod
    def _name(s: Session | None) -> str:
        return repr(s.client_id) if s is not None else "(before CONNECT)"

    async def _connect(self) -> Session | None:
        b = self.broker
        first = await asyncio.wait_for(mqtt.read_packet(self.reader, self.limits.max_packet), CONNECT_TIMEOUT_S)
        if first is None or first.kind != mqtt.CONNECT:
            raise mqtt.ProtocolError("the first packet must be CONNECT")
        hello = mqtt.parse_connect(first)
        extra = None
        if hello.level == mqtt5.LEVEL:
            self.v5 = True
            try:
                hello, extra = mqtt5.parse_connect(first)
            except mqtt5.Refused as exc:
                self.writer.write(mqtt5.connack(exc.reason))
                raise
        code, why = self._admit(hello, extra)
        if code:
            b.stats.refused += 1
            log.warning("client %r at %s refused: %s", hello.client_id, self.peer, why)
            self.writer.write(mqtt5.connack(code) if self.v5 else mqtt.connack(code))
            return None
        s, present = b.open_session(hello, self.writer, extra)
        log.info("client %r connected from %s (MQTT %s, %s session%s, keep-alive %d s)", s.client_id, self.peer,
                 "5" if self.v5 else "3.1.1", "clean" if s.clean else "persistent", ", resumed" if present else "",
                 hello.keepalive)
        if self.v5:
            self.writer.write(mqtt5.connack(0, present, self._connack_props(hello, s)))
        else:
            self.writer.write(mqtt.connack(0, present))
        owed = s.resume(self.limits)                 # unacknowledged, then queued publications
        if owed:
            self.writer.write(owed)
        return s

    def _connack_props(self, hello: mqtt.Connect, s: Session) -> bytes:
        """What an MQTT 5 client learns of this broker in CONNACK (3.2.2.3)."""
        lim = self.limits
        parts = [mqtt5.prop(mqtt5.MAXIMUM_PACKET_SIZE, lim.max_packet),
                 mqtt5.prop(mqtt5.RECEIVE_MAXIMUM, lim.receive_max)]
        if lim.topic_alias_max:
            parts.append(mqtt5.prop(mqtt5.TOPIC_ALIAS_MAXIMUM, lim.topic_alias_max))
        if not hello.client_id:
            parts.append(mqtt5.prop(mqtt5.ASSIGNED_CLIENT_ID, s.client_id))
        if hello.keepalive == 0 and lim.max_keepalive < 65535 or hello.keepalive > lim.max_keepalive:
            s.keepalive = lim.max_keepalive
            parts.append(mqtt5.prop(mqtt5.SERVER_KEEP_ALIVE, lim.max_keepalive))
        return b"".join(parts)

    def _admit(self, hello: mqtt.Connect, extra: mqtt5.Connect5 | None) -> tuple[int, str]:
        """A CONNACK refusal code (a reason code for MQTT 5) and why, or (0, "")."""
        b, v5 = self.broker, extra is not None
        if hello.level not in (3, 4, 5):
            return mqtt.REFUSED_PROTOCOL, f"protocol level {hello.level} (3.1.1 is 4, 3.1 is 3, 5.0 is 5)"
        if extra is not None and extra.auth_method is not None:
            return mqtt5.BAD_AUTH_METHOD, (f"enhanced authentication (method {extra.auth_method!r}) is not "
                                           "supported: user name and password only")
        if not hello.client_id and not hello.clean and not v5:
            return mqtt.REFUSED_IDENTIFIER, "an empty client id needs clean session (3.1.3.1)"
        if hello.username is None:
            if not b.allow_anonymous:
                return (mqtt5.NOT_AUTHORIZED if v5 else mqtt.REFUSED_NOT_AUTHORIZED), \
                    "no user name, and anonymous clients are not allowed"
        elif b.passwords is not None and not b.passwords.check(hello.username, hello.password):
            return (mqtt5.BAD_CREDENTIALS if v5 else mqtt.REFUSED_CREDENTIALS), \
                f"wrong user name or password (user {hello.username!r})"
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
        pub = self._parse_publish(p) if self.v5 else mqtt.parse_publish(p)
        pub.origin = s.sid
        refused = ""
        if pub.topic.startswith(SYS_BROKER):
            b.stats.denied += 1
            refused = "the broker's own $SYS/broker topics"
        elif b.acl is not None and not b.acl.may_write(s.user, s.client_id, pub.topic):
            b.stats.denied += 1
            refused = "not in its ACL"
        if pub.qos:
            kind = mqtt.PUBACK if pub.qos == 1 else mqtt.PUBREC
            if refused and self.v5:                  # told (a 3.1.1 client cannot be)
                self.acks.append(mqtt5.ack(kind, pub.packet_id, mqtt5.NOT_AUTHORIZED))
            else:
                self.acks.append(mqtt.ack(kind, pub.packet_id))
                if pub.qos == 2:
                    if pub.packet_id in s.awaiting_release:
                        return None                  # a re-send: published once already (4.3.3)
                    s.awaiting_release.add(pub.packet_id)
                    if self.v5 and len(s.awaiting_release) > self.limits.receive_max:
                        raise mqtt5.Refused(mqtt5.RECEIVE_MAXIMUM_EXCEEDED, "more QoS 2 publications unreleased "
                                            f"than the receive maximum of {self.limits.receive_max}")
        if refused:
            log.warning("client %r (user %r): publishing to %r: %s: dropped", s.client_id, s.user, pub.topic, refused)
            return None
        return pub

    def _parse_publish(self, p: mqtt.Packet) -> mqtt.Publish:
        """An MQTT 5 PUBLISH, its topic alias resolved (3.3.2.3.4), its properties kept to forward."""
        p5 = mqtt5.parse_publish(p)
        pub = p5.pub
        if p5.alias is not None:
            if not 0 < p5.alias <= self.limits.topic_alias_max:
                raise mqtt5.Refused(mqtt5.TOPIC_ALIAS_INVALID, f"topic alias {p5.alias} (at most "
                                    f"{self.limits.topic_alias_max})")
            if pub.topic:
                self.aliases[p5.alias] = pub.topic
            elif p5.alias in self.aliases:
                pub.topic = self.aliases[p5.alias]
            else:
                raise mqtt5.Refused(mqtt5.PROTOCOL_ERROR, f"topic alias {p5.alias} was never set")
        if not pub.topic or "+" in pub.topic or "#" in pub.topic:
            raise mqtt5.Refused(mqtt5.TOPIC_NAME_INVALID, f"cannot publish to {pub.topic!r} (empty or a wildcard)")
        if p5.expiry is not None:
            pub.props = mqtt5.prop(mqtt5.MESSAGE_EXPIRY, p5.expiry) + p5.forwarded
        else:
            pub.props = p5.forwarded
        return pub

    async def _handle(self, s: Session, p: mqtt.Packet) -> bool:
        """One packet other than PUBLISH; False when the client disconnected."""
        b, writer, v5 = self.broker, self.writer, self.v5
        if p.kind in (mqtt.PUBACK, mqtt.PUBREC, mqtt.PUBCOMP):
            pid, reason = mqtt5.ack_reason(p) if v5 else (_packet_id(p), 0)
            writer.write(s.acknowledged(p.kind, pid, self.limits, reason))
        elif p.kind == mqtt.PUBREL:
            pid = _packet_id(p)
            known = pid in s.awaiting_release
            s.awaiting_release.discard(pid)
            writer.write(mqtt5.ack(mqtt.PUBCOMP, pid, mqtt5.PACKET_ID_NOT_FOUND) if v5 and not known
                         else mqtt.ack(mqtt.PUBCOMP, pid))
        elif p.kind == mqtt.SUBSCRIBE:
            if v5:
                sub5 = mqtt5.parse_subscribe(p)
                await self._subscribe(s, sub5.packet_id, sub5.filters, sub5.sub_id)
            else:
                sub = mqtt.parse_subscribe(p)
                await self._subscribe(s, sub.packet_id, sub.filters)
        elif p.kind == mqtt.UNSUBSCRIBE:
            gone = mqtt5.parse_subscribe(p, unsubscribe=True) if v5 else mqtt.parse_subscribe(p, unsubscribe=True)
            codes = [mqtt5.SUCCESS if b.unsubscribe(s, flt) else mqtt5.NO_SUBSCRIPTION_EXISTED
                     for flt, _ in gone.filters]
            try:
                await b.sync()
            except Exception:
                pass                             # logged; UNSUBACK has no failure code
            b.commit()
            writer.write(mqtt5.suback(gone.packet_id, codes, mqtt.UNSUBACK) if v5
                         else mqtt.ack(mqtt.UNSUBACK, gone.packet_id))
        elif p.kind == mqtt.PINGREQ:
            writer.write(mqtt.pingresp())
        elif p.kind == mqtt.DISCONNECT:
            if v5:
                reason, props = mqtt5.disconnect_reason(p)
                expiry = props.get(mqtt5.SESSION_EXPIRY)
                if expiry is not None:
                    if s.expiry == 0 and expiry:
                        raise mqtt5.Refused(mqtt5.PROTOCOL_ERROR, "a session expiry set at DISCONNECT after 0")
                    s.expiry = float("inf") if expiry == 0xFFFFFFFF else float(expiry)     # type: ignore[arg-type]
                    s.clean = s.expiry == 0
                if reason == 0x04:               # "disconnect with will message"
                    self.will_on_disconnect = True
                    return False
            s.will = None                        # a clean end: the will is discarded (3.14.4)
            return False
        elif p.kind == mqtt.CONNECT:
            raise mqtt5.Refused(mqtt5.PROTOCOL_ERROR, "a second CONNECT on one connection (3.1.0-2)")
        elif p.kind == mqtt5.AUTH and v5:
            raise mqtt5.Refused(mqtt5.PROTOCOL_ERROR, "AUTH: enhanced authentication is not supported")
        else:
            raise mqtt5.Refused(mqtt5.MALFORMED, f"unexpected packet type {p.kind}")
        return True

    async def _subscribe(self, s: Session, packet_id: int, filters: list[tuple[str, int]], sub_id: int = 0) -> None:
        """SUBSCRIBE: each filter checked, granted and taken into the XDP broker's rules; then
        SUBACK and the retained messages (for an MQTT 5 client as its retain handling says; none
        for a shared subscription, 4.8.2)."""
        b, v5 = self.broker, self.v5
        codes: list[int] = []
        added: list[str] = []                    # filters new to this session
        retained: dict[str, int] = {}            # filter -> QoS, for the retained messages
        for flt, options in filters:
            try:
                shared = shared_parts(flt)
                topics.check_filter(b.framing.topic, shared[1] if shared else flt)
            except (ValueError, topics.TopicError) as exc:
                log.info("client %r: filter %r refused: %s", s.client_id, flt, exc)
                codes.append(mqtt5.TOPIC_FILTER_INVALID if v5 else 0x80)
                continue
            if shared and options & mqtt5.NO_LOCAL:
                raise mqtt5.Refused(mqtt5.PROTOCOL_ERROR, f"no-local on the shared subscription {flt!r} (3.8.3.1)")
            if b.acl is not None and not b.acl.may_read(s.user, s.client_id, shared[1] if shared else flt):
                b.stats.denied += 1
                log.warning("client %r (user %r): subscribing to %r is not in its ACL: refused", s.client_id,
                            s.user, flt)
                codes.append(mqtt5.NOT_AUTHORIZED if v5 else 0x80)
                continue
            granted = min(options & 3, 2)
            new = flt not in s.subs
            if new:
                added.append(flt)
            opts = granted | (options & (mqtt5.NO_LOCAL | mqtt5.RETAIN_AS_PUBLISHED) if v5 else 0) | sub_id << SUB_ID_SHIFT
            b.subscribe(s, flt, opts)
            codes.append(granted)
            handling = (options >> 4) & 3 if v5 else mqtt5.SEND_RETAINED
            if not shared and (handling == mqtt5.SEND_RETAINED or handling == mqtt5.SEND_RETAINED_IF_NEW and new):
                retained[flt] = opts
        try:
            await b.sync()
        except Exception:
            codes = [0x80] * len(codes)          # not installed: the client is told, and the
            for flt in added:                    # filters it did not hold before are taken back
                b.unsubscribe(s, flt)
            retained = {}
        b.commit()                               # the subscriptions outlive the edge from here on
        self.writer.write(mqtt5.suback(packet_id, codes) if v5 else mqtt.suback(packet_id, codes))
        await b.send_retained(s, retained)
        b.commit()


def _packet_id(p: mqtt.Packet) -> int:
    if len(p.body) < 2:
        raise mqtt.ProtocolError("an acknowledgement without its packet id")
    return int.from_bytes(p.body[:2], "big")


async def watch_keepalive(broker) -> None:  # type: ignore[no-untyped-def]
    """Close the connection of every client silent for more than 1.5 times its keep-alive
    (3.1.2.10); its session then ends as a connection lost (its will is published). End the
    MQTT 5 sessions away past their session expiry interval."""
    loop = asyncio.get_running_loop()
    homes_due = 0.0
    while True:
        await asyncio.sleep(KEEPALIVE_CHECK_S)
        now = loop.time()
        for s in list(broker.sessions.values()):
            if s.writer is not None and s.keepalive and now - s.seen > 1.5 * s.keepalive:
                s.expired = True
                if s.level == mqtt5.LEVEL:
                    s.writer.write(mqtt5.disconnect(mqtt5.KEEP_ALIVE_TIMEOUT))
                s.writer.transport.abort()
        broker.expire_sessions()
        if broker.groups and now >= homes_due:
            homes_due = now + HOMES_REFRESH_S
            await broker.refresh_homes()
