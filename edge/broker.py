"""The edge broker: MQTT on one side, the XDP broker on the other (the eBPF pub/sub design).

Publishers and subscribers are ordinary MQTT 3.1.1 or 5.0 clients. A publication is labelled — its
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
that matches, right after its SUBACK. A retained message published at another edge is not kept
here (its datagram carries the retain flag only for retain-as-published subscriptions).

Sessions (edge/session.py, the protocol in edge/connection.py): QoS 1/2 publications carry their
QoS through the XDP broker (a byte after the payload) and are delivered at the lower of it and
the subscription's; persistent sessions keep their subscriptions (and their rules on the XDP
broker) while the client is away and queue what it is owed; wills, keep-alive, takeover, a
mosquitto password file and ACL file (edge/auth.py) and the limits of `Limits`. MQTT 5: a
publication's properties and publisher cross the XDP broker after the payload
(edge/framing.py); subscription options, identifiers and shared subscription groups
(edge/shared.py) are applied when a copy is handed to the local clients.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import socket
import time
from typing import Any
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from camus.compiler.language import topics

from . import mqtt, mqtt5
from .auth import Acl, Passwords
from .framing import ORIGIN_BYTES, TRAILER_RETAIN, Framing, Message
from .session import SUB_ID_SHIFT, Limits, Outgoing, Session
from .shared import SharedGroup, is_plain, shared_parts
from .store import EdgeStore, Kept
from .trie import KNOWN_TOPICS, TopicTrie

__all__ = ["EdgeBroker", "EdgeStats", "Framing", "Limits", "Message", "RuleSink"]
log = logging.getLogger("camus.edge")
SLOW_CLIENT_BYTES = 16 << 20   # queued for one client beyond this: its publications are dropped
MAX_RETAINED = 100_000      # topics with a retained message (memory: a new topic past it is not kept)
RETAINED_CHUNK = 256 << 10  # retained messages to a new subscriber: bytes written before waiting for it
SYS_PREFIX = "$SYS/"        # the broker's own figures (mosquitto's $SYS/broker/... names where they exist)
OPTION_BITS = mqtt5.NO_LOCAL | mqtt5.RETAIN_AS_PUBLISHED    # subscription options delivery looks at


def _special(opts: int) -> bool:
    """A subscription delivery must look at: no-local, retain-as-published or an identifier."""
    return bool(opts & OPTION_BITS or opts >> SUB_ID_SHIFT)


def _sub_ids(ids: list[int]) -> bytes:
    return b"".join(mqtt5.prop(mqtt5.SUBSCRIPTION_ID, i) for i in sorted(set(ids)))


class RuleSink(Protocol):
    def apply(self, port: int, filters: list[str], shared: list[tuple[str, str]] | None = None) -> None:
        """Make `filters` this port's rules on the XDP broker, and declare the shared
        subscription groups (group, filter) it holds members of (blocking; raises on failure)."""


@dataclass
class EdgeStats:
    published: int = 0          # publications sent to the XDP broker
    received: int = 0           # copies the XDP broker sent here
    delivered: int = 0          # PUBLISH packets written to local subscribers
    unmatched: int = 0          # copies no local client wanted (the XDP tables over-delivered)
    rejected: int = 0           # publications that could not be labelled (topic too long, ...)
    dropped: int = 0            # publications not written to a client that is not reading (QoS 0)
    unsent: int = 0             # publications the feed socket refused (no route, no buffer: QoS 0)
    not_retained: int = 0       # retained publications past MAX_RETAINED topics or the bytes limit (sent on, not kept)
    refused: int = 0            # connections refused (version, identifier, credentials)
    denied: int = 0             # publications and subscriptions the ACL refused
    wills: int = 0              # wills published (a client gone without DISCONNECT)
    expired: int = 0            # connections closed for silence past 1.5 x their keep-alive
    taken_over: int = 0         # connections closed because their client id connected again
    too_large: int = 0          # connections closed for a packet over the size limit
    over_memory: int = 0        # connections closed because unfinished packets passed the memory bound
    queue_dropped: int = 0      # publications not queued for a session whose queue was full
    tls_failed: int = 0         # connections whose TLS handshake failed (logged with the peer and why)
    stalled: int = 0            # connections closed for a packet unfinished past --packet-timeout
    sessions_expired: int = 0   # MQTT 5 sessions ended by their session expiry interval


class EdgeBroker:
    def __init__(self, framing: Framing, feed: tuple[str, int] | None, port: int | None,
                 sink: RuleSink | None, batch_s: float = 0.02, limits: Limits | None = None,
                 passwords: Passwords | None = None, acl: Acl | None = None,
                 allow_anonymous: bool | None = None, store: EdgeStore | None = None) -> None:
        """`allow_anonymous`: clients without a user name may connect (default: unless there
        is a password file, as mosquitto 2.0 does). `store`: what is kept across restarts
        (edge/store.py); the retained messages and persistent sessions in it are taken back."""
        self.framing, self.feed, self.port, self.sink, self.batch_s = framing, feed, port, sink, batch_s
        self.limits = limits or Limits()
        self.passwords, self.acl = passwords, acl
        self.allow_anonymous = passwords is None if allow_anonymous is None else allow_anonymous
        self.sessions: dict[int, Session] = {}          # sid -> session (persistent ones while away too)
        self.by_client: dict[str, Session] = {}         # client id -> session
        self.started = time.monotonic()
        self._sys: dict[str, str] = {}                  # $SYS topic -> the value last published
        self.sys_interval = 0.0                         # seconds between $SYS updates (0: none; the CLI's 10)
        self.sys_retained: dict[str, tuple[bytes, int]] = {}   # the $SYS figures, retained apart from clients'
        # (outside the retained limits and counts: a few dozen topics this broker owns)
        self.buffered = 0                               # bytes of unfinished packets, all connections
        self.unfinished: dict[Any, float] = {}          # connection holding some of them -> since when
        self.filters: Counter[str] = Counter()         # filter -> sessions holding it
        self.trie = TopicTrie(framing.topic.flavor)     # filter -> sessions, for local delivery
        self.stats = EdgeStats()
        self._ids = itertools.count(1)
        self._auto = itertools.count(1)                 # ids for clients that connect with none
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._feed_failing = False                      # the last send to the feed failed (logged once)
        self._push: asyncio.Future[None] | None = None      # the batch being gathered
        self._pushing = asyncio.Lock()
        self._applied: tuple[list[str], list[tuple[str, str]]] | None = None
        self._wire: dict[str, bytes] = {}               # topic -> it as an MQTT string
        self.retained: dict[str, tuple[bytes, int]] = {}   # topic -> its last retained payload, QoS
        self.retained_bytes = 0
        self._retain_full = False                       # the bytes limit was hit (logged once until under)
        self.tag = os.urandom(4)                        # this edge, in the origin its publications carry
        self.no_local = 0                               # subscriptions with no-local (origins are then sent)
        self.groups: dict[str, SharedGroup] = {}        # "$share/group/filter" -> its members
        self.group_ids: dict[int, SharedGroup] = {}     # its id in the trie (negative) -> it
        self.retained_props: dict[str, tuple[bytes, float]] = {}   # topic -> MQTT 5 properties, expiry
        self.store = store
        if store is not None:
            self._restore(store)

    # -- subscriptions -> the XDP broker's rules ----------------------------------------------
    async def sync(self) -> None:
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
            wanted = sorted(f for f in self.filters if not f.startswith(SYS_PREFIX))   # $SYS is this edge's own
            shared = sorted({(g.name, g.filter) for g in self.groups.values() if not g.filter.startswith(SYS_PREFIX)})
            try:
                if self.sink is not None and self.port is not None and (wanted, shared) != self._applied:
                    await asyncio.to_thread(self.sink.apply, self.port, wanted, shared)
                    self._applied = (wanted, shared)
                    await self.refresh_homes()
                push.set_result(None)
            except Exception as exc:          # the waiting SUBACKs report the failure
                log.error("rule update failed: %s", exc)
                push.set_exception(exc)
        await push

    async def withdraw(self) -> None:
        """Take this edge's rules out of the XDP broker (on exit)."""
        async with self._pushing:
            if self.sink is not None and self.port is not None and self._applied not in (None, ([], [])):
                await asyncio.to_thread(self.sink.apply, self.port, [], [])
                self._applied = ([], [])

    async def refresh_homes(self) -> None:
        """Which shared groups this edge is the home of (edge/shared.py): it delivers only
        theirs. Without an XDP broker, or a sink that does not say, every group's."""
        find = getattr(self.sink, "homes", None)
        if not self.groups or find is None or self.port is None:
            return
        try:
            homes = await asyncio.to_thread(find)
        except OSError as exc:
            log.warning("shared subscriptions: the other edges' declarations cannot be read: %s", exc)
            return
        for group in self.groups.values():
            group.away = homes.get((group.name, group.filter), self.port) != self.port

    # -- data ------------------------------------------------------------------------------
    def publish(self, pubs: list[mqtt.Publish]) -> None:
        """Send publications to the XDP broker, those that came together in as few datagrams
        as the framing allows (edge/framing.py); keep the retained ones."""
        for pub in pubs:
            if pub.retain:
                self._retain(pub.topic, pub.payload, pub.qos, pub.props)
        if self.feed is None:
            for pub in pubs:                                    # no XDP broker: local only
                self.deliver(pub.topic, pub.payload, pub.qos, None, pub.props, pub.retain, pub.origin)
            return
        frames = []
        for pub in pubs:
            extra = b""
            if pub.props or (self.no_local and pub.origin):      # (what MQTT 5 adds, when there is some)
                extra = self.tag + pub.origin.to_bytes(4, "big") + pub.props
            try:
                frame = self.framing.encode(pub.topic, pub.payload, pub.qos, pub.retain, extra)
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

    def _retain(self, topic: str, payload: bytes, qos: int = 0, props: bytes = b"") -> None:
        """The topic's retained message is now `payload`; an empty one removes it (3.3.1.3).
        Kept within MAX_RETAINED topics and `Limits.max_retained_bytes` of payload; an MQTT 5
        one with its properties, until its message expiry."""
        self.retained_props.pop(topic, None)
        old = self.retained.pop(topic, None)
        if old is not None:
            self.retained_bytes -= len(old[0])
            if self.store is not None:
                self.store.unretain(topic)
        if not payload:
            self._retain_full = False
            return
        if len(self.retained) >= MAX_RETAINED or self.retained_bytes + len(payload) > self.limits.max_retained_bytes:
            if not self._retain_full:
                log.warning("retained messages hold %d bytes on %d topics, the limit: a retained message on %r is "
                            "sent on but not kept (further ones counted, not logged)", self.retained_bytes,
                            len(self.retained), topic)
            self._retain_full = True
            self.stats.not_retained += 1
            return
        self.retained[topic] = (payload, qos)
        self.retained_bytes += len(payload)
        rest, expires = b"", 0.0
        if props:
            expiry, rest = _expiry(props)
            expires = time.monotonic() + expiry if expiry is not None else 0.0
            self.retained_props[topic] = (rest, expires)
        if self.store is not None:
            self.store.retain(topic, payload, qos, rest, _wall(expires))

    async def send_retained(self, s: Session, granted: dict[str, int]) -> int:
        """The retained messages matching any of the filters just `granted` (filter -> QoS, with
        an MQTT 5 subscription identifier above SUB_ID_SHIFT), to the session that subscribed,
        with the retain flag, once each, at the lower of the message's QoS and the highest
        granted for a filter it matches (and the identifiers of those filters). Returns how many.
        Streamed: RETAINED_CHUNK bytes at a time, each written only once the client has taken
        the one before (drain), so a `#` subscriber on 100K retained messages costs a chunk, not
        all of them at once; a retained message changed meanwhile is sent as it is then."""
        flavor = self.framing.topic.flavor
        out: list[bytes] = []
        size = n = 0
        now = time.monotonic()
        for topic in [*self.retained, *self.sys_retained]:
            got = self.retained.get(topic) or self.sys_retained.get(topic)
            if got is None:
                continue
            payload, qos = got
            hit = [o for f, o in granted.items() if topics.matches(flavor, f, topic)]
            best = max((o & 3 for o in hit), default=-1)
            if best >= 0 and not any(topics.matches("mqtt", d, topic) for d in s.denied):
                props, expires = self.retained_props.get(topic, (b"", 0.0))
                if expires and expires <= now:                   # expired (MQTT 5): forgotten
                    self._retain(topic, b"")
                    continue
                ids = [o >> SUB_ID_SHIFT for o in hit if o >> SUB_ID_SHIFT]
                if ids:
                    props = _sub_ids(ids) + props
                data, kept = self._send(s, Outgoing(topic, payload, min(qos, best), retain=True, props=props,
                                                    expires=expires))
                n += 1
                if data:
                    out.append(data)
                    size += len(data)
                if size >= RETAINED_CHUNK:
                    self._write(s, b"".join(out), len(out), always=True)
                    out, size = [], 0
                    if s.writer is None:
                        return n
                    await s.writer.drain()
        if out:
            self._write(s, b"".join(out), len(out), always=True)
        return n

    def datagram(self, data: bytes, out: dict[int, list[bytes]] | None = None) -> None:
        """A copy from the XDP broker: its publications to the local clients that want them."""
        for topic, payload, flags, extra in self.framing.decode(data):
            self.stats.received += 1
            props, origin = b"", 0
            if len(extra) >= ORIGIN_BYTES:
                props = bytes(extra[ORIGIN_BYTES:])
                if extra[:4] == self.tag:                        # published here: by which session
                    origin = int.from_bytes(extra[4:ORIGIN_BYTES], "big")
            if not self.deliver(topic, payload, flags & 3, out, props, bool(flags & TRAILER_RETAIN), origin):
                self.stats.unmatched += 1

    def deliver(self, topic: str, payload: bytes, qos: int = 0, out: dict[int, list[bytes]] | None = None,
                props: bytes = b"", retain: bool = False, origin: int = 0) -> int:
        """Hand a publication to every session with a matching filter (one copy each, at the
        lower of `qos` and the session's highest matching subscription) and to one member of
        each shared subscription group that matches: written at once, or gathered per session
        in `out` for one write each (flush()); queued for a session that is away or has its
        in-flight window full. `props`: its MQTT 5 properties (for version 5 clients);
        `retain`: published retained (kept for retain-as-published subscriptions); `origin`:
        the session that published it here (skipped by its no-local subscriptions)."""
        hits = self.trie.match(topic)
        if hits:
            packets = [b"", b""]                               # QoS 0 as 3.1.1 and as 5 write it
            expires = 0.0
            if props:
                expiry, props = _expiry(props)
                if expiry is not None:
                    expires = time.monotonic() + expiry
            for sid in hits:
                mine = props                                   # with this session's subscription ids
                if sid < 0:                                    # a shared subscription: one member
                    s, opts = self._member(sid)                # (if this edge is the group's home)
                    if s is None:
                        continue
                    q, keep_retain = min(qos, opts & 3), False
                    if opts >> SUB_ID_SHIFT:
                        mine = _sub_ids([opts >> SUB_ID_SHIFT]) + props
                else:
                    s = self.sessions.get(sid)
                    if s is None:
                        continue
                    keep_retain = False
                    if s.options:                              # no-local, retain-as-published, ids
                        skip, keep_retain, ids = self._options(s, topic, origin)
                        if skip:
                            continue
                        keep_retain = keep_retain and retain
                        if ids:
                            mine = _sub_ids(ids) + props
                    q = min(qos, s.granted(topic, self.framing.topic.flavor)) if qos else 0
                if s.denied and any(topics.matches("mqtt", d, topic) for d in s.denied):
                    continue
                if q == 0 and s.writer is not None and not mine and not expires and not keep_retain \
                        and not s.alias_max:
                    v5 = s.level == mqtt5.LEVEL                # the common case: QoS 0 to a connected client
                    packet = packets[v5]
                    if not packet:
                        wire = self._wire.get(topic)
                        if wire is None:
                            if len(self._wire) >= KNOWN_TOPICS:
                                self._wire.clear()
                            wire = self._wire[topic] = mqtt.encode_string(topic)
                        packet = packets[v5] = mqtt5.publish_wire(wire, payload) if v5 else mqtt.publish_wire(wire, payload)
                    data, always = packet, False
                else:
                    data, _ = self._send(s, Outgoing(topic, payload, q, keep_retain, props=mine, expires=expires))
                    always = q > 0                             # owed (QoS 1/2): never dropped as slow
                    if not data:
                        continue
                if out is not None and not always:
                    out.setdefault(s.sid, []).append(data)
                else:
                    self._write(s, data, 1, always)
        self.stats.delivered += len(hits)
        return len(hits)

    def _options(self, s: Session, topic: str, origin: int) -> tuple[bool, bool, list[int]]:
        """(skip it: every matching subscription is no-local and the session published it,
        keep its retain flag: a matching subscription is retain-as-published, the matching
        subscriptions' identifiers)."""
        flavor = self.framing.topic.flavor
        all_local, rap, ids = True, False, []
        for flt, opts in s.subs.items():
            if is_plain(flt) and topics.matches(flavor, flt, topic):
                all_local = all_local and bool(opts & mqtt5.NO_LOCAL)
                rap = rap or bool(opts & mqtt5.RETAIN_AS_PUBLISHED)
                if opts >> SUB_ID_SHIFT:
                    ids.append(opts >> SUB_ID_SHIFT)
        return all_local and origin == s.sid, rap, ids

    def _member(self, gid: int) -> tuple[Session | None, int]:
        """The member of a shared subscription group that gets the next publication: its
        connected members in turn; when none is connected, one that keeps a session (queued)."""
        group = self.group_ids.get(gid)
        if group is None or group.away:
            return None, 0
        sid = group.next(lambda m: (x := self.sessions.get(m)) is not None and x.writer is not None)
        if sid is None:
            sid = group.next(lambda m: m in self.sessions)
        return (self.sessions[sid], group.members[sid]) if sid is not None else (None, 0)

    def _send(self, s: Session, msg: Outgoing) -> tuple[bytes, bool]:
        """Session.send, counted, and kept in the store while a persistent session is owed it."""
        data, kept = s.send(msg, self.limits)
        self.stats.queue_dropped += not kept
        if kept and msg.qos and not s.clean and self.store is not None:
            msg.seq = self.store.owe(s.client_id, msg.topic, Kept(msg.payload, msg.qos, msg.retain, msg.props,
                                                                  _wall(msg.expires)))
        return data, kept

    def commit(self) -> None:
        """What the store was told since the last time, durable: before an acknowledgement."""
        if self.store is not None:
            self.store.commit()

    def _restore(self, store: EdgeStore) -> None:
        """The retained messages and persistent sessions a previous run kept (offline, their
        subscriptions in the trie, what they are owed queued in order)."""
        for topic, msg in store.retained().items():
            self.retained[topic] = (msg.payload, msg.qos)
            self.retained_bytes += len(msg.payload)
            if msg.props or msg.expires:
                self.retained_props[topic] = (msg.props, _monotonic(msg.expires))
        kept = store.sessions()
        now = time.monotonic()
        for client_id, st in kept.items():
            s = Session(next(self._ids), client_id, clean=False, user=st.user, paid=store.paid, level=st.level,
                        expiry=st.expiry, gone_at=now)
            self.sessions[s.sid] = s
            self.by_client[client_id] = s
            for flt, opts in st.subs.items():
                self._add_sub(s, flt, opts)
            for seq, topic, m in st.owed:
                s.queue.append(Outgoing(topic, m.payload, m.qos, m.retain, seq=seq, props=m.props,
                                        expires=_monotonic(m.expires)))
                s.queued_bytes += len(m.payload)
        if kept or self.retained:
            log.info("persistence: %d retained messages and %d persistent sessions (%d publications owed) taken back "
                     "from %s", len(self.retained), len(kept), sum(len(st.owed) for st in kept.values()), store.path)

    def flush(self, out: dict[int, list[bytes]]) -> None:
        for sid, packets in out.items():
            if (s := self.sessions.get(sid)) is not None and s.writer is not None:
                self._write(s, b"".join(packets), len(packets))

    def _write(self, s: Session, data: bytes, n: int, always: bool = False) -> None:
        """Publications to a client, unless it has stopped reading: past `SLOW_CLIENT_BYTES`
        queued for it QoS 0 ones are dropped (QoS 0 allows it) and counted, so one stalled
        subscriber cannot grow the edge broker without bound or hold up the others (QoS 1/2
        ones, `always`, are bounded by the in-flight window instead)."""
        if s.writer is None:
            return
        if always:
            s.writer.write(data)
            return
        if s.writer.transport.get_write_buffer_size() > SLOW_CLIENT_BYTES:
            if not s.stalled:
                log.warning("session %s (%s) is not reading: dropping its publications", s.sid, s.client_id)
            s.stalled = True
            self.stats.dropped += n
            s.aliases.clear()                 # a dropped one may have set a topic alias: set them again
            return
        s.stalled = False
        s.writer.write(data)

    # -- MQTT sessions (edge/connection.py speaks the protocol) -------------------------------
    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from .connection import Connection
        await Connection(self, reader, writer).run()

    def open_session(self, hello: mqtt.Connect, writer: asyncio.StreamWriter,
                     extra: mqtt5.Connect5 | None = None) -> tuple[Session, bool]:
        """The session for a client that connected (MQTT 3.1.1 3.1.2.4, 3.1.4; 5.0 3.1.2.4-5):
        a connection with the same client id is closed (takeover); a kept session is resumed
        unless the client asked for a clean one (clean session / clean start). A session ends
        with its connection when clean (3.1.1) or when its MQTT 5 session expiry is 0; a
        persistent 3.1.1 session never expires. Returns (session, session present)."""
        client_id = hello.client_id or f"camus-auto-{next(self._auto)}"
        old = self.by_client.get(client_id)
        if old is not None and old.writer is not None:
            log.info("client %r connected again: closing its old connection (takeover)", client_id)
            self.stats.taken_over += 1
            if old.level == mqtt5.LEVEL:
                old.writer.write(mqtt5.disconnect(mqtt5.SESSION_TAKEN_OVER))
            old.writer.close()
            old.writer = None
        present = old is not None and not hello.clean
        if old is not None and hello.clean:
            self.end_session(old)
            old = None
        if old is not None and old.will_timer is not None:      # back before its delayed will went
            old.will_timer.cancel()
            old.will_timer = None
        expiry = (0 if hello.clean else math.inf) if extra is None else \
            (math.inf if extra.session_expiry == 0xFFFFFFFF else extra.session_expiry)
        s = old or Session(next(self._ids), client_id)
        s.writer, s.will, s.user = writer, hello.will, hello.username
        s.level, s.expiry, s.clean = hello.level, expiry, expiry == 0
        s.aliases.clear()                                      # (topic aliases are per connection)
        s.alias_max = 0
        if extra is not None:
            s.receive_max, s.max_packet = extra.receive_maximum, extra.maximum_packet
            s.alias_max = extra.topic_alias_maximum
        if self.store is not None and not s.clean:
            s.paid = self.store.paid
            self.store.save_session(client_id, hello.username, s.level, s.expiry)
        s.keepalive, s.seen = hello.keepalive, asyncio.get_running_loop().time()
        s.denied = self.acl.denied(s.user, client_id) if self.acl is not None else ()
        self.sessions[s.sid] = s
        self.by_client[client_id] = s
        return s, present

    def sys_figures(self) -> dict[str, str]:
        """$SYS/broker/... topics and their values now: mosquitto's names for what both brokers
        count, and $SYS/broker/xdp/... for the XDP path."""
        st = self.stats
        connected = sum(1 for x in self.sessions.values() if x.writer is not None)
        figures = {
            "version": f"camus-xdp edge {_version()}",
            "uptime": f"{int(time.monotonic() - self.started)} seconds",
            "clients/connected": connected, "clients/disconnected": len(self.sessions) - connected,
            "clients/total": len(self.sessions),
            "subscriptions/count": sum(self.filters.values()) + sum(len(g.members) for g in self.groups.values()),
            "retained messages/count": len(self.retained),
            "publish/messages/sent": st.delivered, "publish/messages/dropped": st.dropped + st.queue_dropped,
            "clients/refused": st.refused, "clients/expired": st.expired, "acl/denied": st.denied,
            "xdp/published": st.published, "xdp/received": st.received, "xdp/unmatched": st.unmatched,
            "xdp/unsent": st.unsent, "tls/failed": st.tls_failed, "memory/over bound": st.over_memory,
        }
        return {f"{SYS_PREFIX}broker/{k}": str(v) for k, v in figures.items()}

    def publish_sys(self) -> int:
        """The $SYS figures that changed since the last time, retained and delivered to local
        subscribers only (never to the XDP broker); returns how many."""
        n = 0
        for topic, value in self.sys_figures().items():
            if self._sys.get(topic) != value:
                self._sys[topic] = value
                payload = value.encode()
                self.sys_retained[topic] = (payload, 0)
                self.deliver(topic, payload, 0)
                n += 1
        return n

    def reload_auth(self, passwords: Passwords | None, acl: Acl | None) -> None:
        """New password and ACL files (SIGHUP), as mosquitto reloads them: a later CONNECT is
        checked against the new users; connected clients stay, and what they may read follows
        the new ACL from now on."""
        self.passwords, self.acl = passwords, acl
        for s in self.sessions.values():
            s.denied = acl.denied(s.user, s.client_id) if acl is not None else ()

    def close_session(self, s: Session, writer: asyncio.StreamWriter, clean: bool) -> None:
        """The connection `writer` of session `s` ended (`clean`: by DISCONNECT). Its will is
        published unless it disconnected cleanly (after its MQTT 5 will delay, unless the
        client is back by then or the session ends first); a clean session ends with its
        connection, a persistent one waits, offline, for the client to come back (an MQTT 5
        one until its session expiry interval has passed: expire_sessions)."""
        if s.writer is not writer:
            return                                   # taken over: the session lives on elsewhere
        s.writer = None
        s.gone_at = time.monotonic()
        will, s.will = s.will, None
        if will is not None and not clean:
            if will.delay and not s.clean:
                s.pending_will = will
                s.will_timer = asyncio.get_running_loop().call_later(min(will.delay, s.expiry), self._will, s)
            else:
                s.pending_will = will
                self._will(s)
        if s.clean:
            self.end_session(s)

    def _will(self, s: Session) -> None:
        will, s.pending_will, s.will_timer = s.pending_will, None, None
        if will is None:
            return
        self.stats.wills += 1
        log.info("client %r gone without DISCONNECT: publishing its will on %r", s.client_id, will.topic)
        self.publish([mqtt.Publish(will.topic, will.payload, will.qos, will.retain, props=will.props)])

    def expire_sessions(self) -> int:
        """End the sessions away longer than their MQTT 5 session expiry interval; how many."""
        now = time.monotonic()
        gone = [s for s in self.sessions.values()
                if s.writer is None and s.expiry != math.inf and now - s.gone_at >= s.expiry]
        for s in gone:
            self.stats.sessions_expired += 1
            log.info("client %r: away for its session expiry interval of %g s: session ended", s.client_id, s.expiry)
            self.end_session(s)
        return len(gone)

    def end_session(self, s: Session) -> None:
        """Forget a session: a will still waiting is published now; its filters leave the trie
        and, when no other session holds them, this port's rules on the XDP broker."""
        if s.will_timer is not None:
            s.will_timer.cancel()
            self._will(s)
        self.sessions.pop(s.sid, None)
        if self.by_client.get(s.client_id) is s:
            del self.by_client[s.client_id]
        if self.store is not None and not s.clean:
            self.store.drop_session(s.client_id)
        if s.subs:
            for flt in list(s.subs):
                self.unsubscribe(s, flt)
            asyncio.get_running_loop().create_task(self.sync_quietly())

    async def sync_quietly(self) -> None:
        """sync(), its failure logged only (a session that ended; the filters taken back from
        the store at start)."""
        try:
            await self.sync()
        except Exception:
            pass                                            # logged in sync

    def subscribe(self, s: Session, flt: str, opts: int) -> None:
        """`opts`: the granted QoS, with an MQTT 5 client's subscription options (mqtt5)."""
        self._add_sub(s, flt, opts)
        if self.store is not None and not s.clean:
            self.store.save_sub(s.client_id, flt, opts)

    def _add_sub(self, s: Session, flt: str, opts: int) -> None:
        if flt not in s.subs:
            shared = shared_parts(flt)
            if shared is None:
                self.filters[flt] += 1
                self.trie.add(flt, s.sid)
            else:
                group = self.groups.get(flt)
                if group is None:
                    group = self.groups[flt] = SharedGroup(-next(self._ids), *shared)
                    self.group_ids[group.gid] = group
                    self.trie.add(group.filter, group.gid)
                group.members[s.sid] = opts
        elif flt in self.groups:
            self.groups[flt].members[s.sid] = opts
        before = s.subs.get(flt, 0) & mqtt5.NO_LOCAL
        s.subs[flt] = opts
        self.no_local += bool(opts & mqtt5.NO_LOCAL) - bool(before)
        s.options = sum(1 for o in s.subs.values() if _special(o))

    def unsubscribe(self, s: Session, flt: str) -> bool:
        """False when the session did not hold `flt`."""
        opts = s.subs.pop(flt, None)
        if opts is None:
            return False
        self.no_local -= bool(opts & mqtt5.NO_LOCAL)
        s.options = sum(1 for o in s.subs.values() if _special(o))
        group = self.groups.get(flt)
        if group is not None:                                  # declared while it has members
            group.members.pop(s.sid, None)
            if not group.members:
                del self.groups[flt], self.group_ids[group.gid]
                self.trie.remove(group.filter, group.gid)
        else:
            self.trie.remove(flt, s.sid)
            self.filters[flt] -= 1
            if self.filters[flt] <= 0:
                del self.filters[flt]
        if self.store is not None and not s.clean:
            self.store.drop_sub(s.client_id, flt)
        return True


def _wall(monotonic: float) -> float:
    """A time.monotonic() deadline as the store keeps it (wall clock; 0: none)."""
    return monotonic - time.monotonic() + time.time() if monotonic else 0.0


def _monotonic(wall: float) -> float:
    return wall - time.time() + time.monotonic() if wall else 0.0


def _expiry(props: bytes) -> tuple[int | None, bytes]:
    """A publication's message expiry and its other properties; properties that do not parse
    (a datagram not from an edge broker) are dropped."""
    try:
        return mqtt5.take_expiry(props)
    except mqtt.ProtocolError:
        return None, b""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("camus-xdp")
    except PackageNotFoundError:
        return "unknown"
