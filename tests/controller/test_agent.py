"""The host agent's HTTP side without a kernel: it refuses a wrong token, a malformed body and
rules that do not compile (422, with the compiler's position), before the data plane is
touched; its status says what it last refused. (Applying good rules attaches XDP: the mixed
lab test covers that, as root.)"""
from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from camus.controller.agent import Agent, make_agent_app
from tests.conftest import APPS


def _run(agent: Agent, go):
    async def main():
        async with TestClient(TestServer(make_agent_app(agent))) as client:
            return await go(client)
    return asyncio.run(main())


def test_agent_refuses_before_touching_the_data_plane(tmp_path) -> None:
    agent = Agent("cxt-none0", str(APPS / "itch" / "itch.p4"), "secret", workdir=tmp_path)
    auth = {"Authorization": "Bearer secret"}

    async def go(c):
        r = await c.post("/v1/tables", json={"rules": "x", "digest": "d"}, headers={"Authorization": "Bearer nope"})
        assert r.status == 401
        r = await c.post("/v1/tables", data=b"not json", headers=auth)
        assert r.status == 400
        r = await c.post("/v1/tables", json={"rules": "stock == GOOGL and price >> 5 : fwd(1)", "digest": "d1"},
                         headers=auth)
        assert r.status == 422
        body = await r.json()
        assert ":1:" in body["error"] and "price" in body["error"]
        r = await c.get("/v1/status", headers=auth)
        return await r.json()

    status = _run(agent, go)
    assert status["applied"] == 0 and status["digest"] == "" and "error" in status["last_error"]


def test_a_delta_against_tables_the_agent_does_not_hold_is_a_conflict(tmp_path) -> None:
    """409 (the controller then sends the whole set) before anything is touched; a malformed
    delta is 400."""
    agent = Agent("cxt-none0", str(APPS / "itch" / "itch.p4"), "secret", workdir=tmp_path)
    auth = {"Authorization": "Bearer secret"}

    async def go(c):
        r = await c.post("/v1/changes", json={"base": "d0", "digest": "d1", "added": ["stock == X : fwd(1)"],
                                              "removed": []}, headers=auth)
        assert r.status == 409 and "holding nothing" in (await r.json())["error"]
        r = await c.post("/v1/changes", json={"base": "d0", "digest": "d1", "added": "stock == X : fwd(1)",
                                              "removed": []}, headers=auth)
        assert r.status == 400
        # a large rule set is one body (100K subscriptions: several MB): read, not refused for its size
        many = [f"stock == S{i} and price > {i % 999 + 1} : fwd(1)" for i in range(100_000)]
        r = await c.post("/v1/changes", json={"base": "d0", "digest": "d1", "added": many, "removed": []},
                         headers=auth)
        assert r.status == 409

    _run(agent, go)
    assert agent.applied == 0 and agent.live is None
