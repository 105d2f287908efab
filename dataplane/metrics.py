"""Prometheus metrics of every attached unit, read from the pinned maps at each scrape
(`camus-xdp metrics --listen ADDR`): the classifier's counters by unit (packets and messages
apart), copies per port, messages per counted rule, the interface's kernel receive counters
(drops before XDP ran) and one info series per unit naming its XDP program. Families and labels
are listed in README, "Operating camus-xdp"."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from . import counting, netdev, report, runtime
from .installed import installed
from .netlink import interface_exists
from .program import DataplaneError

log = logging.getLogger("camus.metrics")


class UnitCollector(Collector):
    """One scrape: every unit's counters as they are now (no state kept between scrapes)."""

    def collect(self) -> Iterator[Any]:
        packets = CounterMetricFamily("camus_xdp_packets", "Packets the XDP classifier counted, by counter "
                                      "(packets, other, malformed, no_match, deliver, ...)", labels=["unit", "counter"])
        messages = CounterMetricFamily("camus_xdp_messages", "Messages the XDP classifier counted, by counter "
                                       "(messages, explicit_drop, bypassed)", labels=["unit", "counter"])
        copies = CounterMetricFamily("camus_xdp_port_copies", "Copies sent to each forwarding port",
                                     labels=["unit", "port"])
        rules = CounterMetricFamily("camus_xdp_rule_messages", "Messages each counted rule matched",
                                    labels=["unit", "rule"])
        kernel = CounterMetricFamily("camus_xdp_interface_receive", "The interface's kernel receive counters "
                                     "(rx_dropped, rx_missed_errors: dropped before XDP ran)", labels=["iface", "counter"])
        info = GaugeMetricFamily("camus_xdp_unit_info", "An attached unit and its XDP program (value 1)",
                                 labels=["unit", "iface", "mode", "prog_id", "prog_tag"])
        rule_count = GaugeMetricFamily("camus_xdp_rules", "Rules the unit serves", labels=["unit"])
        ifaces: set[str] = set()
        for inst in installed():
            unit = inst.unit
            try:
                counters = runtime.stats(unit)
                counted = counting.rule_counts(unit)
            except (DataplaneError, OSError) as exc:       # detached between listing and reading
                log.warning("%s: counters not readable: %s", unit, exc)
                continue
            groups = report.grouped(counters)
            for name, n in groups["packets"].items():
                packets.add_metric([unit, name], n)
            for name, n in groups["messages"].items():
                messages.add_metric([unit, name], n)
            for port, n in groups["port_copies"].items():
                copies.add_metric([unit, port], n)
            for text, n in counted:
                rules.add_metric([unit, text], n)
            up = interface_exists(inst.iface)
            prog = report.unit_status(inst, None, up)["program"] if up else None
            info.add_metric([unit, inst.iface, inst.mode, str(prog["id"]) if prog else "",
                             prog["tag"] if prog else ""], 1)
            rule_count.add_metric([unit], len(inst.rule_lines))
            if up:
                ifaces.add(inst.iface)
        for iface in sorted(ifaces):
            for name, n in (netdev.receive_counters(iface) or {}).items():
                kernel.add_metric([iface, name], n)
        yield from (packets, messages, copies, rules, kernel, info, rule_count)


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(UnitCollector())
    return reg


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT or :PORT (all addresses) or PORT."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, :PORT or PORT")
    return host.strip("[]") or "0.0.0.0", int(port)
