"""`camus-xdp subscribe`, `unsubscribe`, `subscriptions`: a subscriber's side of the controller's API."""
from __future__ import annotations

import json
import sys
import time

import click


def _client(url: str, token: str):
    from camus.controller.client import SubscriptionClient
    try:
        return SubscriptionClient(url, token)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--controller") from None


common = [click.option("--controller", "url", default="http://127.0.0.1:9000", show_default=True,
                       help="The controller: host:port or an http(s) URL."),
          click.option("--token", required=True, envvar="CAMUS_TOKEN", help="Your token ($CAMUS_TOKEN).")]


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
def subscribe(filter_text, ttl, keep_alive, url, token) -> None:
    """Subscribe your host to FILTER, e.g. 'stock == GOOGL and price > 50'."""
    from camus.controller.client import ServiceError
    c = _client(url, token)
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
def unsubscribe(sub_id, url, token) -> None:
    """Remove one of your subscriptions."""
    from camus.controller.client import ServiceError
    try:
        click.echo(json.dumps(_client(url, token).unsubscribe(sub_id)))
    except (ServiceError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


@click.command()
@with_common
def subscriptions(url, token) -> None:
    """List your subscriptions and their remaining TTL."""
    from camus.controller.client import ServiceError
    try:
        for s in _client(url, token).subscriptions():
            click.echo(json.dumps(s))
    except (ServiceError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


COMMANDS: list[click.Command] = [subscribe, unsubscribe, subscriptions]
