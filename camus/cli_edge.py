"""`camus-xdp edge`: run an edge broker (edge/broker.py) in front of an XDP broker."""
from __future__ import annotations

import asyncio
import signal
import sys

import click


def _addr(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{text!r}: expected HOST:PORT", param_hint=what)
    return host, int(port)


@click.command()
@click.option("--spec", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The spec with a topic field, e.g. apps/topics/topics.p4.")
@click.option("--topic", "topic_path", default=None, help="Which topic field (when the spec has several).")
@click.option("--listen", default="127.0.0.1:1883", show_default=True,
              help="Where MQTT clients connect (mosquitto_pub/_sub, paho-mqtt).")
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
              show_default=True, help="What the edge logs on stderr (dropped publications at warning).")
def edge(spec: str, topic_path: str | None, listen: str, feed: str | None, deliveries: str | None,
         iface: str | None, port: int | None, batch_ms: int, batch: int, log_level: str) -> None:
    """Run an edge broker: unmodified MQTT 3.1.1 clients publish and subscribe here; the
    XDP broker does the matching and the fan-out between edge brokers.

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
    from camus.edge.broker import EdgeBroker, Framing, serve
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
    broker = EdgeBroker(framing, _addr(feed, "--feed") if feed else None, port, sink, batch_ms / 1000)
    where = _addr(listen, "--listen")
    back = _addr(deliveries, "--deliveries") if deliveries else None

    async def run() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)    # type: ignore[union-attr]
        ready = asyncio.Event()
        server = asyncio.create_task(serve(broker, where, back, ready))
        await ready.wait()
        click.echo(f"edge broker: MQTT on {listen}" + (f", feed {feed}" if feed else "") +
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
               f"unsent (feed refused) {st.unsent}", err=True)


COMMANDS: list[click.Command] = [edge]
