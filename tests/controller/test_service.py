"""The subscription service over HTTP (aiohttp test server): tokens scope every request to one
host, a bad filter is refused with its position and changes nothing, TTLs lapse unless
refreshed, changes reach the devices whose tables changed, failed pushes are retried and
reported, and switch directories flip atomically."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from camus.compiler.language.spec_parser import load_spec
from camus.controller.core import Controller
from camus.controller.service import make_app
from camus.controller.store import StoreError, SubscriptionStore
from camus.controller.targets import SwitchDirTarget
from camus.controller.topology import leaf_spine
from tests.conftest import APPS

SPEC = load_spec(APPS / "itch" / "itch.p4")
TOKENS = {"tok-a": "h0_0", "tok-b": "h1_0"}


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    """A push target that records what it got and fails while `down` is set."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []
        self.down = False

    def push(self, device, tables) -> str:
        if self.down:
            raise ConnectionError("agent unreachable")
        self.got.append((device, tables.rules))
        return "ok"


def _controller(clock=None, target=None):
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    rec = target or Recorder()
    return Controller(t, SPEC, "mr", targets={d: rec for d in t.devices}, clock=clock or FakeClock()), rec


def _run(coro_fn, controller):
    async def main():
        async with TestClient(TestServer(make_app(controller, TOKENS))) as client:
            return await coro_fn(client)

    async def bounded():           # a hang fails the test (once, in a full run, it blocked the suite)
        return await asyncio.wait_for(main(), 120)
    return asyncio.run(bounded())


def H(tok):
    return {"Authorization": f"Bearer {tok}"}


def test_subscribe_list_refresh_unsubscribe_scoped_by_token() -> None:
    ctl, rec = _controller()

    async def go(c):
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "ttl": 10}, headers=H("tok-a"))
        assert r.status == 201
        sub = await r.json()
        assert sub["host"] == "h0_0" and sub["expires_in"] == 10
        assert (await c.get("/v1/subscriptions", headers=H("nope"))).status == 401
        mine = await (await c.get("/v1/subscriptions", headers=H("tok-a"))).json()
        theirs = await (await c.get("/v1/subscriptions", headers=H("tok-b"))).json()
        assert [s["id"] for s in mine["subscriptions"]] == [sub["id"]] and theirs["subscriptions"] == []
        assert (await c.delete(f"/v1/subscriptions/{sub['id']}", headers=H("tok-b"))).status == 404
        ctl.clock.t += 8
        r = await c.post(f"/v1/subscriptions/{sub['id']}/refresh", json={}, headers=H("tok-a"))
        assert (await r.json())["expires_in"] == 10
        assert ctl.routing.filters["leaf0"][1] == ("stock == GOOGL",)
        assert (await c.delete(f"/v1/subscriptions/{sub['id']}", headers=H("tok-a"))).status == 200
        assert 1 not in ctl.routing.filters["leaf0"]
    _run(go, ctl)


def test_bad_filter_is_refused_with_its_position_and_changes_nothing() -> None:
    ctl, _ = _controller()
    before = {d: st.desired for d, st in ctl.devices.items()}

    async def go(c):
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL and prize > 5"}, headers=H("tok-a"))
        body = await r.json()
        assert r.status == 400 and "1:20" in body["error"] and "prize" in body["error"]
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL : fwd(9)"}, headers=H("tok-a"))
        assert r.status == 400 and "without an action" in (await r.json())["error"]
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "ttl": -1}, headers=H("tok-a"))
        assert r.status == 400
    _run(go, ctl)
    assert {d: st.desired for d, st in ctl.devices.items()} == before and not ctl.subs


def test_ttl_lapses_unless_refreshed() -> None:
    ctl, _ = _controller()
    a = ctl.add("h0_0", "stock == GOOGL", 5)
    b = ctl.add("h1_0", "stock == AAPL", 5)
    ctl.clock.t += 4
    ctl.refresh("h1_0", b.id)
    ctl.clock.t += 2
    assert ctl.expire() == [a.id]
    assert [s["id"] for s in ctl.subscriptions_of("h1_0")] == [b.id] and not ctl.subscriptions_of("h0_0")
    assert 1 not in ctl.routing.filters["leaf0"] and ctl.routing.filters["leaf1"][1] == ("stock == AAPL",)


def test_only_changed_devices_are_pushed_and_failures_retry() -> None:
    ctl, rec = _controller()
    ctl.push_pending()
    assert {d for d, _ in rec.got} == {"leaf0", "leaf1", "spine0"}
    rec.got.clear()
    ctl.add("h1_0", "price > 5", 30)
    rec.down = True
    assert ctl.push_pending() == {"leaf1": False, "spine0": False, "leaf0": False} or \
        set(ctl.pending()) <= {"leaf0", "leaf1", "spine0"}
    st = ctl.status()["devices"]
    changed = {d for d, v in st.items() if not v["in_sync"]}
    assert changed and all("agent unreachable" in st[d]["error"] for d in changed)
    assert ctl.pending() == []                       # backing off
    ctl.clock.t += 1
    rec.down = False
    assert all(ctl.push_pending().values())
    assert {d for d, _ in rec.got} == changed and all(v["in_sync"] for v in ctl.status()["devices"].values())


def test_changes_within_the_push_interval_go_together_and_a_change_after_a_quiet_spell_at_once() -> None:
    ctl, rec = _controller()
    ctl.push_interval = 0.02
    ctl.push_pending()                               # the first tables: every device, at once
    rec.got.clear()
    ctl.clock.t += 1.0                               # a quiet spell: the next change goes at once
    ctl.add("h0_0", "stock == GOOGL", 30)
    pushed = set(ctl.push_pending())
    assert pushed and {d for d, _ in rec.got} == pushed
    rec.got.clear()
    ctl.clock.t += 0.005                             # within the interval: held, and the service
    ctl.add("h0_0", "stock == MSFT", 30)             # is told when to come back
    ctl.add("h0_0", "stock == IBM", 30)
    assert ctl.pending() == [] and rec.got == []
    assert ctl.next_push_at() == 1000.0 + 1.0 + 0.02
    ctl.clock.t += 0.015
    assert set(ctl.push_pending()) == pushed         # both changes in one push
    assert all("stock == MSFT" in rules and "stock == IBM" in rules for _, rules in rec.got)
    assert ctl.next_push_at() is None and all(v["in_sync"] for v in ctl.status()["devices"].values())


def test_a_device_a_change_does_not_touch_holds_the_new_version_at_once() -> None:
    """applied_version says which subscription state a device's tables are good for: a change
    routed away from it leaves its tables right for the new version too (a client waiting for
    every device would otherwise wait for a push that never comes)."""
    ctl, rec = _controller()
    ctl.push_pending()
    version = ctl.add("h0_0", "stock == GOOGL", 30) and ctl.version
    rec.got.clear()
    ctl.push_pending()
    touched = {d for d, _ in rec.got}
    assert touched and touched != set(ctl.devices)
    devices = ctl.status()["devices"]
    assert all(devices[d]["applied_version"] == version for d in devices), devices
    assert ctl.held_version() == version


def test_switch_directory_flips_atomically(tmp_path: Path) -> None:
    target = SwitchDirTarget(tmp_path)
    ctl, _ = _controller(target=target)
    ctl.push_pending()
    first = os.readlink(tmp_path / "spine0")
    assert (tmp_path / "spine0" / "camus.p4").read_text().startswith("// camus-xdp packet subscriptions")
    ctl.add("h0_0", "stock == GOOGL and price > 50", 30)
    ctl.push_pending()
    second = os.readlink(tmp_path / "spine0")
    assert first != second and not (tmp_path / first).exists()
    rules = (tmp_path / "spine0" / "rules.txt").read_text()
    assert rules == "stock == GOOGL and price > 50 : fwd(1)\n"
    assert "is_default_action: true" in (tmp_path / "spine0" / "entries.txtpb").read_text()


def test_changes_are_acknowledged_at_once_and_compiled_off_the_request_path() -> None:
    """A subscribe answers before any compile (with the version it made); the compile runs in the
    background, a burst of changes is compiled together, and /v1/status tells when every device
    holds the version a client waits for; requests keep being answered during a slow compile."""
    import threading
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    rec = Recorder()
    ctl = Controller(t, SPEC, "mr", targets={d: rec for d in t.devices}, deferred=True)
    compiles = []
    plain = ctl.compile_batch
    burst_answered = threading.Event()

    def slow(batch):
        compiles.append(batch.version)
        burst_answered.wait(60)          # the compile lasts until the whole burst has been answered
        return plain(batch)
    ctl.compile_batch = slow

    async def go(c):
        versions = []
        for i in range(10):
            r = await c.post("/v1/subscriptions", json={"filter": f"stock == S{i}", "ttl": 30}, headers=H("tok-a"))
            assert r.status == 201
            versions.append((await r.json())["version"])
        assert len(compiles) <= 1                 # all answered while the first compile (if any) was held
        burst_answered.set()
        assert versions == list(range(1, 11))
        st = await (await c.get(f"/v1/status?wait_version={versions[-1]}&timeout=60", headers=H("tok-a"))).json()
        assert st["compiled_version"] == 10 and all(d["in_sync"] for d in st["devices"].values()), st
        assert len(compiles) < 10                                     # the burst shared compiles
        assert any("S9" in rules for _, rules in rec.got)
    _run(go, ctl)


def test_a_status_request_can_wait_for_a_version_instead_of_polling() -> None:
    """`/v1/status?wait_version=N` answers once every pushed device holds version N (the push
    held back until the request is waiting shows it waited), after `timeout` seconds when that
    does not come, refuses bad arguments, and a shutdown answers the requests still waiting."""
    import threading
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    rec = Recorder()
    ctl = Controller(t, SPEC, "mr", targets={d: rec for d in t.devices}, deferred=True)
    let_push = threading.Event()
    plain = rec.push

    def held_push(device, tables):                               # type: ignore[no-untyped-def]
        let_push.wait(60)
        return plain(device, tables)
    rec.push = held_push                                         # type: ignore[method-assign]

    async def go(c):
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "ttl": 30}, headers=H("tok-a"))
        version = (await r.json())["version"]
        waiting = asyncio.ensure_future(c.get(f"/v1/status?wait_version={version}&timeout=60", headers=H("tok-a")))
        await asyncio.sleep(0)
        assert not waiting.done()
        let_push.set()
        st = await (await waiting).json()
        assert all(d["applied_version"] >= version for d in st["devices"].values() if d["push_target"])
        assert ctl.held_version() >= version
        # a version that does not come: answered after the timeout, with the status as it is
        r = await c.get(f"/v1/status?wait_version={version + 100}&timeout=0.2", headers=H("tok-a"))
        assert r.status == 200 and (await r.json())["version"] == version
        for bad in ("wait_version=-1", "wait_version=x", "wait_version=1&timeout=61", "wait_version=1&timeout=nan",
                    "wait_version=1&timeout=-1"):
            r = await c.get(f"/v1/status?{bad}", headers=H("tok-a"))
            assert r.status == 400 and "wait_version" in (await r.json())["error"], bad
        r = await c.get(f"/v1/status?wait_version={version}", headers=H("nobody"))
        assert r.status == 401
    _run(go, ctl)

    async def shutdown() -> None:                                # a stop does not wait for a waiting client
        server = TestServer(make_app(ctl, TOKENS))
        client = TestClient(server)
        await client.start_server()
        waiting = asyncio.ensure_future(client.get("/v1/status?wait_version=1000000&timeout=60", headers=H("tok-a")))
        for _ in range(1000):                                    # until the request is in the handler
            await asyncio.sleep(0.01)
            if server.runner and server.runner.server and server.runner.server.requests_count:
                break
        await server.close()
        assert (await asyncio.wait_for(waiting, 30)).status == 200
        await client.close()
    asyncio.run(shutdown())


def test_the_compile_can_run_in_a_worker_process() -> None:
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    rec = Recorder()
    ctl = Controller(t, SPEC, "mr", targets={d: rec for d in t.devices}, deferred=True)

    async def go(c):
        r = await c.post("/v1/subscriptions", json={"filter": "stock == GOOGL", "ttl": 30}, headers=H("tok-a"))
        version = (await r.json())["version"]
        st = await (await c.get(f"/v1/status?wait_version={version}&timeout=60", headers=H("tok-a"))).json()
        assert st["compiled_version"] == version and ctl.routing.filters["leaf0"][1] == ("stock == GOOGL",)
        assert any("GOOGL" in rules for d, rules in rec.got if d == "leaf0")

    async def main():
        async with TestClient(TestServer(make_app(ctl, TOKENS, compile_process=True))) as client:
            await go(client)
    asyncio.run(main())


def _stored_controller(path: Path) -> tuple[Controller, SubscriptionStore]:
    store = SubscriptionStore(path)
    return Controller(leaf_spine(leaves=2, spines=1, hosts_per_leaf=1), SPEC, "mr", clock=FakeClock(), store=store,
                      deferred=True), store


async def _subscribe_one(c) -> dict:
    return await (await c.post("/v1/subscriptions", json={"filter": "stock == A", "ttl": 10}, headers=H("tok-a"))).json()


def test_several_changes_in_one_request_are_made_all_or_none(tmp_path: Path) -> None:
    ctl, _ = _stored_controller(tmp_path / "subs.db")

    async def go(c):
        one = await _subscribe_one(c)
        r = await c.post("/v1/changes", headers=H("tok-a"), json={"changes": [
            {"op": "subscribe", "filter": "stock == GOOGL and price > 5", "ttl": 20},
            {"op": "unsubscribe", "id": one["id"]},
            {"op": "subscribe", "filter": "stock == MSFT"}]})
        got = await r.json()
        assert r.status == 200, got
        added, removed, other = got["results"]
        assert added["filter"] == "stock == GOOGL and price > 5" and added["ttl"] == 20 and added["host"] == "h0_0"
        assert removed == {"removed": one["id"], "version": one["version"] + 2}
        assert other["ttl"] == 30 and got["version"] == other["version"] == one["version"] + 3
        mine = {s["id"] for s in (await (await c.get("/v1/subscriptions", headers=H("tok-a"))).json())["subscriptions"]}
        assert mine == {added["id"], other["id"]}
        # a bad filter in the middle: refused by its number and position, nothing changed
        r = await c.post("/v1/changes", headers=H("tok-a"), json={"changes": [
            {"op": "unsubscribe", "id": added["id"]}, {"op": "subscribe", "filter": "stock == X and prize > 1"}]})
        said = (await r.json())["error"]
        assert r.status == 400 and said.startswith("change 2: ") and "prize" in said
        # an id of another host, or one removed earlier in the list: 404, nothing changed
        for changes in ([{"op": "unsubscribe", "id": added["id"]}, {"op": "refresh", "id": added["id"], "ttl": 5}],
                        [{"op": "refresh", "id": other["id"], "ttl": 5}, {"op": "unsubscribe", "id": "s999"}]):
            r = await c.post("/v1/changes", headers=H("tok-a"), json={"changes": changes})
            assert r.status == 404 and (await r.json())["error"].startswith("change 2: ")
        r = await c.post("/v1/changes", headers=H("tok-b"), json={"changes": [{"op": "unsubscribe", "id": added["id"]}]})
        assert r.status == 404
        # malformed lists are refused with what a change looks like
        for bad in ({"changes": []}, {"changes": [{"op": "drop"}]}, {"changes": [{"op": "subscribe", "filter": "x", "id": "s1"}]},
                    {"changes": [{"op": "subscribe", "filter": "stock == A"}] * 1001}):
            r = await c.post("/v1/changes", headers=H("tok-a"), json=bad)
            assert r.status in (400, 413) and "error" in await r.json()
        listed = await (await c.get("/v1/subscriptions", headers=H("tok-a"))).json()
        after = {s["id"]: s["ttl"] for s in listed["subscriptions"]}
        assert after == {added["id"]: 20, other["id"]: 30}
    _run(go, ctl)
    assert {r.id for r in SubscriptionStore(tmp_path / "subs.db").live(0)} == {int(i[1:]) for i in ("s2", "s3")}


def test_a_batch_whose_commit_fails_is_taken_back_whole(tmp_path: Path) -> None:
    ctl, store = _stored_controller(tmp_path / "subs.db")

    async def go(c):
        one = await _subscribe_one(c)
        real_commit = store.commit
        store.commit = lambda: (store.db.execute("ROLLBACK"), StoreError("disk full"))[1]     # type: ignore[method-assign]
        r = await c.post("/v1/changes", headers=H("tok-a"), json={"changes": [
            {"op": "subscribe", "filter": "stock == B"}, {"op": "unsubscribe", "id": one["id"]}]})
        assert r.status == 503 and "disk full" in (await r.json())["error"]
        store.commit = real_commit                                                         # type: ignore[method-assign]
        mine = [s["filter"] for s in (await (await c.get("/v1/subscriptions", headers=H("tok-a"))).json())["subscriptions"]]
        assert mine == ["stock == A"]
    _run(go, ctl)
    assert [r.filter for r in store.live(0)] == ["stock == A"]
