"""Prometheus metrics of every attached unit, read from the pinned maps at each scrape
(`camus-xdp metrics --listen ADDR`), named as Prometheus's naming guide asks: one metric per
classifier counter (a total is never a label value beside its parts, so `sum` over any label of
any family means something), copies per port, messages per counted rule (the rule by a stable
id, its text in one info series), the interface's kernel receive counters (drops before XDP
ran), one info series per unit naming its XDP program. The server answers /metrics only (404
elsewhere) and gives a client a bounded time to send its request. Families and labels are listed
in docs/hosts.md, "Metrics"."""
from __future__ import annotations

import hashlib
import logging
import socket
import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from . import counting, netdev, report, runtime
from .installed import installed
from .netlink import interface_exists
from .program import DataplaneError

log = logging.getLogger("camus.metrics")

METRICS_PATH = "/metrics"
REQUEST_TIMEOUT_S = 10          # a client that has not sent its request by then is dropped


def counter_metric(counter: str) -> str:
    """The metric of one classifier counter: camus_xdp_packets (the total of its kind),
    camus_xdp_no_match_packets, camus_xdp_explicit_drop_messages, ... (exposed with _total)."""
    kind = report.STAT_INFO[counter][0]
    return f"camus_xdp_{kind}" if counter == kind else f"camus_xdp_{counter}_{kind}"


def rule_id(text: str) -> str:
    """A counted rule's label: stable while the rule's text is (its position is not: an update
    may insert rules before it), short, and the same on every host."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class UnitCollector(Collector):
    """One scrape: every unit's counters as they are now (no state kept between scrapes)."""

    def collect(self) -> Iterator[Any]:
        families: dict[str, CounterMetricFamily] = {}

        def counter(name: str, what: str) -> CounterMetricFamily:
            fam = families.get(name)
            if fam is None:
                fam = families[name] = CounterMetricFamily(name, what, labels=["unit"])
            return fam

        copies = CounterMetricFamily("camus_xdp_port_copies", "Copies sent to each forwarding port",
                                     labels=["unit", "port"])
        rules = CounterMetricFamily("camus_xdp_rule_messages", "Messages each counted rule matched (the rule by "
                                    "id: camus_xdp_rule_info has its text)", labels=["unit", "rule"])
        rule_info = GaugeMetricFamily("camus_xdp_rule_info", "A counted rule's text (value 1)",
                                      labels=["unit", "rule", "text"])
        kernel: dict[str, CounterMetricFamily] = {}
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
            for name, n in (*groups["packets"].items(), *groups["messages"].items()):
                counter(counter_metric(name), report.STAT_INFO[name][1]).add_metric([unit], n)
            for port, n in groups["port_copies"].items():
                copies.add_metric([unit, port], n)
            for text, n in counted:
                rules.add_metric([unit, rule_id(text)], n)
                rule_info.add_metric([unit, rule_id(text), text], 1)
            up = interface_exists(inst.iface)
            prog = report.unit_status(inst, None, up)["program"] if up else None
            info.add_metric([unit, inst.iface, inst.mode, str(prog["id"]) if prog else "",
                             prog["tag"] if prog else ""], 1)
            rule_count.add_metric([unit], len(inst.rule_lines))
            if up:
                ifaces.add(inst.iface)
        for iface in sorted(ifaces):
            for name, n in (netdev.receive_counters(iface) or {}).items():
                fam = kernel.get(name)
                if fam is None:
                    fam = kernel[name] = CounterMetricFamily(
                        f"camus_xdp_interface_{name}", f"The interface's kernel {name} counter (drops here "
                        "happened before XDP ran)", labels=["iface"])
                fam.add_metric([iface], n)
        yield from (*(families[k] for k in sorted(families)), copies, rules, rule_info,
                    *(kernel[k] for k in sorted(kernel)), info, rule_count)


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


def metrics_only(app: Callable[..., Any]) -> Callable[..., Any]:
    """The exporter's WSGI app on /metrics; 404 on every other path."""
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO", "") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: the metrics are at {METRICS_PATH}\n".encode()]
        return app(environ, start_response)
    return serve


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S          # socket timeout while the request line, headers and body arrive

    def log_message(self, format: str, *args: Any) -> None:     # noqa: A002  (the base class's name)
        log.debug("%s %s", self.address_string(), format % args)


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve(host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve the metrics in a thread; the caller shuts the server down."""
    server = make_server(host, port, metrics_only(make_wsgi_app(registry())),
                         server_class=_Server6 if ":" in host else _Server, handler_class=_Handler)
    thread = threading.Thread(target=server.serve_forever, name="camus-metrics", daemon=True)
    thread.start()
    return server, thread
