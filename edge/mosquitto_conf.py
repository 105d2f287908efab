"""A mosquitto.conf for `camus-xdp edge --config`: the options the two brokers share, read in
mosquitto's own format, so a mosquitto user brings the file they have.

Each line is `option value...`; `#` starts a comment. `listener PORT [ADDRESS]` opens a listener
(every address when none is given); `certfile`, `keyfile` and `cafile` after it make it a TLS
listener (mosquitto's per-listener TLS; the edge serves one certificate, so every TLS listener
must name the same files); `require_certificate true` with `cafile` asks clients for theirs
(the edge asks exactly when it has their CA); `protocol websockets` makes it MQTT over WebSockets.
The rest are global. An option the edge does not have, or one it does not take in this form, is
refused with its line: the file is read whole or not at all. Options given on the command line win over the file's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


class ConfError(ValueError):
    """A line of the file the edge cannot take (the message names the file and the line)."""


def _bool(value: str) -> bool:
    if value not in ("true", "false"):
        raise ValueError("true or false")
    return value == "true"


def _count(value: str) -> int:
    n = int(value)
    if n < 0:
        raise ValueError("a count of 0 or more")
    return n


# mosquitto option -> (the edge's parameter, how its value is read)
GLOBAL: dict[str, tuple[str, Any]] = {
    "password_file": ("password_file", str),
    "acl_file": ("acl_file", str),
    "allow_anonymous": ("allow_anonymous", _bool),
    "max_packet_size": ("max_packet", _count),
    "max_inflight_messages": ("max_inflight", _count),
    "max_queued_messages": ("max_queued", _count),
    "max_queued_bytes": ("max_queued_bytes", _count),
    "queue_qos0_messages": ("queue_qos0", _bool),
    "sys_interval": ("sys_interval", float),
    "max_keepalive": ("max_keepalive", _count),
    "max_topic_alias": ("max_topic_alias", _count),
    "persistence": ("persist", _bool),                  # with persistence_location: --persistence DIR
    "persistence_location": ("persistence_location", str),
}
TLS_FILES = {"certfile": "tls_cert", "keyfile": "tls_key", "cafile": "tls_ca"}
# mosquitto options that change nothing here (logging goes to the edge's own log)
IGNORED = {"log_dest", "log_type", "log_timestamp", "connection_messages", "per_listener_settings",
           "autosave_interval", "autosave_on_changes"}   # the edge's store commits every change


def read_conf(path: str) -> dict[str, Any]:
    """The edge's parameters (click names) the file sets. Raises ConfError naming the line."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfError(f"{path}: {exc}") from None
    out: dict[str, Any] = {}
    listeners: list[tuple[str, int]] = []
    tls_listeners: set[int] = set()
    ws_listeners: set[int] = set()          # `protocol websockets`
    tls: dict[str, str] = {}
    required = False
    for number, raw in enumerate(lines, 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        key, args = words[0], words[1:]
        where = f"{path}:{number}"
        try:
            if key in ("listener", "port"):
                if not 1 <= len(args) <= (2 if key == "listener" else 1):
                    raise ValueError(f"{key} PORT" + (" [ADDRESS]" if key == "listener" else ""))
                port = int(args[0])
                if not 0 < port < 65536:
                    raise ValueError("a port from 1 to 65535")
                listeners.append((args[1] if len(args) > 1 else "0.0.0.0", port))
            elif key == "protocol":
                if not listeners:
                    raise ValueError("protocol belongs to a listener: put it after a `listener` line")
                if args not in (["mqtt"], ["websockets"]):
                    raise ValueError("protocol mqtt or protocol websockets")
                if args == ["websockets"]:
                    ws_listeners.add(len(listeners) - 1)
            elif key in TLS_FILES or key == "require_certificate":
                if not listeners:
                    raise ValueError(f"{key} belongs to a listener: put it after a `listener` line")
                if len(args) != 1:
                    raise ValueError(f"{key} takes one value")
                if key == "require_certificate":
                    required = required or _bool(args[0])
                    continue
                if tls.setdefault(key, args[0]) != args[0]:
                    raise ValueError(f"the edge serves one certificate: every TLS listener names the same {key} "
                                     f"({tls[key]})")
                tls_listeners.add(len(listeners) - 1)
            elif key in GLOBAL:
                if len(args) != 1:
                    raise ValueError(f"{key} takes one value")
                name, read = GLOBAL[key]
                out[name] = read(args[0])
            elif key in IGNORED:
                continue
            else:
                known = sorted([*GLOBAL, *TLS_FILES, "listener", "port", "protocol", "require_certificate"])
                raise ValueError(f"`{key}` is not an option camus-xdp edge takes (it takes: {', '.join(known)})")
        except ValueError as exc:
            raise ConfError(f"{where}: {raw.strip()}: {exc}") from None
    if tls and ("certfile" not in tls or "keyfile" not in tls):
        raise ConfError(f"{path}: a TLS listener needs both certfile and keyfile")
    if required != ("cafile" in tls):       # the edge asks for client certificates exactly when it has a CA
        raise ConfError(f"{path}: the edge asks clients for certificates exactly when it has their CA: give "
                        "cafile with require_certificate true, or neither")
    for k, v in tls.items():
        out[TLS_FILES[k]] = v
    persist, where = out.pop("persist", False), out.pop("persistence_location", None)
    if persist:                            # mosquitto's default location: the directory it runs in
        out["persistence"] = where or "."
    if listeners:
        scheme = {(False, False): "mqtt", (True, False): "mqtts", (False, True): "ws", (True, True): "wss"}
        out["listens"] = tuple(f"{scheme[i in tls_listeners, i in ws_listeners]}://"
                               f"{f'[{h}]' if ':' in h else h}:{p}" for i, (h, p) in enumerate(listeners))
    return out
