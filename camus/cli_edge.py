"""`camus-xdp edge`: run an edge broker (edge/broker.py) in front of an XDP broker."""
from __future__ import annotations

import asyncio
import signal
import sys

import click

from camus.edge.session import Limits


def _addr(text: str, what: str) -> tuple[str, int]:
    """HOST:PORT, an IPv6 host in brackets ([::1]:1883)."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{text!r}: expected HOST:PORT (an IPv6 host in brackets: [::1]:1883)",
                                 param_hint=what)
    return host, int(port)


def _listener(text: str, tls_by_default: bool) -> tuple[str, int, bool, bool]:
    """A --listen value: [mqtt://|mqtts://|ws://|wss://]HOST:PORT; without a scheme, TLS when a
    certificate is given. Returns (host, port, TLS, WebSockets)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = ("mqtts" if tls_by_default else "mqtt"), text
    if scheme not in ("mqtt", "mqtts", "ws", "wss"):
        raise click.BadParameter(f"{text!r}: the scheme is mqtt:// (plain), mqtts:// (TLS), ws:// or wss:// "
                                 "(MQTT over WebSockets, plain or TLS)", param_hint="--listen")
    if scheme in ("mqtts", "wss") and not tls_by_default:
        raise click.BadParameter(f"{text!r}: a {scheme}:// listener needs --tls-cert and --tls-key",
                                 param_hint="--listen")
    return (*_addr(rest, "--listen"), scheme in ("mqtts", "wss"), scheme in ("ws", "wss"))


def _reload(broker, password_file: str | None, acl_file: str | None, ssl_context,  # type: ignore[no-untyped-def]
            tls_cert: str | None, tls_key: str | None) -> None:
    """SIGHUP: read the password and ACL files (and the TLS certificate) again; a file that does
    not load leaves the ones in use and says why. Connected clients stay."""
    import logging
    from camus.edge.auth import Acl, AuthFileError, Passwords
    log = logging.getLogger("camus.edge")
    try:
        passwords = Passwords(password_file) if password_file else None
        acl = Acl.load(acl_file) if acl_file else None
        if ssl_context is not None and tls_cert:
            ssl_context.load_cert_chain(tls_cert, tls_key)
    except (AuthFileError, OSError, ValueError) as exc:
        log.error("SIGHUP: not reloaded, the files in use stay: %s", exc)
        return
    broker.reload_auth(passwords, acl)
    log.warning("SIGHUP: reloaded %s", ", ".join(x for x in (password_file and f"passwords ({password_file})",
                                                           acl_file and f"ACL ({acl_file})",
                                                           tls_cert and f"certificate ({tls_cert})") if x) or "nothing to reload")


def _read_config(ctx: click.Context, _: click.Parameter, path: str | None) -> str | None:
    """--config: the file's options become the defaults the command line overrides."""
    if path:
        from camus.edge.mosquitto_conf import ConfError, read_conf
        try:
            ctx.default_map = {**(ctx.default_map or {}), **read_conf(path)}
        except ConfError as exc:
            raise click.BadParameter(str(exc), param_hint="--config") from None
    return path


@click.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), default=None, is_eager=True,
              expose_value=False, callback=_read_config,
              help="A mosquitto.conf with the options the two brokers share (listener with certfile/keyfile/"
                   "cafile/require_certificate/protocol websockets, password_file, acl_file, allow_anonymous, max_packet_size, "
                   "max_inflight_messages, max_queued_messages, max_queued_bytes, queue_qos0_messages, "
                   "sys_interval, max_keepalive, max_topic_alias, persistence with persistence_location); options "
                   "on the command line win.")
@click.option("--spec", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The spec with a topic field, e.g. apps/topics/topics.p4.")
@click.option("--topic", "topic_path", default=None, help="Which topic field (when the spec has several).")
@click.option("--listen", "listens", multiple=True, default=("127.0.0.1:1883",), show_default=True,
              help="Where MQTT clients connect (mosquitto_pub/_sub, paho-mqtt): HOST:PORT, [IPv6]:PORT; "
              "repeat it for several listeners; mqtt://... is plain and mqtts://... TLS when both kinds are "
              "served (without a scheme: TLS when --tls-cert is given); ws://HOST:PORT and wss://HOST:PORT "
              "serve MQTT over WebSockets (path /mqtt, subprotocol mqtt).")
@click.option("--feed", default=None, help="HOST:PORT of the XDP broker's feed: publications go there "
              "as labelled datagrams. Without it publications are delivered to local clients only.")
@click.option("--deliveries", default=None, help="HOST:PORT where this edge receives the XDP broker's "
              "copies (the address its logical port points to in the ports file).")
@click.option("--iface", default=None, help="The XDP broker's interface on this machine: subscriptions "
              "become its rules for --port (camus-xdp attach it first).")
@click.option("--port", "port", type=int, default=None, help="This edge's logical port on the XDP broker.")
@click.option("--batch-ms", default=20, show_default=True,
              help="Subscription changes within this window go out as one table update.")
@click.option("--batch", "batch", type=click.IntRange(1, 16), default=12, show_default=True,
              help="Publications per datagram to the XDP broker, for a spec with MoldUDP64 framing "
              "(those read together go together; no waiting). 12 is what the XDP program classifies per "
              "packet; a bigger batch would go to the broker host's stack, not to subscribers.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
              show_default=True, help="What the edge logs on stderr: refused clients, dropped publications and "
              "limits reached at warning; sessions opened, closed and expired at info.")
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Users and their hashed passwords, as mosquitto_passwd writes them (user:$7$...): a client "
              "must give one of them (CONNACK 4 for a wrong password, 5 without a user name).")
@click.option("--acl-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Which topics each user may read and write, in mosquitto's acl_file format (user NAME / topic "
              "[read|write|readwrite|deny] FILTER / pattern ... %u %c). Without it, every topic.")
@click.option("--allow-anonymous/--no-allow-anonymous", default=None,
              help="Clients without a user name may connect [default: only without --password-file].")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve MQTT over TLS with this certificate (PEM) and --tls-key (mosquitto_sub --cafile CA ...).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --tls-cert: clients must present a certificate this CA signed.")
@click.option("--max-packet", type=click.IntRange(64), default=Limits.max_packet, show_default=True,
              help="Bytes of one MQTT packet: a larger one closes its connection (logged, counted) before "
              "any of it is kept.")
@click.option("--max-buffered", type=click.IntRange(1 << 16), default=Limits.max_buffered, show_default=True,
              help="Bytes of unfinished packets of all clients together (slow or partial publishers): the "
              "connection that would pass it is closed.")
@click.option("--sys-interval", type=click.FloatRange(0), default=10.0, show_default=True,
              help="Seconds between updates of the $SYS/broker/... topics (clients, subscriptions, retained, "
              "messages, the XDP path's figures), retained and local to this edge; 0: none.")
@click.option("--packet-timeout", type=click.FloatRange(0.1), default=Limits.packet_timeout, show_default=True,
              help="Seconds from a packet's first byte to its last: a publisher stalled mid-packet is closed and "
              "its bytes let go (with --max-buffered, stalled clients cannot starve the others).")
@click.option("--max-inflight", type=click.IntRange(1, 65535), default=Limits.max_inflight, show_default=True,
              help="QoS 1/2 publications sent to one client and not yet acknowledged.")
@click.option("--max-queued", type=click.IntRange(0), default=Limits.max_queued, show_default=True,
              help="Publications queued for one client (away, or its in-flight window full); newer ones are "
              "dropped, logged and counted.")
@click.option("--max-queued-bytes", type=click.IntRange(0), default=Limits.max_queued_bytes, show_default=True,
              help="Payload bytes queued for one client.")
@click.option("--queue-qos0/--no-queue-qos0", default=Limits.queue_qos0, show_default=True,
              help="Queue QoS 0 publications for a persistent session whose client is away.")
@click.option("--max-retained-bytes", type=click.IntRange(0), default=Limits.max_retained_bytes, show_default=True,
              help="Payload bytes of all retained messages; past it new ones are sent on but not kept.")
@click.option("--max-keepalive", type=click.IntRange(0, 65535), default=Limits.max_keepalive, show_default=True,
              help="MQTT 5 clients asking a longer keep-alive (or none) are told this one in CONNACK.")
@click.option("--max-topic-alias", type=click.IntRange(0, 65535), default=Limits.topic_alias_max, show_default=True,
              help="Topic aliases an MQTT 5 publisher may set on one connection (0: none).")
@click.option("--persistence", "persistence", type=click.Path(file_okay=False), default=None,
              help="Keep retained messages and persistent sessions (subscriptions, owed QoS 1/2 publications) "
                   "in DIR/camus-edge.db across restarts and kill -9 (mosquitto's persistence_location).")
def edge(spec: str, topic_path: str | None, listens: tuple[str, ...], feed: str | None, deliveries: str | None,
         iface: str | None, port: int | None, batch_ms: int, batch: int, log_level: str,
         password_file: str | None, acl_file: str | None, allow_anonymous: bool | None, tls_cert: str | None,
         tls_key: str | None, tls_ca: str | None, max_packet: int, max_buffered: int, sys_interval: float,
         packet_timeout: float, max_inflight: int,
         max_queued: int, max_queued_bytes: int, queue_qos0: bool, max_retained_bytes: int,
         max_keepalive: int, max_topic_alias: int, persistence: str | None) -> None:
    """Run an edge broker: unmodified MQTT 3.1.1 and MQTT 5 clients publish and subscribe here;
    the XDP broker does the matching and the fan-out between edge brokers. What a mosquitto
    user relies on works: wills, keep-alive, session takeover, persistent sessions (queued and
    re-sent QoS 1/2 publications), retained messages, mosquitto's password and ACL files, TLS;
    and MQTT 5's properties, reason codes, session and message expiry, topic aliases,
    subscription options and shared subscriptions ($share/GROUP/FILTER, one member each
    publication, across edge brokers too). Enhanced authentication is refused (0x8C).

    \b
    On the XDP host (after `camus-xdp attach IFACE --spec apps/topics/topics.p4 ...`):
      camus-xdp edge --spec apps/topics/topics.p4 --listen 0.0.0.0:1883 \\
          --feed 10.0.0.2:9200 --deliveries 0.0.0.0:9201 --iface IFACE --port 1
      mosquitto_sub -t 'plant/+/temp'      mosquitto_pub -t plant/7/temp -m 81

    Subscribing answers (SUBACK) once the XDP tables hold the filter; on exit this
    edge's rules are taken out again.
    """
    from camus.compiler.language.errors import CompileError, CompileErrors
    from camus.compiler.language.spec_parser import load_spec
    from camus.edge.broker import EdgeBroker, Framing
    from camus.edge.server import serve
    from camus.edge.framing import mismatch
    from camus.edge.rules_sink import LocalSink
    import logging
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    if (iface is None) != (port is None):
        raise click.UsageError("--iface and --port go together (this edge's port on IFACE)")
    try:
        framing = Framing(load_spec(spec), topic_path, batch)
    except (CompileError, CompileErrors, ValueError, KeyError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    sink = None
    if iface:                 # fail now, not at the first SUBSCRIBE
        from camus.dataplane import installed as state
        from camus.dataplane.program import DataplaneError
        try:
            inst = state.load_installed(iface)
        except DataplaneError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        attached = load_spec(inst.spec)
        if not attached.topics:
            click.echo(f"error: {iface} was attached with {inst.spec}, which has no topic field", err=True)
            sys.exit(1)
        if (why := mismatch(framing.spec, attached)) is not None:
            click.echo(f"error: {iface} was attached with {inst.spec}, which does not read what this edge "
                       f"sends: {why} (give both the same spec)", err=True)
            sys.exit(1)
        sink = LocalSink(iface)
    from camus.controller.tls import TlsError, TlsFiles, server_context
    from camus.edge.auth import Acl, AuthFileError, Passwords
    try:
        passwords = Passwords(password_file) if password_file else None
        acl = Acl.load(acl_file) if acl_file else None
        ssl_context = None
        if tls_cert or tls_key or tls_ca:
            files = TlsFiles(tls_cert, tls_key, tls_ca)
            ssl_context = server_context(files, require_client=tls_ca is not None)
    except (AuthFileError, TlsError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    limits = Limits(max_packet=max_packet, max_inflight=max_inflight, max_queued=max_queued,
                    max_queued_bytes=max_queued_bytes, queue_qos0=queue_qos0,
                    max_retained_bytes=max_retained_bytes, max_buffered=max_buffered,
                    packet_timeout=packet_timeout, max_keepalive=max_keepalive, topic_alias_max=max_topic_alias)
    store = None
    if persistence:
        from camus.edge.store import EdgeStore, StoreError
        try:
            store = EdgeStore(persistence)
        except StoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    broker = EdgeBroker(framing, _addr(feed, "--feed") if feed else None, port, sink, batch_ms / 1000, limits,
                        passwords, acl, allow_anonymous, store)
    broker.sys_interval = sys_interval
    places = [_listener(x, ssl_context is not None) for x in listens]
    back = _addr(deliveries, "--deliveries") if deliveries else None
    said = ", ".join(f"{('wss' if tls else 'ws') if ws else ('mqtts' if tls else 'mqtt')}://"
                     f"{f'[{h}]' if ':' in h else h}:{p}{'/mqtt' if ws else ''}" for h, p, tls, ws in places)
    tcp = [(h, p, ssl_context if t else None) for h, p, t, ws in places if not ws]
    websockets = [(h, p, ssl_context if t else None) for h, p, t, ws in places if ws]
    if not tcp:
        raise click.BadParameter("at least one MQTT listener over TCP (mqtt:// or mqtts://) beside WebSocket ones",
                                 param_hint="--listen")

    async def run() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)    # type: ignore[union-attr]
        loop.add_signal_handler(signal.SIGHUP, _reload, broker, password_file, acl_file, ssl_context, tls_cert,
                                tls_key)
        ready = asyncio.Event()
        (host, port_, first_tls), rest = tcp[0], tcp[1:]
        server = asyncio.create_task(serve(broker, (host, port_), back, ready, first_tls, rest, websockets))
        await ready.wait()
        click.echo(f"edge broker: MQTT on {said}" + (f", feed {feed}" if feed else "") +
                   (f", copies on {deliveries}" if deliveries else "") +
                   (f", port {port} on {iface}" if iface else ""), err=True)
        try:
            await server
        except asyncio.CancelledError:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)

    asyncio.run(run())
    st = broker.stats
    click.echo(f"published {st.published}, received {st.received}, delivered {st.delivered}, "
               f"unmatched {st.unmatched}, rejected {st.rejected}, dropped (clients not reading) {st.dropped}, "
               f"unsent (feed refused) {st.unsent}, refused clients {st.refused}, denied by ACL {st.denied}, "
               f"wills {st.wills}, keep-alive expiries {st.expired}, takeovers {st.taken_over}, "
               f"too large {st.too_large}, over the memory bound {st.over_memory}, not queued (queue full) "
               f"{st.queue_dropped}, not retained {st.not_retained}, failed TLS handshakes {st.tls_failed}, "
               f"stalled packets {st.stalled}", err=True)


COMMANDS: list[click.Command] = [edge]
