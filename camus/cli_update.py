"""`camus-xdp update`: new rules on an attached interface. When a host agent holds the interface
(`camus-xdp agent`), the rules file is handed to it over its Unix socket and it applies the
changed lines through the live classifier it keeps in memory (milliseconds; this process imports
nothing of the compiler). Otherwise the update runs here (cli_dataplane.run_update)."""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import click

from camus.cli_options import ALLOW_EMPTY, APP_OPTION, unit_of

AGENT_SOCKETS = Path("/run/camus")     # dataplane/installed.STATE_ROOT; controller/agent.local_socket
AGENT_TIMEOUT_S = 3600                 # a whole write of millions of rules through the agent


def _post(path: Path, route: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    """One HTTP/1.0 request over a Unix socket: (status, body). (http.client would add a fifth
    of this command's time in imports.)"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(f"POST {route} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    head, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), payload
    except (IndexError, ValueError):
        raise OSError(f"not an HTTP answer: {head[:80]!r}") from None


def via_agent(unit: str, rules: str) -> dict[str, Any] | None:
    """The agent holding `unit` applies the file: what changed; None when no agent listens (no
    socket, or a dead agent's). Exits with the agent's error when it refuses the rules."""
    path = AGENT_SOCKETS / f"{unit}.agent"
    if "/" in unit or not path.is_socket():
        return None
    try:
        status, payload = _post(path, "/v1/local/update", json.dumps({"rules": os.path.abspath(rules)}).encode(),
                                AGENT_TIMEOUT_S)
        doc = json.loads(payload or b"{}")
    except (ConnectionRefusedError, FileNotFoundError):
        return None                            # its agent is gone: the unit is free for this process
    except (OSError, ValueError) as exc:
        click.echo(f"error: the host agent holding {unit} did not answer ({exc})", err=True)
        sys.exit(1)
    if status != 200:
        error = str(doc.get("error", f"HTTP {status}"))
        click.echo(error if status == 422 else f"error: {error}", err=True)   # 422: the rules, with positions
        sys.exit(1)
    doc["agent"] = True
    return doc


def say_update(unit: str, doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"schema": 1, "unit": unit, "written": doc["written"], "grown": doc.get("grown", False),
                               "path": doc["path"], "ms": doc["ms"], "added": doc["added"],
                               "removed": doc["removed"], "old_entries": doc.get("old_entries"),
                               "new_entries": doc.get("new_entries"), "agent": doc.get("agent", False)}))
        return
    if not doc["written"]:
        click.echo(f"{unit} unchanged: these rules compile to the tables already live; nothing written")
        return
    how = {"delta": " as a delta", "live": " (whole set; later updates are deltas)",
           "whole": " (whole set)"}.get(doc["path"], "")
    by = " by its host agent" if doc.get("agent") else ""
    states = (f"; states {doc['old_entries']} -> {doc['new_entries']}"
              if doc.get("old_entries") is not None else "")
    click.echo(f"updated {unit}{how}{by} in {doc['ms']:.0f} ms: +{len(doc['added'])} -{len(doc['removed'])} "
               f"rules{states}")
    if doc.get("summary"):
        click.echo(f"  {doc['summary']}")
    if doc.get("grown"):
        click.echo("  the rules outgrew the program: a larger one took over (no gap in filtering)")
    for line in doc["added"][:20]:
        click.echo(f"  + {line}")
    for line in doc["removed"][:20]:
        click.echo(f"  - {line}")


@click.command()
@click.argument("iface")
@click.option("--rules", required=True, type=click.Path(exists=True, dir_okay=False))
@APP_OPTION
@ALLOW_EMPTY
@click.option("--json", "as_json", is_flag=True, help="One JSON object: what changed (schema in docs/hosts.md).")
def update(iface: str, rules: str, app: str | None, allow_empty: bool, as_json: bool) -> None:
    """Replace the rules on IFACE (or its app NAME) atomically (no reload); prints what changed.

    Only what the file's changed lines change is written (a delta: the states they touch, then
    one root write), from the live state `attach` and each update leave in /run/camus; without it
    (another writer, a crash, a new release) the whole set is written once and it is saved again.
    Rules that outgrow the program attach sized (its maps, with room to spare) get a larger
    program, swapped in without a gap in filtering; counters carry over. While a host agent
    (`camus-xdp agent IFACE`) holds IFACE, the file goes to the agent, which applies the changed
    lines from the tables it keeps in memory (milliseconds at 100K rules)."""
    unit = unit_of(iface, app)
    doc = via_agent(unit, rules)
    if doc is None:
        from camus.cli_dataplane import run_update
        doc = run_update(unit, rules, allow_empty)
    say_update(unit, doc, as_json)


COMMANDS: list[click.Command] = [update]
