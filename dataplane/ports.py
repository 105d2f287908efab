"""The broker's logical ports: where a copy for port N goes (`attach --ports ports.yaml`).

    # ports.yaml
    1: {iface: s1-veth}                        # out of a local interface, frame unchanged
    2: {iface: eth1, mac: "02:00:00:00:00:02", ip: 10.0.0.2, udp_port: 26400}   # a subscriber endpoint
    3: local                                   # this host's own stack

Keys are the port numbers (or names) used in `fwd(...)`. A REMOTE port's copies get the
destination MAC, IP and UDP port rewritten (and the egress interface's MAC as source).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

import yaml

KIND = {"iface": 1, "remote": 2, "local": 3}


class PortsError(ValueError):
    pass


@dataclass(frozen=True)
class PortSpec:
    port: object
    kind: str                     # iface | remote | local
    iface: str | None = None
    mac: bytes = b""
    ip: str | None = None
    udp_port: int = 0

    @property
    def ifindex(self) -> int:
        return socket.if_nametoindex(self.iface) if self.iface else 0


def _mac(text: str, where: str) -> bytes:
    parts = str(text).split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise PortsError(f"{where}: bad MAC address {text!r} (expected aa:bb:cc:dd:ee:ff)")
    return bytes(int(p, 16) for p in parts)


def parse_ports(doc: object, source: str = "ports.yaml") -> dict[object, PortSpec]:
    if not isinstance(doc, dict) or not doc:
        raise PortsError(f"{source}: expected a mapping of port -> output")
    out: dict[object, PortSpec] = {}
    for key, value in doc.items():
        where = f"{source}: port {key}"
        port = key if isinstance(key, int) else str(key)
        if value == "local":
            out[port] = PortSpec(port, "local")
            continue
        if not isinstance(value, dict) or "iface" not in value:
            raise PortsError(f"{where}: expected `local` or {{iface: NAME[, mac, ip, udp_port]}}")
        iface = str(value["iface"])
        try:
            socket.if_nametoindex(iface)
        except OSError:
            raise PortsError(f"{where}: no such interface {iface!r}") from None
        extra = set(value) - {"iface", "mac", "ip", "udp_port"}
        if extra:
            raise PortsError(f"{where}: unknown keys {sorted(extra)}")
        if {"mac", "ip"} & set(value):
            if not {"mac", "ip"} <= set(value):
                raise PortsError(f"{where}: a subscriber endpoint needs both mac and ip")
            try:
                ip = str(ipaddress.IPv4Address(str(value["ip"])))
            except ValueError:
                raise PortsError(f"{where}: bad IPv4 address {value['ip']!r}") from None
            udp = int(value.get("udp_port", 0))
            if not 0 <= udp < 65536:
                raise PortsError(f"{where}: udp_port must be 0..65535 (0 keeps the feed's)")
            out[port] = PortSpec(port, "remote", iface, _mac(value["mac"], where), ip, udp)
        else:
            out[port] = PortSpec(port, "iface", iface)
    return out


def load_ports(path: str | Path) -> dict[object, PortSpec]:
    p = Path(path)
    try:
        return parse_ports(yaml.safe_load(p.read_text()), str(p))
    except OSError as exc:
        raise PortsError(f"cannot read {p}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PortsError(f"{p}: not YAML: {exc}") from None


def iface_mac(iface: str) -> bytes:
    return _mac(Path(f"/sys/class/net/{iface}/address").read_text().strip(), iface)
