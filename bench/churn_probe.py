"""churn_bench's API latency probe, a process of its own at normal priority:

    python bench/churn_probe.py URL TOKEN SECONDS [CA]

subscribes and unsubscribes PROBE_RATE times a second, each call timed alone over one kept-alive
connection (as the load's clients use: with TLS it times requests, not handshakes), and prints
one JSON line with the times in ms."""
from __future__ import annotations

import json
import sys
import time

PROBE_RATE = 20.0                                        # the probe's calls per second


def probe(url: str, token: str, seconds: float, ca: str | None) -> int:
    import http.client
    import urllib.parse

    from camus.controller.tls import TlsFiles, client_context
    where = urllib.parse.urlsplit(url)
    conn = (http.client.HTTPSConnection(where.hostname or "", where.port, context=client_context(TlsFiles(ca=ca)))
            if ca else http.client.HTTPConnection(where.hostname or "", where.port))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(method: str, path: str, body: bytes | None = None) -> dict:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
        return json.loads(data)
    times: list[float] = []
    next_at, stop = time.monotonic(), time.monotonic() + seconds
    while time.monotonic() < stop:
        next_at += 1 / PROBE_RATE
        time.sleep(max(0.0, next_at - time.monotonic()))
        t0 = time.perf_counter()
        sub = call("POST", "/v1/subscriptions", b'{"filter": "stock == PROBE and price > 1", "ttl": 600}')
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        call("DELETE", f"/v1/subscriptions/{sub['id']}")
        times.append(time.perf_counter() - t0)
    print(json.dumps([round(t * 1e3, 3) for t in times]))
    return 0


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None))
