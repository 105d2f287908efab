"""Several controller processes on one PostgreSQL database (`--db postgresql://`): the store's
semantics (ids, versions, a host's own ids only, the lease), and two `camus-xdp controller serve`
processes with clients spread across both, the one that owns the devices killed (SIGKILL) in
the middle of the churn: the other takes the switch over, no acknowledged change is lost, no id
is given twice, and the switch holds exactly what the live set selects (proven over every
message against tables compiled from scratch).

PostgreSQL is started by the test (lab/postgres.py: a throwaway cluster as the `postgres` user);
the test is skipped, saying why, only where no server can be installed or started."""
from __future__ import annotations

import asyncio
import http.client
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from camus.bench.p4rt_bench import SERVER, free_port
from camus.compiler.language.spec_parser import load_spec
from camus.controller.client import ServiceError, SubscriptionClient
from camus.controller.core import Controller
from camus.controller.shared_store import ADD, REFRESH, REMOVE, Change, SharedStore
from camus.controller.targets import P4RuntimeTarget
from camus.controller.topology import Topology
from camus.controller.verifying import VerifyJob, run_job
from camus.lab.namespaces import processes
from camus.lab.postgres import PostgresUnavailable, TemporaryPostgres
from tests.conftest import APPS

SPEC_PATH = APPS / "itch" / "itch.p4"
TOKENS = {"tok-1": "h1", "tok-2": "h2", "tok-3": "h3"}
SYMBOLS = ["GOOGL", "MSFT", "AAPL", "AMZN", "NVDA", "TSLA"]


@pytest.fixture(scope="module")
def postgres():
    try:
        with TemporaryPostgres() as pg:
            yield pg
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server here: {exc}")


def _fresh_db(pg: TemporaryPostgres, name: str) -> str:
    import psycopg
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + "/" + name


def test_the_store_numbers_changes_in_commit_order_and_keeps_hosts_apart(postgres) -> None:
    asyncio.run(asyncio.wait_for(_store_semantics(_fresh_db(postgres, "store_semantics")), 120))


async def _store_semantics(url: str) -> None:
    a, b = SharedStore(url), SharedStore(url)
    try:
        now = time.time()
        first = await a.write([[Change(ADD, "h1", filter="stock == A", ttl=30)],
                               [Change(ADD, "h2", filter="stock == B", ttl=30)]], now)
        assert first[0] and first[1] and [g[0].version for g in first] == [1, 2]
        s1, s2 = first[0][0].sub.id, first[1][0].sub.id
        assert s1 != s2
        # another process: h2 cannot touch h1's id; a group of changes is all or none (an id
        # removed earlier in it, or by an earlier group, is not found)
        out = await b.write([[Change(REMOVE, "h2", s1)], [Change(REFRESH, "h1", s1, ttl=60), Change(REMOVE, "h1", s1)],
                             [Change(REFRESH, "h1", s1, ttl=10)],
                             [Change(REFRESH, "h2", s2, ttl=5), Change(REMOVE, "h2", s2), Change(REMOVE, "h2", s2)]], now)
        assert out[0] is None and out[2] is None and out[3] is None and out[1] is not None
        assert [d.version for d in out[1]] == [3, 4] and out[1][0].sub.ttl == 60
        version, live = await a.snapshot()
        assert version == 4 and [(r.id, r.ttl) for r in live] == [(s2, 30)]
        assert [(e.version, e.op) for e in (await a.tail(0))] == [(1, ADD), (2, ADD), (3, REFRESH), (4, REMOVE)]
        # ids are never given twice, by either process
        more = await a.write([[Change(ADD, "h1", filter="stock == C", ttl=30)]], now) + \
            await b.write([[Change(ADD, "h1", filter="stock == C", ttl=30)]], now)
        ids = [s1, s2] + [g[0].sub.id for g in more if g]
        assert len(set(ids)) == 4
        # lapsed subscriptions go by the owner's write, logged as removals
        assert await a.write([], now + 100, expire=True) == []
        assert await a.snapshot() == (9, [])             # 6 changes, then the 3 lapsed removed
        # the lease: one owner; the other takes it once it is given up, with a new epoch
        assert (await a.acquire("A", "http://a", 30)).owned
        held = await b.acquire("B", "http://b", 30)
        assert not held.owned and held.owner == "A" and held.address == "http://a"
        await a.release("A")
        took = await b.acquire("B", "http://b", 30)
        assert took.owned and took.epoch == held.epoch + 1
    finally:
        await a.close()
        await b.close()


def _wait(what: str, ok, timeout: float = 120.0):
    end = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            got = ok()
            if got:
                return got
        except (OSError, ServiceError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.0f} s ({last})")


class Churner(threading.Thread):
    """One client host: subscribes and unsubscribes filters of its own (unique thresholds),
    through the controllers in turn. What each call answered is kept; a call whose controller
    died under it is uncertain (committed or not: the client cannot tell) and is read back."""

    def __init__(self, host: str, token: str, urls: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.host, self.urls, self.rng = host, list(urls), random.Random(seed)
        self.clients = {u: SubscriptionClient(u, token, timeout=30) for u in urls}
        self.live: dict[str, str] = {}            # id -> filter, acknowledged
        self.ids: list[str] = []                  # every id an add answered with
        self.uncertain: set[str] = set()          # filters of adds whose answer was lost
        self.gone_uncertain: set[str] = set()     # ids whose removal's answer was lost
        self.versions: list[int] = []
        self.stop = threading.Event()
        self.dead: set[str] = set()
        self.errors: list[str] = []
        self.n = 0

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            urls = [u for u in self.urls if u not in self.dead]
            url = urls[k % len(urls)]
            k += 1
            client = self.clients[url]
            try:
                if self.live and (len(self.live) > 6 or self.rng.random() < 0.45):
                    sub_id = self.rng.choice(sorted(self.live))
                    try:
                        got = client.unsubscribe(sub_id)
                    except (OSError, http.client.HTTPException):
                        self.gone_uncertain.add(sub_id)
                        raise
                    self.live.pop(sub_id)
                    self.versions.append(got["version"])
                else:
                    text = f"stock == {self.rng.choice(SYMBOLS)} and price > {self.host[1:]}{self.n:05d}"
                    self.n += 1
                    try:
                        got = client.subscribe(text, ttl=600)
                    except (OSError, http.client.HTTPException):
                        self.uncertain.add(text)
                        raise
                    self.live[got["id"]] = text
                    self.ids.append(got["id"])
                    self.versions.append(got["version"])
            except (OSError, http.client.HTTPException):
                self.dead.add(url)                 # that controller is gone: use the others
            except ServiceError as exc:
                self.errors.append(f"{url}: {exc}")
                return


def test_two_controllers_one_database_the_owner_killed_mid_churn(postgres, tmp_path: Path) -> None:
    url = _fresh_db(postgres, "takeover")
    exe = str(Path(sys.executable).parent / "camus-xdp")
    switch = f"127.0.0.1:{free_port()}"
    topo = {"devices": [{"name": "sw1", "kind": "p4", "layer": "edge", "p4runtime": switch}]
            + [{"name": h, "kind": "host"} for h in TOKENS.values()],
            "links": [{"a": "sw1", "a_port": p, "b": f"h{p}", "b_port": 1} for p in (1, 2, 3)]}
    (tmp_path / "topo.yaml").write_text(yaml.safe_dump(topo))
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(TOKENS))
    with processes() as procs:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(SPEC_PATH), switch], stdout=subprocess.PIPE,
                                  text=True)
        procs.append(server)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        apis = [f"127.0.0.1:{free_port()}" for _ in range(2)]
        ctl = {}
        for api in apis:
            ctl[api] = subprocess.Popen([exe, "controller", "serve", "--topology", str(tmp_path / "topo.yaml"),
                                         "--spec", str(SPEC_PATH), "--tokens", str(tmp_path / "tokens.yaml"),
                                         "--db", url, "--listen", api, "--lease-seconds", "2"],
                                        stderr=open(tmp_path / f"controller-{api.rsplit(':', 1)[1]}.log", "w"))
            procs.append(ctl[api])
        probe = {api: SubscriptionClient(api, "tok-1") for api in apis}
        owner_of = lambda api: probe[api].status().get("owner", "")        # noqa: E731
        owner = _wait("a controller owns the switch", lambda: all(owner_of(a) for a in apis) and owner_of(apis[0]))
        victim = next(a for a in apis if owner.split(":")[1] == str(ctl[a].pid))
        survivor = next(a for a in apis if a != victim)

        # several changes in one request, through the process that does not own the switch: all or none
        other = probe[survivor]
        got = other._call("POST", "/v1/changes", {"changes": [{"op": "subscribe", "filter": "stock == BATCH"},
                                                              {"op": "subscribe", "filter": "stock == GONE"}]})
        gone = got["results"][1]["id"]
        with pytest.raises(ServiceError) as refused:
            other._call("POST", "/v1/changes", {"changes": [{"op": "unsubscribe", "id": gone},
                                                            {"op": "unsubscribe", "id": gone}]})
        assert refused.value.status == 404 and "change 2" not in str(refused.value)
        assert {s["filter"] for s in other.subscriptions()} == {"stock == BATCH", "stock == GONE"}
        done = other._call("POST", "/v1/changes", {"changes": [{"op": "unsubscribe", "id": gone}]})
        assert done["results"] == [{"removed": gone, "version": got["version"] + 1}]

        churners = [Churner(h, tok, apis, seed=i) for i, (tok, h) in enumerate(TOKENS.items())]
        for c in churners:
            c.start()
        _wait("churn through both controllers", lambda: sum(len(c.versions) for c in churners) >= 150)
        ctl[victim].kill()                        # SIGKILL: no release of the lease, nothing flushed
        killed_at = time.monotonic()
        taken = _wait("the survivor takes the switch over",
                      lambda: probe[survivor].status().get("owner", "").split(":")[1] == str(ctl[survivor].pid))
        took_s = time.monotonic() - killed_at
        assert taken
        done_before = sum(len(c.versions) for c in churners)
        _wait("churn after the takeover", lambda: sum(len(c.versions) for c in churners) >= done_before + 150)
        for c in churners:
            c.stop.set()
        for c in churners:
            c.join(timeout=60)
        assert [e for c in churners for e in c.errors] == []
        assert all(victim in c.dead or not c.uncertain for c in churners)

        # every acknowledged change is in the database; adds whose answer was lost may be too
        survivor_client = {h: SubscriptionClient(survivor, tok) for tok, h in TOKENS.items()}
        live_rows = []
        for c in churners:
            held = {s["id"]: s["filter"] for s in survivor_client[c.host].subscriptions() if s["filter"] != "stock == BATCH"}
            acked = {i: f for i, f in c.live.items() if i not in c.gone_uncertain}
            assert all(held.get(i) == f for i, f in acked.items()), "an acknowledged subscription was lost"
            extra = {i: f for i, f in held.items() if i not in acked}
            assert all(i in c.gone_uncertain or f in c.uncertain for i, f in extra.items()), \
                f"{c.host}: subscriptions nobody made or that were removed: {extra}"
            live_rows += [(c.host, f) for f in held.values()]
            assert len(c.ids) == len(set(c.ids))
        live_rows += [("h1", "stock == BATCH")]
        every_id = [i for c in churners for i in c.ids]
        assert len(every_id) == len(set(every_id)), "an id was given twice"

        # the switch gets everything: the survivor holds the last acknowledged version ...
        last = max(v for c in churners for v in c.versions)
        st = probe[survivor]._call("GET", f"/v1/status?wait_version={last}&timeout=60")
        assert st["devices"]["sw1"]["applied_version"] >= last and st["devices"]["sw1"]["in_sync"]
        assert st["subscriptions"] == len(live_rows)

        # ... and its tables give exactly what the live set selects, compiled here from scratch
        spec = load_spec(SPEC_PATH)
        scratch = Controller(Topology.load(tmp_path / "topo.yaml"), spec, deferred=True)
        for host, text in live_rows:
            scratch.add(host, text, 600)
        scratch.recompute()
        assert st["devices"]["sw1"]["desired"] == scratch.live.digest("sw1")
        proof = run_job(spec, VerifyJob("sw1", scratch.tables["sw1"].rules, scratch.live.digest("sw1"),
                                        P4RuntimeTarget(switch)))
        assert proof["verdict"] == "equal", proof
        print(f"takeover {took_s:.1f} s after SIGKILL (lease 2 s); {sum(len(c.versions) for c in churners)} changes; "
              f"{len(live_rows)} live; proof {proof['seconds']} s")


def test_processes_on_one_store_may_share_one_address(postgres, tmp_path: Path) -> None:
    """Two processes on one HOST:PORT (SO_REUSEPORT): the kernel hands connections to both, and
    a subscription made through either is there for the other."""
    url = _fresh_db(postgres, "one_address")
    exe = str(Path(sys.executable).parent / "camus-xdp")
    topo = {"devices": [{"name": "sw1", "kind": "p4", "layer": "edge"}, {"name": "h1", "kind": "host"}],
            "links": [{"a": "sw1", "a_port": 1, "b": "h1", "b_port": 1}]}
    (tmp_path / "topo.yaml").write_text(yaml.safe_dump(topo))
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tok-1": "h1"}))
    api = f"127.0.0.1:{free_port()}"
    with processes() as procs:
        for i in range(2):
            procs.append(subprocess.Popen([exe, "controller", "serve", "--topology", str(tmp_path / "topo.yaml"),
                                           "--spec", str(SPEC_PATH), "--tokens", str(tmp_path / "tokens.yaml"),
                                           "--db", url, "--listen", api, "--switch-dir", str(tmp_path / "sw")],
                                          stderr=open(tmp_path / f"controller-{i}.log", "w")))
        answered: set[str] = set()

        def both_answer() -> bool:           # a new connection each time: the kernel picks a process
            answered.add(SubscriptionClient(api, "tok-1").status()["answered_by"])
            return len(answered) == 2 and all(p.poll() is None for p in procs)
        _wait("both processes answer on one address", both_answer)
        made = [SubscriptionClient(api, "tok-1").subscribe(f"stock == S{k}")["id"] for k in range(10)]
        for _ in range(4):
            assert sorted(s["id"] for s in SubscriptionClient(api, "tok-1").subscriptions()) == sorted(made)
