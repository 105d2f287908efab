"""Subscription churn through the controller's HTTP API, measured: how long a subscribe or
unsubscribe call takes to answer, and how long until the data plane classifies by the change.

    sudo python bench/churn_bench.py [-n 1000 -n 100000] [--clients 8] [--seconds 20]
                                     [--target xdp|p4] [--rate R [--batch K]]

Per size: N ITCH subscriptions already live (in the database of `camus-xdp controller serve`,
its own process; one edge device, three hosts). The device is an XDP host (`--target xdp`, the
default, root): an agent (`camus-xdp agent`, its own process) attached to a veth, taking the
controller's rule-line deltas into its maps; or the software P4Runtime switch in its own
process, written over gRPC (`--target p4`). Then `--clients` API clients for `--seconds`, each
alternately subscribing and unsubscribing a filter on a symbol of its own and waiting until
the change is installed (closed loop): on XDP, until the attached program (BPF_PROG_TEST_RUN on
its pinned program) delivers a packet of that symbol after the subscribe and drops it after the
unsubscribe, so the time is kernel-verified; on the switch, until its `applied_version` in
/v1/status reaches the version the call answered with. With `--rate R` the clients issue R
changes/s in total without waiting (open loop: time to installed from a watcher whose
`/v1/status?wait_version=` requests the controller answers as the held version grows); with
`--batch K` too, each call carries K changes (POST /v1/changes), as a broker relaying many
subscribers' changes sends them, and the API times are per call.
The last line is one JSON object with the figures.

`--soak`: the run is a soak (say `--seconds 600 --rate 1000 -n 100000`): every second it also
asks the kernel whether packets of five symbols the initial set subscribes to (changes never
touch them) are still delivered; at the end it waits for the agent to save its state and
compares the states its maps hold with what the live subscriptions compile to from scratch,
and every symbol's delivery with the reference interpreter on those subscriptions. Figures:
RSS of the controller and the agent by minute, and each one's spread after the first minute.

The API's latency is also measured apart from the load (`probe_api_ms_*`): a probe, a process
of its own at normal priority (bench/churn_probe.py), subscribes and unsubscribes 20 times a
second, each call timed alone over one keep-alive connection. In open loop the load's clients (one Python event
loop for all of them, with the watcher) run at nice 10: on this 2-core machine they, the agent
and the controller share the CPUs, and the load's own loop delays its calls' answers by more
than the controller takes to give them (the controller's own handling time is
`server_api_ms_last_changes`). The controller and the agent run at normal priority.
"""
from __future__ import annotations

import asyncio
import bisect
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"
RUN = f"cx{os.getpid() % 100000}"                       # interfaces named per run: two runs never clash
IFACE, PEER = f"{RUN}h0", f"{RUN}h1"                     # the XDP host's interface (--target xdp)
sys.path.insert(0, str(ROOT / "bench"))
from delta_bench import KernelCheck  # noqa: E402   the attached program, asked through the kernel
from p4rt_bench import SERVER, free_port  # noqa: E402   the P4Runtime switch process, a free port

LOAD_NICE = 10                                           # open loop: the load's clients yield the CPU


def _rss_mb(pid: int) -> float:
    """Resident memory of a process (the controller's, without its compile worker)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def measure(n: int, clients: int, seconds: float, tmp: Path, rate: float = 0.0, target: str = "xdp",
            trace: Path | None = None, soak: bool = False, tls: bool = False, push_interval: float | None = None,
            batch: int = 1, controllers: int = 0) -> dict:
    """`controllers` > 0: that many controller processes on one PostgreSQL database (started
    here, a throwaway cluster), the clients spread over them; 0: one process on SQLite."""
    from contextlib import nullcontext

    from camus.lab.namespaces import processes
    from camus.lab.postgres import TemporaryPostgres
    try:
        with TemporaryPostgres() if controllers else nullcontext() as pg, processes() as procs:
            return _measure(n, clients, seconds, tmp, rate, procs, target, trace, soak, tls, push_interval, batch,
                            pg.url if pg is not None else "", max(1, controllers))
    finally:                                             # after the agent has stopped
        if target == "xdp":
            from camus.dataplane import installed as state, runtime
            if state.state_path(IFACE).exists():         # the agent's attachment: pins and state go too
                runtime.detach(IFACE)
            _veths(down=True)


def _veths(down: bool = False) -> None:
    """The XDP host's interface (the agent attaches to it) and one veth per subscriber port."""
    for a, b in [(IFACE, PEER)] + [(f"{RUN}p{i}", f"{RUN}q{i}") for i in (1, 2, 3)]:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        if not down:
            subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
            for x in (a, b):
                subprocess.run(["ip", "link", "set", x, "up"], check=True)


def _device(target: str, tmp: Path, procs: list, pki: dict | None = None) -> tuple[dict, dict]:
    """The filtering device the subscribers hang off: a software P4Runtime switch in its own
    process, or an XDP host (veths here) with its agent; its topology entry and extra options."""
    if target == "p4":
        sw_port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-c", SERVER, str(SPEC), f"127.0.0.1:{sw_port}"],
                                      stdout=subprocess.PIPE, text=True))
        assert procs[0].stdout is not None and procs[0].stdout.readline().strip() == "ready"
        return {"name": "sw", "kind": "p4", "layer": "edge", "p4runtime": f"127.0.0.1:{sw_port}"}, {}
    _veths()
    agent = f"127.0.0.1:{free_port()}"
    (tmp / "agent.token").write_text("agent-tok\n")
    (tmp / "ports.yaml").write_text("".join(f"{i}: {{iface: {RUN}p{i}}}\n" for i in (1, 2, 3)))
    tls = ["--tls-cert", pki["agent"].cert, "--tls-key", pki["agent"].key, "--tls-ca", pki["agent"].ca] if pki else []
    procs.append(subprocess.Popen([str(Path(sys.executable).parent / "camus-xdp"), "agent", IFACE, "--spec", str(SPEC),
                                   "--ports", str(tmp / "ports.yaml"), "--listen", agent,
                                   "--token-file", str(tmp / "agent.token"), *tls], stderr=subprocess.DEVNULL))
    extra = {"--agent-token-file": str(tmp / "agent.token")}
    if pki:                                              # the controller: https, and mutual TLS to the agent
        extra |= {"--tls-cert": pki["controller"].cert, "--tls-key": pki["controller"].key,
                  "--tls-ca": pki["controller"].ca}
    return {"name": "sw", "kind": "xdp", "layer": "edge", "agent": f"{'https' if pki else 'http'}://{agent}"}, extra


async def _load(urls: list[str], tokens: list[str], seconds: float, rate: float, kernel: KernelCheck | None,
                ssl_context=None, batch: int = 1) -> tuple[list[float], list[float], int, list[tuple[float, float]]]:
    """The API clients, in one event loop over keep-alive connections (so the client costs
    little CPU beside the controller on this 2-core machine): API call times, times to
    installed, and how many calls' changes were never installed within two minutes. With
    `batch` > 1 (open loop) each call is one POST /v1/changes of `batch` changes: the client's
    `batch` filters, each subscribed when it is not and unsubscribed when it is. Client k talks
    to controller process k mod len(urls); the watcher to the first."""
    import aiohttp
    calls: list[float] = []
    installed: list[float] = []
    issued: list[tuple[float, int]] = []                 # open loop: (when, version) of each change
    trace: list[tuple[float, float]] = []                # open loop: (issued after start, to installed)
    start = time.monotonic()
    stop = start + seconds
    rng = random.Random(2)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=ssl_context or False)) as http:
        where = {tok: urls[k % len(urls)] for k, tok in enumerate(tokens)}

        async def call(tok: str, method: str, path: str, body: dict | None = None) -> dict:
            async with http.request(method, where[tok] + path, json=body,
                                    headers={"Authorization": f"Bearer {tok}"}) as r:
                r.raise_for_status()
                return await r.json()

        async def held_version(wait_for: int = 0) -> int:
            """The version every pushed device holds; with `wait_for`, once it is that (the
            controller answers when it is, or after a second)."""
            st = await call(tokens[0], "GET", f"/v1/status?wait_version={wait_for}&timeout=1" if wait_for
                            else "/v1/status")
            return min(d["applied_version"] for d in st["devices"].values() if d["push_target"])

        async def batches(tok: str, k: int) -> None:
            slots: list[str | None] = [None] * batch
            every = len(tokens) * batch / rate
            next_at = time.monotonic() + k * every / len(tokens)       # staggered: no bursts
            while time.monotonic() < stop:
                next_at += every
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                t0 = time.monotonic()
                changes = [{"op": "subscribe", "filter": f"stock == C{k} and price > {100 * j + rng.randint(1, 99)}",
                            "ttl": 600} if sub is None else {"op": "unsubscribe", "id": sub} for j, sub in enumerate(slots)]
                got = await call(tok, "POST", "/v1/changes", {"changes": changes})
                slots = [r.get("id") if "removed" not in r else None for r in got["results"]]
                calls.append(time.monotonic() - t0)
                issued.append((t0, got["version"]))

        async def client(tok: str, k: int) -> None:
            if batch > 1:
                return await batches(tok, k)
            pkt = kernel.frame(f"C{k}") if kernel is not None else b""
            sub = None
            next_at = time.monotonic() + k / rate if rate else 0.0     # staggered: no bursts
            while time.monotonic() < stop:
                if rate:                                 # open loop: this client's share of the rate
                    next_at += len(tokens) / rate
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                t0 = time.monotonic()
                if sub is None:
                    got = await call(tok, "POST", "/v1/subscriptions",
                                     {"filter": f"stock == C{k} and price > {rng.randint(1, 999)}", "ttl": 600})
                    sub, version = got["id"], got["version"]
                else:
                    version = (await call(tok, "DELETE", f"/v1/subscriptions/{sub}"))["version"]
                    sub = None
                calls.append(time.monotonic() - t0)
                if rate:
                    issued.append((t0, version))
                    continue
                while True:                              # closed loop: until installed
                    if kernel is not None:               # the kernel classifies by the change
                        if kernel.delivered(pkt) == (sub is not None):
                            break
                    elif await held_version(version) >= version:
                        break
                    if time.monotonic() - t0 > 120:
                        raise AssertionError(f"version {version} never reached the data plane")
                    if kernel is not None:               # (the controller's answer waited already)
                        await asyncio.sleep(0.0005)
                installed.append(time.monotonic() - t0)

        async def watch() -> None:                       # open loop: when each version is held
            samples: list[tuple[float, int]] = []        # (answered at, version held); both increase
            now_held = 0
            while True:                                  # the controller answers as the held version grows
                now_held = await held_version(now_held + 1)
                samples.append((time.monotonic(), now_held))
                if done.is_set() and (samples[-1][1] >= max(v for _, v in issued) or time.monotonic() > stop + 120):
                    break
            answered = [t for t, _ in samples]
            held = [v for _, v in samples]
            for when, version in issued:                 # first answer after the call holding it
                i = max(bisect.bisect_left(answered, when), bisect.bisect_left(held, version))
                if i < len(samples):
                    installed.append(answered[i] - when)
                    trace.append((when - start, answered[i] - when))

        done = asyncio.Event()

        async def clients() -> None:
            await asyncio.gather(*(client(tok, k) for k, tok in enumerate(tokens)))
            done.set()
        await asyncio.gather(clients(), *([watch()] if rate else []))
    return calls, installed, len(calls) - len(installed), trace


UNCHANGED = [f"S{i}" for i in range(5)]       # symbols of the initial set no client touches


def _soak_end(kernel: KernelCheck, first, n_clients: int) -> dict:   # type: ignore[no-untyped-def]
    """After a soak: the agent's maps against the live subscriptions compiled from scratch (its
    state file, saved once a change comes SAVE_S after the last save), and every symbol's
    delivery through the kernel against the reference interpreter on those subscriptions."""
    from camus.compiler.compile import CompileOptions, compile_rules
    from camus.compiler.incremental import IncrementalCompiler
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.compiler.structure.live_tables import LiveTables
    from camus.dataplane.installed import load_installed
    from camus.dataplane.live import SAVE_S
    time.sleep(SAVE_S + 1)
    warm = first.subscribe("stock == WARM and price > 1", ttl=600)    # a change after SAVE_S: saved
    first.wait_installed(warm["version"], timeout=600)
    inst = load_installed(IFACE)
    lines = sorted(inst.rule_lines)
    fresh = IncrementalCompiler(kernel.spec, CompileOptions())
    root = fresh.change(lines, [])
    assert fresh.live is not None
    tables = LiveTables(fresh.live.builder, fresh.variables)
    tables.move(root)
    held = len(inst.keys["desc"]) + len(inst.keys["leaf"])
    interp = PipelineInterpreter(compile_rules(kernel.spec, "".join(f"{ln}\n" for ln in lines)).pipeline)
    symbols = [f"S{i}" for i in range(100)] + [f"C{k}" for k in range(n_clients)]
    wrong = [s for s in symbols if kernel.delivered(kernel.frame(s))
             != bool(interp.run(kernel.msg(kernel.spec, f"stock={s} price={kernel.price}")).actions.ports)]
    first.wait_installed(first.unsubscribe(warm["id"])["version"], timeout=600)
    return {"live_rule_lines": len(lines), "map_states": held, "from_scratch_states": tables.live_states(),
            "maps_equal_from_scratch": held == tables.live_states(), "symbols_delivered_wrong": wrong}


def _spread(xs: list[float]) -> float:
    """How far the values stray from the first: max |x - x0| / x0."""
    return round(max(abs(x - xs[0]) for x in xs) / xs[0], 3) if xs and xs[0] else float("nan")


def _initial(n: int, hosts: list[str], tmp: Path, pg_url: str) -> str:
    """The live set the run starts from, in the controllers' database: its --db."""
    from camus.controller.store import SubscriptionStore
    rng, far = random.Random(1), time.time() + 3600
    rows = [(rng.choice(hosts), f"stock == S{rng.randrange(100)} and price > {rng.randint(1, 999)}") for _ in range(n)]
    if pg_url:
        import psycopg

        from camus.controller.shared_store import SharedStore
        SharedStore(pg_url)                                # (makes the schema)
        with psycopg.connect(pg_url) as conn, conn.cursor() as cur:
            with cur.copy("COPY camus_subscriptions (id, host, filter, ttl, expires) FROM STDIN") as copy:
                for i, (host, text) in enumerate(rows, start=1):
                    copy.write_row((i, host, text, 3600.0, far))
            cur.execute("SELECT setval('camus_subscription_ids', %s)", (max(1, n),))
        return pg_url
    db = tmp / f"churn-{n}.db"
    db.unlink(missing_ok=True)
    store = SubscriptionStore(db)
    store.db.execute("BEGIN")
    store.db.executemany("INSERT INTO subscriptions (host, filter, ttl, expires) VALUES (?, ?, 3600, ?)",
                         [(host, text, far) for host, text in rows])
    store.db.execute("COMMIT")
    store.db.close()
    return str(db)


def _measure(n: int, clients: int, seconds: float, tmp: Path, rate: float, procs: list, target: str,
             trace: Path | None, soak: bool = False, tls: bool = False, push_interval: float | None = None,
             batch: int = 1, pg_url: str = "", controllers: int = 1) -> dict:
    import yaml

    from camus.controller.client import SubscriptionClient

    hosts = ["h1", "h2", "h3"]
    pki = None
    if tls:                                              # a private CA: the controller's and the agent's certificates
        from camus.controller.tls import make_pki
        pki = make_pki(tmp / "pki", {p: ["localhost", "127.0.0.1"] for p in ("controller", "agent")})
    device, extra = _device(target, tmp, procs, pki)
    topo = {"devices": [device] + [{"name": h, "kind": "host"} for h in hosts],
            "links": [{"a": "sw", "a_port": i, "b": h, "b_port": 1} for i, h in enumerate(hosts, start=1)]}
    (tmp / "topo.yaml").write_text(yaml.safe_dump(topo))
    tokens = {f"tok{i}": hosts[i % len(hosts)] for i in range(clients)}
    (tmp / "tokens.yaml").write_text(yaml.safe_dump(tokens | {"probe": hosts[0]}))
    db = _initial(n, hosts, tmp, pg_url)
    exe = str(Path(sys.executable).parent / "camus-xdp")
    urls = []
    for _ in range(controllers):
        api_port = free_port()
        procs.append(subprocess.Popen([exe, "controller", "serve", "--topology", str(tmp / "topo.yaml"), "--spec",
                                       str(SPEC), "--tokens", str(tmp / "tokens.yaml"), "--db", db, "--policy", "mr",
                                       "--listen", f"127.0.0.1:{api_port}", "--switch-dir", str(tmp / "sw"),
                                       *[x for kv in extra.items() for x in kv],
                                       *(["--push-interval", f"{push_interval:g}"] if push_interval is not None else [])],
                                      stderr=subprocess.DEVNULL))
        urls.append(f"{'https' if pki else 'http'}://127.0.0.1:{api_port}")
    url = urls[0]
    from camus.controller.tls import TlsFiles, client_context
    trust = TlsFiles(ca=pki["controller"].ca) if pki else None
    first = SubscriptionClient(url, "tok0", tls=trust)
    t_ready = time.monotonic()
    while time.monotonic() - t_ready < 900:              # the whole set compiled and installed
        try:
            st = first.status()
            if st["devices"] and all(d["in_sync"] for d in st["devices"].values()):
                break
        except Exception:
            pass
        time.sleep(0.2)
    else:
        raise RuntimeError("the device never held the initial subscription set")
    ready_s = time.monotonic() - t_ready
    kernel = KernelCheck(IFACE, price=1000) if target == "xdp" else None
    warm = first.subscribe("stock == WARM and price > 1", ttl=600)   # the agent takes the maps over for deltas
    first.wait_installed(warm["version"], timeout=600)
    first.wait_installed(first.unsubscribe(warm["id"])["version"], timeout=600)
    rss0, agent0 = _rss_mb(procs[1].pid), _rss_mb(procs[0].pid)
    rss: list[tuple[float, float]] = []                  # (controller, device) every second of the load
    sampling = threading.Event()
    probes = {"asked": 0, "lost": 0}                     # soak: the unchanged subscriptions, every second
    unchanged = [kernel.frame(s) for s in UNCHANGED] if soak and kernel is not None else []

    def sample() -> None:
        while not sampling.wait(1.0):
            rss.append((_rss_mb(procs[1].pid), _rss_mb(procs[0].pid)))
            for pkt in unchanged:
                probes["asked"] += 1
                probes["lost"] += not kernel.delivered(pkt)        # type: ignore[union-attr]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    prober = subprocess.Popen([sys.executable, str(ROOT / "bench" / "churn_probe.py"), urls[-1], "probe", str(seconds),
                               str(pki["controller"].ca) if pki else ""], stdout=subprocess.PIPE, text=True)
    if rate:
        os.nice(LOAD_NICE)                               # this process only: the probe, controller and agent keep theirs
    try:
        from camus.event_loop import new_event_loop      # the load's clients on uvloop too: less CPU taken
        with asyncio.Runner(loop_factory=new_event_loop) as runner:   # from the processes measured
            calls, installed, not_installed, series = runner.run(_load(urls, list(tokens), seconds, rate, kernel,
                                                                       client_context(trust) if trust else None, batch))
        if trace is not None:                            # open loop: each change, when issued and how long to installed
            with trace.open("a") as out:
                out.writelines(json.dumps({"subscriptions": n, "issued_s": round(t, 4), "installed_ms": round(d * 1e3, 2)})
                               + "\n" for t, d in series)
        sampling.set()
        sampler.join()
        said, _ = prober.communicate(timeout=120)
        probed = json.loads(said.strip().splitlines()[-1]) if prober.returncode == 0 and said.strip() else []
        time.sleep(1.0)                                  # the status summary is remade each second
        end = {"server_api_ms_last_changes": first.status().get("api", {})}   # the controller's own time
        if soak and kernel is not None:
            end |= _soak_end(kernel, first, clients)
    finally:
        sampling.set()
        if prober.poll() is None:
            prober.kill()
        if kernel is not None:
            kernel.close()
    tenths = [rss[min(len(rss) - 1, len(rss) * k // 10)] for k in range(1, 11)] if rss else []
    rss1, agent1 = _rss_mb(procs[1].pid), _rss_mb(procs[0].pid)
    if soak:                                             # by minute, and the spread after the first
        minutes = rss[59::60] or rss[-1:]
        end |= {"controller_rss_mb_by_minute": [c for c, _ in minutes],
                f"{target}_device_rss_mb_by_minute": [d for _, d in minutes],
                "controller_rss_spread_after_first_minute": _spread([c for c, _ in minutes]),
                f"{target}_device_rss_spread_after_first_minute": _spread([d for _, d in minutes]),
                "unchanged_probes": probes["asked"], "unchanged_lost": probes["lost"]}
    return end | {"subscriptions": n, "target": target, "tls": tls, "push_interval": push_interval,
                  "kernel_verified": kernel is not None and not rate,
                  "ready_s": round(ready_s, 1), "clients": clients, "rate": rate, "batch": batch,
                  "controllers": controllers, "store": "postgresql" if pg_url else "sqlite",
                  "calls": len(calls), "changes": len(calls) * batch,
                  "changes_per_s": round(len(calls) * batch / seconds, 1), "not_installed": not_installed * batch,
                  "controller_rss_mb_before": rss0, "controller_rss_mb_after": rss1,
                  f"{target}_device_rss_mb_before": agent0, f"{target}_device_rss_mb_after": agent1,
                  "controller_rss_mb_by_tenth": [c for c, _ in tenths],
                  f"{target}_device_rss_mb_by_tenth": [d for _, d in tenths],
                  "api_ms_p50": round(_pct(calls, 0.5) * 1e3, 1), "api_ms_p99": round(_pct(calls, 0.99) * 1e3, 1),
                  "load_nice": LOAD_NICE if rate else 0, "probe_calls": len(probed),
                  "probe_api_ms_p50": round(_pct(probed, 0.5), 1), "probe_api_ms_p99": round(_pct(probed, 0.99), 1),
                  "installed_ms_p50": round(_pct(installed, 0.5) * 1e3, 1),
                  "installed_ms_p99": round(_pct(installed, 0.99) * 1e3, 1)}


def main() -> int:
    import shutil
    import tempfile

    from camus.bench.sizes import run_sizes, size_args
    default = [1000, 10000]
    ap = size_args(__doc__, default)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--target", choices=["xdp", "p4"], default="xdp",
                    help="the device: an XDP host with its agent on a veth (root; installs kernel-verified in "
                         "closed loop), or the software P4Runtime switch")
    ap.add_argument("--trace", type=Path, help="open loop: append one JSON line per change (when issued, time "
                                                 "to installed) to this file, to find stalls")
    ap.add_argument("--tls", action="store_true",
                    help="TLS everywhere: the API over https, the controller to the agent over mutual TLS (a private CA)")
    ap.add_argument("--soak", action="store_true",
                    help="a soak: probe unchanged subscriptions every second, compare the maps with the live set "
                         "compiled from scratch at the end, RSS by minute (use with --seconds 600 --rate 1000)")
    ap.add_argument("--push-interval", type=float, default=None,
                    help="the controller's --push-interval (seconds between pushes to a device; default: its own)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="open loop: changes/s in total, not waiting for installs (0: closed loop, the default)")
    ap.add_argument("--batch", type=int, default=1,
                    help="open loop: changes per API call (POST /v1/changes, as a broker relaying its clients' "
                         "subscriptions sends them); 1: one change a call (POST/DELETE /v1/subscriptions)")
    ap.add_argument("--controllers", type=int, default=0,
                    help="N > 0: N controller processes on one PostgreSQL database (a throwaway cluster started "
                         "here), clients spread over them, the probe on the last; 0: one process on SQLite")
    args = ap.parse_args()
    if args.batch < 1 or (args.batch > 1 and not args.rate):
        ap.error("--batch N (N >= 1) goes with --rate (open loop)")
    if args.tls and args.target != "xdp":
        ap.error("--tls measures the XDP target (the controller's API over https, its agent over mutual TLS)")
    tmp = Path(tempfile.mkdtemp(prefix="camus-churn-"))
    try:
        return run_sizes("churn", f"churn_bench.py --target {args.target} --clients {args.clients} --seconds {args.seconds:g}"
                         + (f" --rate {args.rate:g}" if args.rate else "") + (" --soak" if args.soak else "")
                         + (" --tls" if args.tls else "")
                         + (f" --push-interval {args.push_interval:g}" if args.push_interval is not None else "")
                         + (f" --batch {args.batch}" if args.batch > 1 else "")
                         + (f" --controllers {args.controllers}" if args.controllers else ""),
                         args.n or default,
                         f"{'live subs':>9} {'changes/s':>9} {'API call p50/p99':>18} {'probe p50/p99':>16} "
                         f"{'to installed p50/p99':>22}",
                         lambda n: measure(n, args.clients, args.seconds, tmp, args.rate, args.target, args.trace,
                                           args.soak, args.tls, args.push_interval, args.batch, args.controllers),
                         lambda n, r: f"{n:>9,} {r['changes_per_s']:>9} {r['api_ms_p50']:>8} / {r['api_ms_p99']:<6} ms "
                                      f"{r['probe_api_ms_p50']:>6} / {r['probe_api_ms_p99']:<6} ms "
                                      f"{r['installed_ms_p50']:>9} / {r['installed_ms_p99']} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)          # the databases and topology files


if __name__ == "__main__":
    sys.exit(main())
