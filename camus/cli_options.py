"""Options and names the data-plane commands share, in a module light enough for `update`'s
path through a host agent (which must not import the compiler)."""
from __future__ import annotations

import click

ALLOW_EMPTY = click.option("--allow-empty", is_flag=True,
                           help="Accept a rules file with no rules (the data plane then drops the whole feed).")

APP_OPTION = click.option("--app", "app", default=None, metavar="NAME",
                          help="On an interface serving several apps: which one.")


def unit_of(iface: str, app: str | None) -> str:
    """The unit a command names: IFACE, or IFACE@APP for one of several apps."""
    return f"{iface}@{app}" if app else iface
