"""The subscription service against hostile and unlucky clients: any request (random methods,
paths, bodies, tokens: Hypothesis) gets a 4xx with a message, never a 500; tokens are kept only
as salted hashes; subscriptions survive a controller restart (SQLite) and ids are never reused;
a kept-alive client resubscribes when its subscription is gone."""
from __future__ import annotations

import asyncio
import json
import time

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from camus.controller.client import SubscriptionClient
from camus.controller.core import Controller
from camus.controller.service import SUMMARY, make_app
from camus.controller.store import StoreError, SubscriptionStore
from camus.controller.tokens import TokenBook, hash_token
from camus.controller.topology import leaf_spine
from tests.controller.test_service import SPEC, TOKENS, FakeClock, Recorder

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=6)
DEEP = st.integers(1, 20_000).flatmap(lambda n: st.sampled_from(
    ["(" * n + "stock == GOOGL" + ")" * n, "not " * n + "stock == GOOGL", "stock == GOOGL" + " and price > 1" * n]))
BODIES = st.one_of(
    st.binary(max_size=60),
    JSONISH.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional={"filter": JSONISH | DEEP | st.sampled_from(["stock == GOOGL", "price >", ""]),
                                        "ttl": JSONISH | st.sampled_from([1, 0, -5, 1e300, "abc", None, 10 ** 400,
                                                                          -(10 ** 30)]),
                                        "host": st.sampled_from(["h0_0", "h1_0", "h9", 7, None]),
                                        "extra": JSONISH}
                          ).map(lambda d: json.dumps(d).encode()),
    st.integers(1, 500).map(lambda n: b'{"filter": "stock == GOOGL", "ttl": 1' + b"0" * n + b"}"))
TOKEN_TEXT = (st.sampled_from(["tok-a", "tok-b", "nope", "", "tök-ä", "tok-a ", "ф"])
              | st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=12))


def _controller():
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    rec = Recorder()
    return Controller(t, SPEC, "mr", targets={d: rec for d in t.devices}, clock=FakeClock())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(st.tuples(st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
                                   st.sampled_from(["/v1/subscriptions", "/v1/subscriptions/s1/refresh",
                                                    "/v1/subscriptions/s1", "/v1/subscriptions/zz/refresh",
                                                    "/v1/status", "/v1/subscriptions/s999999999999999999"]),
                                   BODIES, TOKEN_TEXT), min_size=1, max_size=6))
def test_every_request_gets_a_4xx_or_success_never_a_500(requests) -> None:
    ctl = _controller()

    async def go():
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            for method, path, body, token in requests:
                header = "Bearer " + token.encode("utf-8").decode("latin-1")     # non-ASCII tokens too
                r = await c.request(method, path, data=body, headers={"Authorization": header})
                assert r.status < 500, (method, path, body, token, r.status, await r.text())
                if r.status >= 400 and r.status != 405:
                    assert "error" in json.loads(await r.text())
                if r.status == 201:                                  # a token acts for its host only
                    # (HTTP drops the spaces around a header's value: "tok-a " arrives as "tok-a")
                    assert (await r.json())["host"] == TOKENS[token.strip(" ")], (body, token)
    asyncio.run(go())


def test_a_token_never_acts_for_another_host() -> None:
    """Issue 40: `"host": "h2"` with h1's token answered 201 and subscribed h1."""
    ctl = _controller()

    async def go():
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            auth = {"Authorization": "Bearer tok-a"}                  # host h0_0
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "host": "h1_0"}, headers=auth)
            assert r.status == 403 and "acts for host h0_0" in (await r.json())["error"]
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "hots": "x"}, headers=auth)
            assert r.status == 400 and "unknown field(s) hots" in (await r.json())["error"]
            assert ctl.subscriptions_of("h0_0") == [] and ctl.subscriptions_of("h1_0") == []
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "host": "h0_0"}, headers=auth)
            assert r.status == 201 and (await r.json())["host"] == "h0_0"        # its own host: fine
            r = await c.post("/v1/subscriptions", data=b'{"filter": "stock == A", "ttl": 1' + b"0" * 400 + b"}",
                             headers=auth)
            assert r.status == 400 and "401 digits" in (await r.json())["error"]
    asyncio.run(go())


def test_tokens_are_kept_only_as_salted_hashes() -> None:
    book = TokenBook({"secret-a": "h1", hash_token("secret-b"): "h2"})
    assert book.host("secret-a") == "h1" and book.host("secret-b") == "h2"
    assert book.host("secret") is None and book.host("ä") is None and book.host("") is None
    assert "secret-a" not in repr(vars(book)) and all(len(e.digest) == 32 for e in book._entries)
    assert hash_token("x", b"\0" * 16) == hash_token("x", b"\0" * 16) != hash_token("x")


def test_subscriptions_survive_a_restart_and_ids_are_never_reused(tmp_path) -> None:
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    wall = [10_000.0]
    db = tmp_path / "ctl.db"
    first = Controller(t, SPEC, "mr", store=SubscriptionStore(db), clock=lambda: 0.0, wall=lambda: wall[0])
    a = first.add("h0_0", "stock == GOOGL", 60)
    b = first.add("h1_0", "stock == AAPL", 60)
    first.remove("h1_0", b.id)
    tables_before = {d: t.digest for d, t in first.tables.items()}
    wall[0] += 30                                   # restart half way through the TTL
    second = Controller(t, SPEC, "mr", store=SubscriptionStore(db), clock=lambda: 500.0, wall=lambda: wall[0])
    assert set(second.subs) == {a.id} and second.subs[a.id].filter == "stock == GOOGL"
    assert abs(second.subs[a.id].expires - 530.0) < 1e-6          # what was left of its TTL
    assert {d: t.digest for d, t in second.tables.items()} == tables_before   # the same tables, not empty
    c = second.add("h1_0", "stock == MSFT", 60)
    assert int(c.id[1:]) > int(b.id[1:])                          # never an old id again
    wall[0] += 100                                                # everything lapsed while down
    third = Controller(t, SPEC, "mr", store=SubscriptionStore(db), clock=lambda: 0.0, wall=lambda: wall[0])
    assert not third.subs


def test_kept_alive_client_resubscribes_when_its_subscription_is_gone() -> None:
    ctl = Controller(leaf_spine(leaves=2, spines=1, hosts_per_leaf=1), SPEC, "mr")
    app = make_app(ctl, TOKENS)

    async def go():
        server = TestServer(app)
        await server.start_server()
        url = str(server.make_url("/")).rstrip("/")
        client = SubscriptionClient(url, "tok-a")
        loop = asyncio.get_running_loop()
        sub = await loop.run_in_executor(None, client.subscribe, "stock == GOOGL", 3.0)
        await loop.run_in_executor(None, client.keep_alive, sub["id"], 0.2)
        ctl.subs.clear()                               # as if the controller had lost it
        deadline = time.monotonic() + 5
        while client.current_id(sub["id"]) == sub["id"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        new_id = client.current_id(sub["id"])
        assert new_id != sub["id"] and ctl.subs[new_id].filter == "stock == GOOGL"
        await loop.run_in_executor(None, client.unsubscribe, sub["id"])
        assert not ctl.subs
        await server.close()
    asyncio.run(go())


def test_bad_ttls_and_non_ascii_tokens_are_4xx() -> None:
    ctl = _controller()

    async def go():
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            auth = {"Authorization": "Bearer tok-a"}
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "ttl": 10}, headers=auth)
            sid = (await r.json())["id"]
            for ttl in ("abc", None, True, [1], -1):
                r = await c.post(f"/v1/subscriptions/{sid}/refresh", json={"ttl": ttl}, headers=auth)
                assert r.status == 400, ttl
            r = await c.get("/v1/subscriptions", headers={"Authorization": "Bearer " + "tök".encode().decode("latin-1")})
            assert r.status == 401
    asyncio.run(go())


class HoldingTarget(Recorder):
    """A push target that also says what the device holds now (digest, rule count)."""

    def __init__(self, held: dict[str, tuple[str, int]]) -> None:
        super().__init__()
        self.held = held

    def current(self, device):
        from camus.controller.targets import Held
        h = self.held.get(device)
        return Held(*h) if h else None


def test_after_a_restart_no_device_gets_fewer_rules_for_one_ttl(tmp_path) -> None:
    """The database lost its rows (or clients have not resubscribed yet): for one TTL after the
    restart no device is pushed fewer rules than it holds; devices already holding the computed
    tables are not pushed at all; after the TTL the controller's view wins."""
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    db = tmp_path / "ctl.db"
    before = Controller(t, SPEC, "mr", store=SubscriptionStore(db), clock=FakeClock())
    before.add("h0_0", "stock == GOOGL", 60)
    held = {d: (tb.digest, tb.rules.count("\n")) for d, tb in before.tables.items()}
    before.store.db.execute("DELETE FROM subscriptions")         # lost while the controller was down
    clock = FakeClock()
    target = HoldingTarget(held)
    after = Controller(t, SPEC, "mr", targets={d: target for d in t.devices}, clock=clock,
                       store=SubscriptionStore(db), restart_hold_s=30.0)
    shrinking = {d for d in t.devices if after.tables[d].rules.count("\n") < held[d][1]}
    assert shrinking and not set(after.pending()) & shrinking     # held back
    assert not set(after.pending()) & {d for d in t.devices if after.tables[d].digest == held[d][0]}
    after.add("h0_0", "stock == GOOGL", 60)                      # the client resubscribes
    assert after.pending() == [] or all(after.tables[d].rules.count("\n") >= held[d][1] for d in after.pending())
    clock.t += 31
    after.remove("h0_0", next(iter(after.subs)))
    assert set(after.pending()) >= shrinking                      # after one TTL the controller's view wins


def test_the_service_checkpoints_the_database_off_the_request_path(tmp_path) -> None:
    """Issue 47: a commit that crossed SQLite's checkpoint threshold synced the database in the
    request (8-14 ms here, and every request queued behind it). Under the service, commits only
    append to the write-ahead log; the housekeeping task checkpoints it in a thread, and what
    was committed is all there for the next start."""
    import os
    db = tmp_path / "subs.db"
    store = SubscriptionStore(db)
    store.checkpoint_elsewhere()
    assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    ids = [store.add("h1", f"stock == S{k} and price > {k}", 60, time.time() + 60) for k in range(3000)]
    wal = db.with_name(db.name + "-wal")
    grown = os.path.getsize(wal)
    assert grown > 1000 * 4096                            # past the default threshold, never checkpointed
    store.checkpoint()
    store.remove(ids[:10])
    import sqlite3
    frames = sqlite3.connect(db).execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    assert 0 < frames < 50                               # the 10 deletes: the rest went into the database
    store.close()
    again = SubscriptionStore(db)
    assert len(again.live(time.time())) == 2990
    again.close()
    t = leaf_spine(2, 2, 1)
    c = Controller(t, SPEC, "mr", store=SubscriptionStore(tmp_path / "svc.db"))
    make_app(c, TOKENS)
    assert c.store is not None and c.store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0


def test_status_says_how_long_the_service_took_to_answer_changes() -> None:
    """Issue 47: the API's own handling time of subscribes and unsubscribes (not a client's or
    the machine's delays) is in /v1/status: p50 / p99 / max over the last changes."""
    ctl = _controller()

    async def go():
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            auth = {"Authorization": "Bearer tok-a"}
            first = await (await c.get("/v1/status", headers=auth)).json()
            assert first["api"] == {"changes": 0}
            for k in range(5):
                sub = await (await c.post("/v1/subscriptions", json={"filter": f"stock == S{k}"}, headers=auth)).json()
                assert (await c.delete(f"/v1/subscriptions/{sub['id']}", headers=auth)).status == 200
            await c.post("/v1/subscriptions", json={"filter": "stock =="}, headers=auth)      # a 400 counts too
            c.server.app[SUMMARY][0] = float("-inf")                                 # not a second later: now
            api = (await (await c.get("/v1/status", headers=auth)).json())["api"]
            assert api["changes"] == 11 and 0 < api["ms_p50"] <= api["ms_p99"] <= api["ms_max"] < 10_000
    asyncio.run(go())


def test_a_change_is_answered_once_committed_many_to_a_transaction(tmp_path) -> None:
    """Issue 47: the service commits in a thread (the event loop spends no time in SQLite), every
    write queued meanwhile in one transaction; a change is answered only once its row is in the
    database (another connection sees it), ids stay unique and are never reused after a restart."""
    import sqlite3
    db = tmp_path / "subs.db"
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    ctl = Controller(t, SPEC, "mr", targets={d: Recorder() for d in t.devices}, clock=FakeClock(),
                     store=SubscriptionStore(db))
    reader = sqlite3.connect(db)

    def stored() -> set[str]:
        return {f"s{i}" for (i,) in reader.execute("SELECT id FROM subscriptions")}

    async def go() -> list[str]:
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            auth = {"Authorization": "Bearer tok-a"}

            async def sub(k: int) -> str:
                r = await c.post("/v1/subscriptions", json={"filter": f"stock == S{k}", "ttl": 60}, headers=auth)
                assert r.status == 201
                got = (await r.json())["id"]
                assert got in stored()                         # committed before the answer
                return got
            ids = await asyncio.gather(*(sub(k) for k in range(60)))
            for i in ids[:20]:
                assert (await c.delete(f"/v1/subscriptions/{i}", headers=auth)).status == 200
                assert i not in stored()
            r = await c.post(f"/v1/subscriptions/{ids[30]}/refresh", json={"ttl": 120}, headers=auth)
            assert r.status == 200
            assert reader.execute("SELECT ttl FROM subscriptions WHERE id = ?", (int(ids[30][1:]),)).fetchone() == (120,)
            return ids
    ids = asyncio.run(go())
    assert len(set(ids)) == 60 and stored() == set(ids[20:])
    assert ctl.store is not None
    ctl.store.close()
    again = SubscriptionStore(db)
    assert again.add("h0_0", "stock == X", 60, time.time() + 60) > max(int(i[1:]) for i in ids)
    again.close()


def test_a_change_the_database_refuses_is_a_503_and_leaves_nothing(tmp_path) -> None:
    """Another process holding the database locked: the change is answered 503 with the reason,
    the subscription is not left live in memory, and once the lock is gone changes go through."""
    import sqlite3
    db = tmp_path / "subs.db"
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    ctl = Controller(t, SPEC, "mr", targets={d: Recorder() for d in t.devices}, clock=FakeClock(),
                     store=SubscriptionStore(db))
    assert ctl.store is not None
    ctl.store.db.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(db, isolation_level=None)

    async def go() -> None:
        async with TestClient(TestServer(make_app(ctl, TOKENS))) as c:
            auth = {"Authorization": "Bearer tok-a"}
            other.execute("BEGIN EXCLUSIVE")
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL"}, headers=auth)
            assert r.status == 503 and "locked" in (await r.json())["error"]
            listed = await (await c.get("/v1/subscriptions", headers=auth)).json()
            assert listed["subscriptions"] == []
            other.execute("ROLLBACK")
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL"}, headers=auth)
            assert r.status == 201
            listed = await (await c.get("/v1/subscriptions", headers=auth)).json()
            assert [s["filter"] for s in listed["subscriptions"]] == ["stock == GOOGL"]
            # a commit that fails (disk full, I/O error): rolled back, answered 503, nothing live
            store = ctl.store
            real = store.commit

            def failing():                                       # type: ignore[no-untyped-def]
                store.db.execute("ROLLBACK")
                return StoreError("the subscription database refused the change: disk I/O error")
            store.commit = failing
            try:
                r = await c.post("/v1/subscriptions", json={"filter": "stock == MSFT"}, headers=auth)
            finally:
                store.commit = real
            assert r.status == 503 and "I/O" in (await r.json())["error"]
            listed = await (await c.get("/v1/subscriptions", headers=auth)).json()
            assert [s["filter"] for s in listed["subscriptions"]] == ["stock == GOOGL"]
            # an unsubscribe whose commit fails: 503, and the subscription is still live (its row
            # is), so the client's retry removes it instead of answering 404
            sub_id = listed["subscriptions"][0]["id"]
            store.commit = failing
            try:
                r = await c.delete(f"/v1/subscriptions/{sub_id}", headers=auth)
            finally:
                store.commit = real
            assert r.status == 503
            listed = await (await c.get("/v1/subscriptions", headers=auth)).json()
            assert [s["id"] for s in listed["subscriptions"]] == [sub_id]
            kept = [f for (f,) in other.execute("SELECT filter FROM subscriptions")]
            assert kept == ["stock == GOOGL"]
            r = await c.delete(f"/v1/subscriptions/{sub_id}", headers=auth)
            assert r.status == 200
            listed = await (await c.get("/v1/subscriptions", headers=auth)).json()
            assert listed["subscriptions"] == []
            r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL"}, headers=auth)
            assert r.status == 201
    asyncio.run(_bounded(go(), 120))
    assert [f for (f,) in other.execute("SELECT filter FROM subscriptions")] == ["stock == GOOGL"]


async def _bounded(work, seconds: float):   # type: ignore[no-untyped-def]
    """`work`, or a failure naming where every task waits after `seconds` (once, in a full run,
    this test hung for good with the loop idle: a hang fails it, and says where, instead of
    holding the suite)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        waiting = "\n".join(f"{t.get_name()}: {t.get_stack(limit=6)}" for t in asyncio.all_tasks()
                            if t is not asyncio.current_task())
        task.cancel()
        raise AssertionError(f"no answer within {seconds:g} s; the tasks wait at:\n{waiting}")
    return task.result()


def _raw(port: int, data: bytes, wait_s: float = 60) -> tuple[bytes, float]:
    """Send `data` and read until the server closes: what it answered and how long that took."""
    import socket
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    return got, time.monotonic() - t0


def test_half_requests_and_slow_bodies_are_cut_and_bad_headers_log_one_line(monkeypatch, caplog) -> None:
    import logging

    from camus.controller import http_limits
    monkeypatch.setattr(http_limits, "HEADER_TIMEOUT_S", 1.0)
    monkeypatch.setattr(http_limits, "BODY_TIMEOUT_S", 1.0)
    ctl = _controller()

    async def go() -> None:
        server = TestServer(make_app(ctl, TOKENS))
        await server.start_server(**http_limits.server_options())        # as run_app is given them
        try:
            port = server.port
            assert port is not None
            loop = asyncio.get_running_loop()
            # headers never finished: closed after the header timeout, nothing answered
            got, took = await loop.run_in_executor(None, _raw, port, b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
            assert got == b"" and took < 30
            # a body that never arrives: 408
            got, took = await loop.run_in_executor(None, _raw, port, (
                b"POST /v1/subscriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"filter\""))
            assert got.startswith(b"HTTP/1.1 408") and took < 30, got[:200]
            # a header line over the limit: 400, logged as one line, no traceback, not an error
            with caplog.at_level(logging.INFO, logger="aiohttp.server"):
                got, _ = await loop.run_in_executor(None, _raw, port, (
                    b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"))
            assert got.startswith(b"HTTP/1.0 400") or got.startswith(b"HTTP/1.1 400"), got[:200]
            mine = [r for r in caplog.records if r.name == "aiohttp.server"]
            assert mine and all(r.levelno < logging.WARNING and not r.exc_info for r in mine)
            assert any("400" in r.getMessage() for r in mine)
        finally:
            await server.close()

    asyncio.run(go())
