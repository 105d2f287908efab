"""`camus-xdp subscribe`, `unsubscribe`, `subscriptions`: a subscriber's side of the controller's API."""
from __future__ import annotations

import json
import sys
import time

import click


def api_client(url: str, token: str, ca: str | None = None, cert: str | None = None, key: str | None = None):
    from camus.controller.client import SubscriptionClient
    from camus.controller.tls import TlsError, TlsFiles
    try:
        return SubscriptionClient(url, token, tls=TlsFiles(cert, key, ca))
    except TlsError as exc:
        raise click.BadParameter(str(exc), param_hint="--ca/--cert/--key") from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--controller") from None


common = [click.option("--controller", "url", default="http://127.0.0.1:9000", show_default=True,
                       envvar="CAMUS_CONTROLLER", help="The controller: host:port or an http(s) URL ($CAMUS_CONTROLLER)."),
          click.option("--token", required=True, envvar="CAMUS_TOKEN", help="Your token ($CAMUS_TOKEN)."),
          click.option("--ca", type=click.Path(dir_okay=False), envvar="CAMUS_CA", default=None,
                       help="For https://: the CA certificate that signed the controller's ($CAMUS_CA; "
                            "default: the system's CAs)."),
          click.option("--cert", type=click.Path(dir_okay=False), default=None,
                       help="Your client certificate, when the controller asks for one (with --key)."),
          click.option("--key", type=click.Path(dir_okay=False), default=None, help="Your client certificate's key.")]


def with_common(f):
    for opt in reversed(common):
        f = opt(f)
    return f


@click.command()
@click.argument("filter_text", metavar="FILTER")
@click.option("--ttl", type=click.FloatRange(0.1), default=30.0, show_default=True,
              help="Seconds the subscription lives unless refreshed (soft state).")
@click.option("--keep-alive", is_flag=True, help="Stay and refresh until Ctrl-C, then unsubscribe.")
@with_common
def subscribe(filter_text, ttl, keep_alive, url, token, ca, cert, key) -> None:
    """Subscribe your host to FILTER, e.g. 'stock == GOOGL and price > 50'."""
    from camus.controller.client import ServiceError
    c = api_client(url, token, ca, cert, key)
    try:
        sub = c.subscribe(filter_text, ttl)
    except (ServiceError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(sub))
    if keep_alive:
        c.keep_alive(sub["id"])
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            c.unsubscribe(sub["id"])
            click.echo(f"unsubscribed {sub['id']}", err=True)


@click.command()
@click.argument("sub_id")
@with_common
def unsubscribe(sub_id, url, token, ca, cert, key) -> None:
    """Remove one of your subscriptions."""
    from camus.controller.client import ServiceError
    try:
        click.echo(json.dumps(api_client(url, token, ca, cert, key).unsubscribe(sub_id)))
    except (ServiceError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


@click.command()
@with_common
def subscriptions(url, token, ca, cert, key) -> None:
    """List your subscriptions and their remaining TTL."""
    from camus.controller.client import ServiceError
    try:
        for s in api_client(url, token, ca, cert, key).subscriptions():
            click.echo(json.dumps(s))
    except (ServiceError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


COMMANDS: list[click.Command] = [subscribe, unsubscribe, subscriptions]
