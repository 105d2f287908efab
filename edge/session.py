"""An MQTT session as the edge broker keeps it (MQTT 3.1.1 3.1.2.4, 4.3, 4.4): it outlives its
network connection when the client asked for a persistent session (clean session 0; MQTT 5: for
its session expiry interval).

What it holds: the client's subscriptions with their granted QoS; QoS 1/2 publications sent and
not yet acknowledged (re-sent, with DUP, when the client reconnects: 4.4); publications waiting
for a free in-flight slot or for the client to come back (up to `Limits.max_queued` messages and
`Limits.max_queued_bytes`; past them the newest are dropped, logged once and counted); the ids
of QoS 2 publications received and not yet released (a re-sent one is not published twice).
An MQTT 5 client's publications are written as version 5 packets with their properties (the
message expiry with the time left; expired ones are not sent), within its receive maximum and
maximum packet size, with the topic aliases it takes.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from camus.compiler.language.topics import matches

from . import mqtt, mqtt5

log = logging.getLogger("camus.edge")
SUB_ID_SHIFT = 8            # a subscription's MQTT 5 identifier, above its QoS and options (Session.subs)


@dataclass(frozen=True)
class Limits:
    """What one client, and all of them together, may make the broker hold."""
    max_packet: int = 256 << 10            # bytes of one packet; a larger one closes its connection
    max_inflight: int = 20                 # QoS 1/2 publications to one client not yet acknowledged
    max_queued: int = 1000                 # publications waiting for one client (in flight excluded)
    max_queued_bytes: int = 16 << 20       # their payload bytes
    queue_qos0: bool = False               # queue QoS 0 publications for an offline client too
    max_retained_bytes: int = 64 << 20     # payload bytes of all retained messages
    max_buffered: int = 64 << 20           # bytes of unfinished packets, all connections together
    packet_timeout: float = 30.0           # seconds from a packet's first byte to its last (a stalled
                                           # publisher's bytes are let go)
    topic_alias_max: int = 10              # MQTT 5 topic aliases a client may set (mosquitto's default)
    receive_max: int = 1000                # MQTT 5: QoS 2 publications a client may leave unreleased (QoS 1
                                           # ones are acknowledged as they are read)
    max_keepalive: int = 65535             # MQTT 5: a longer (or no) keep-alive is cut to this (Server Keep Alive)


@dataclass(slots=True)
class Outgoing:
    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    released: bool = False                 # QoS 2: PUBREC came, PUBREL sent, PUBCOMP awaited
    seq: int = 0                           # its row in the broker's store (edge/store.py), 0: not stored
    props: bytes = b""                     # MQTT 5 properties forwarded to a version 5 client
    expires: float = 0.0                   # time.monotonic() when it expires (MQTT 5); 0: never

    def expired(self, now: float) -> bool:
        return bool(self.expires) and self.expires <= now


@dataclass(eq=False)
class Session:
    sid: int
    client_id: str
    clean: bool = True
    writer: asyncio.StreamWriter | None = None     # None while the client is away
    user: str | None = None
    subs: dict[str, int] = field(default_factory=dict)       # filter -> granted QoS | MQTT 5 options (mqtt5)
    # | its MQTT 5 subscription identifier << SUB_ID_SHIFT
    inflight: dict[int, Outgoing] = field(default_factory=dict)
    queue: deque[Outgoing] = field(default_factory=deque)
    queued_bytes: int = 0
    awaiting_release: set[int] = field(default_factory=set)  # QoS 2 ids received, PUBREL not yet
    will: mqtt.Will | None = None
    denied: tuple[str, ...] = ()           # the ACL's deny rules for it: topics it is never sent
    keepalive: int = 0                     # seconds; 0: none
    seen: float = 0.0                      # the event loop's time of the last bytes from the client
    expired: bool = False                  # its connection was closed for silence
    stalled: bool = False                  # QoS 0 publications are being dropped: it does not read
    full: bool = False                     # its queue is full: publications dropped (logged once)
    paid: Callable[[int], None] | None = None   # told the store row of each acknowledged publication
    level: int = 4                         # MQTT protocol level: 4 (3.1.1) or 5
    receive_max: int = 0                   # MQTT 5: QoS 1/2 in flight the client takes (0: Limits')
    max_packet: int = 0                    # MQTT 5: the largest packet the client takes (0: any)
    expiry: float = math.inf               # seconds the session outlives its connection (clean: 0)
    gone_at: float = 0.0                   # time.monotonic() its connection ended (while away)
    options: int = 0                       # subscriptions with no-local, retain-as-published or an id
    expired_msgs: int = 0                  # publications dropped as expired (MQTT 5 message expiry)
    alias_max: int = 0                     # MQTT 5: topic aliases the client takes from us (its CONNECT)
    aliases: dict[str, int] = field(default_factory=dict)   # topic -> the alias this connection set
    pending_will: mqtt.Will | None = None  # MQTT 5: a will waiting for its delay
    will_timer: asyncio.TimerHandle | None = None
    _next_id: int = 0

    @property
    def online(self) -> bool:
        return self.writer is not None

    def granted(self, topic: str, flavor: str) -> int:
        """The highest QoS of this session's filters that match `topic` (4.3: the broker may send
        one copy at the highest QoS of the overlapping subscriptions)."""
        best = 0
        for flt, opts in self.subs.items():
            if opts & 3 > best and matches(flavor, flt, topic):
                best = opts & 3
                if best == 2:
                    break
        return best

    def inflight_cap(self, limits: Limits) -> int:
        return min(limits.max_inflight, self.receive_max) if self.receive_max else limits.max_inflight

    def packet(self, msg: Outgoing, qos: int, pid: int = 0, dup: bool = False) -> bytes:
        """A publication as this client's protocol version writes it: an MQTT 5 client gets its
        properties, the message expiry with the time left; b"" when it is over the client's
        maximum packet size (MQTT 5 3.1.2.11.4: not sent)."""
        if self.level != mqtt5.LEVEL:
            return mqtt.publish_packet(msg.topic, msg.payload, msg.retain, qos, pid, dup)
        props, topic = msg.props, msg.topic
        if msg.expires:
            props = mqtt5.prop(mqtt5.MESSAGE_EXPIRY, max(0, math.ceil(msg.expires - time.monotonic()))) + props
        alias = 0
        if self.alias_max:                     # the topic once, then its alias (3.3.2.3.4)
            alias = self.aliases.get(topic, 0)
            if alias:
                topic = ""
            elif len(self.aliases) < self.alias_max:
                alias = len(self.aliases) + 1
            if alias:
                props = mqtt5.prop(mqtt5.TOPIC_ALIAS, alias) + props
        data = mqtt5.publish_packet(topic, msg.payload, msg.retain, qos, pid, dup, props)
        if self.max_packet and len(data) > self.max_packet:
            return b""
        if alias and topic:
            self.aliases[topic] = alias
        return data

    def packet_id(self) -> int:
        """A packet id not in flight (1..65535)."""
        for _ in range(65535):
            self._next_id = self._next_id % 65535 + 1
            if self._next_id not in self.inflight:
                return self._next_id
        raise RuntimeError("65535 publications in flight")

    def send(self, msg: Outgoing, limits: Limits) -> tuple[bytes, bool]:
        """Take a publication for this client: the bytes to write now (b"" when it is queued or
        dropped) and whether it was kept (False: dropped, the queue is full)."""
        if msg.qos == 0:
            if self.online:
                return self.packet(msg, 0), True
            if not limits.queue_qos0:
                return b"", True                   # QoS 0 to an absent client: nothing owed
        elif self.online and len(self.inflight) < self.inflight_cap(limits) and not self.queue:
            return self._launch(msg), True
        if len(self.queue) >= limits.max_queued or self.queued_bytes + len(msg.payload) > limits.max_queued_bytes:
            if not self.full:
                log.warning("client %r: %d publications (%d bytes) queued, the limit; dropping newer ones",
                            self.client_id, len(self.queue), self.queued_bytes)
            self.full = True
            return b"", False
        self.queue.append(msg)
        self.queued_bytes += len(msg.payload)
        return b"", True

    def _launch(self, msg: Outgoing) -> bytes:
        pid = self.packet_id()
        data = self.packet(msg, msg.qos, pid)
        if data:
            self.inflight[pid] = msg
        elif msg.seq and self.paid is not None:    # over the client's maximum packet size
            self.paid(msg.seq)
        return data

    def acknowledged(self, kind: int, pid: int, limits: Limits, reason: int = 0) -> bytes:
        """PUBACK, PUBREC or PUBCOMP from the client: what to write back (PUBREL for PUBREC, and
        the queued publications that now fit in flight). An MQTT 5 PUBREC with a failure reason
        ends that publication's exchange (4.3.3: no PUBREL)."""
        msg = self.inflight.get(pid)
        if kind == mqtt.PUBREC and reason >= 0x80:
            if msg is not None and msg.qos == 2:
                del self.inflight[pid]
                if msg.seq and self.paid is not None:
                    self.paid(msg.seq)
            return self.pump(limits)
        if kind == mqtt.PUBREC:
            if msg is not None and msg.qos == 2:
                msg.released = True
            return mqtt.ack(mqtt.PUBREL, pid)       # answered even for an unknown id (4.3.3)
        if msg is not None and (kind == mqtt.PUBACK) == (msg.qos == 1):
            del self.inflight[pid]
            if msg.seq and self.paid is not None:
                self.paid(msg.seq)
        return self.pump(limits)

    def pump(self, limits: Limits) -> bytes:
        """Queued publications moved in flight (or written, QoS 0) while there is room."""
        out = []
        cap, now = self.inflight_cap(limits), time.monotonic()
        while self.queue and self.online and (self.queue[0].qos == 0 or len(self.inflight) < cap):
            msg = self.queue.popleft()
            self.queued_bytes -= len(msg.payload)
            if msg.expired(now):                   # waited past its message expiry: not sent
                self.expired_msgs += 1
                if msg.seq and self.paid is not None:
                    self.paid(msg.seq)
                continue
            out.append(self.packet(msg, 0) if msg.qos == 0 else self._launch(msg))
        if not self.queue:
            self.full = False
        return b"".join(out)

    def resume(self, limits: Limits) -> bytes:
        """On reconnection: the unacknowledged publications again (DUP set; PUBREL for those
        already received), in the order they were sent, then what was queued (4.4)."""
        out = []
        for pid, msg in list(self.inflight.items()):
            data = mqtt.ack(mqtt.PUBREL, pid) if msg.released else self.packet(msg, msg.qos, pid, dup=True)
            if not data:                           # over the maximum packet size it now takes: let go
                del self.inflight[pid]
                if msg.seq and self.paid is not None:
                    self.paid(msg.seq)
            out.append(data)
        return b"".join(out) + self.pump(limits)
