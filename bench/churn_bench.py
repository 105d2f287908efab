"""Subscription churn through the controller's HTTP API, measured: how long a subscribe or
unsubscribe call takes to answer, and how long until the switch holds the change (its
`applied_version` in /v1/status reaches the version the call answered with).

    python bench/churn_bench.py [-n 1000 -n 10000] [--clients 8] [--seconds 20]

Per size: N ITCH subscriptions already live (one leaf switch, three hosts; the switch is the
software P4Runtime switch in its own process, written over gRPC), then `--clients` API clients
for `--seconds`, each alternately subscribing and unsubscribing a filter of its own as fast as
its calls return. The controller compiles off the request path, a burst of changes together.
The last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"
sys.path.insert(0, str(ROOT / "bench"))
from p4rt_bench import SERVER  # noqa: E402   the P4Runtime switch process


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def measure(n: int, clients: int, seconds: float) -> dict:
    from aiohttp import web

    from camus.compiler.language.spec_parser import load_spec
    from camus.controller.client import SubscriptionClient
    from camus.controller.core import Controller, Subscription
    from camus.controller.service import make_app
    from camus.controller.targets import P4RuntimeTarget
    from camus.controller.topology import Topology

    sw_port, api_port = _port(), _port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(SPEC), f"127.0.0.1:{sw_port}"],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    t = Topology("churn")
    t.add_device("sw", "p4", "edge")
    hosts = [f"h{i}" for i in range(1, 4)]
    for i, h in enumerate(hosts, start=1):
        t.add_device(h, "host")
        t.add_link("sw", h, i, 1)
    ctl = Controller(t, load_spec(SPEC), "mr", targets={"sw": P4RuntimeTarget(f"127.0.0.1:{sw_port}", timeout=60)})
    rng = random.Random(1)
    for i in range(n):                                   # the live set, before the API opens
        sid = f"s{i + 1_000_000}"
        ctl.subs[sid] = Subscription(sid, rng.choice(hosts), f"stock == S{rng.randrange(100)} and price > "
                                     f"{rng.randint(1, 999)}", 3600, time.monotonic() + 3600)
    ctl.recompute()
    ctl.push_pending()
    ctl.deferred = True
    tokens = {f"tok{i}": hosts[i % len(hosts)] for i in range(clients)}
    app = make_app(ctl, tokens)
    loop_ready = threading.Event()

    def serve() -> None:
        import asyncio
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", api_port).start())
        loop_ready.set()
        loop.run_forever()
    threading.Thread(target=serve, daemon=True).start()
    loop_ready.wait()
    url = f"http://127.0.0.1:{api_port}"
    calls: list[float] = []
    installed: list[float] = []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def client(tok: str, k: int) -> None:
        c = SubscriptionClient(url, tok)
        sub = None
        while time.monotonic() < stop:
            t0 = time.monotonic()
            if sub is None:
                got = c.subscribe(f"stock == C{k} and price > {rng.randint(1, 999)}", ttl=600)
                sub, version = got["id"], got["version"]
            else:
                version = c.unsubscribe(sub)["version"]
                sub = None
            t1 = time.monotonic()
            c.wait_installed(version, timeout=300, poll=0.005)
            with lock:
                calls.append(t1 - t0)
                installed.append(time.monotonic() - t0)
    threads = [threading.Thread(target=client, args=(tok, k)) for k, tok in enumerate(tokens)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    server.terminate()
    server.wait()
    return {"subscriptions": n, "clients": clients, "changes": len(calls), "changes_per_s": round(len(calls) / wall, 1),
            "api_ms_p50": round(_pct(calls, 0.5) * 1e3, 1), "api_ms_p99": round(_pct(calls, 0.99) * 1e3, 1),
            "installed_ms_p50": round(_pct(installed, 0.5) * 1e3, 1),
            "installed_ms_p99": round(_pct(installed, 0.99) * 1e3, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, action="append", help="live subscriptions (default 1000 10000)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    sizes = args.n or [1000, 10000]
    print(f"command: python bench/churn_bench.py {' '.join(f'-n {n}' for n in sizes)} --clients {args.clients} "
          f"--seconds {args.seconds:g}")
    print(f"{'live subs':>9} {'changes/s':>9} {'API call p50/p99':>18} {'to installed p50/p99':>22}")
    out = []
    for n in sizes:
        r = measure(n, args.clients, args.seconds)
        out.append(r)
        print(f"{n:>9,} {r['changes_per_s']:>9} {r['api_ms_p50']:>8} / {r['api_ms_p99']:<6} ms "
              f"{r['installed_ms_p50']:>9} / {r['installed_ms_p99']} ms", flush=True)
    print(json.dumps({"churn": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
