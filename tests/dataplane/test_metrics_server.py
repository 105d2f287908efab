"""The metrics server (`camus-xdp metrics`): /metrics only (404 elsewhere), a client that never
sends its request is dropped after the request timeout, and no family puts a total beside its
parts under one label (Prometheus's naming guide: `sum` over any label means something). No
root: with nothing attached the families are empty but served."""
from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from camus.dataplane import metrics
from camus.dataplane.report import STAT_INFO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_only_on_their_path_and_idle_clients_are_dropped(monkeypatch) -> None:
    monkeypatch.setattr(metrics._Handler, "timeout", 1)
    port = _free_port()
    server, thread = metrics.serve("127.0.0.1", port)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        list(text_string_to_metric_families(body))                   # parses
        for path in ("/", "/nope", "/metrics/x"):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30)
            assert exc.value.code == 404
        with socket.create_connection(("127.0.0.1", port), timeout=60) as idle:
            idle.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")       # never finishes its headers
            t0 = time.monotonic()
            while idle.recv(1024):                                       # until the server closes it
                pass
            assert time.monotonic() - t0 < 30
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


def test_one_metric_per_counter_never_a_total_beside_its_parts() -> None:
    names = {metrics.counter_metric(c) for c in STAT_INFO}
    assert len(names) == len(STAT_INFO)                                # one family each
    assert metrics.counter_metric("packets") == "camus_xdp_packets"
    assert metrics.counter_metric("no_match") == "camus_xdp_no_match_packets"
    assert metrics.counter_metric("explicit_drop") == "camus_xdp_explicit_drop_messages"
    assert metrics.rule_id("price > 5 : fwd(1)") == metrics.rule_id("price > 5 : fwd(1)") != metrics.rule_id("x")
