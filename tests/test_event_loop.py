"""The services' event loop: uvloop's (a dependency), asyncio's when CAMUS_EVENT_LOOP=asyncio."""
from __future__ import annotations

import asyncio

import uvloop

from camus.event_loop import new_event_loop


def test_services_answer_on_uvloop_unless_asked_for_asyncio(monkeypatch) -> None:
    monkeypatch.delenv("CAMUS_EVENT_LOOP", raising=False)
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
    finally:
        loop.close()
    monkeypatch.setenv("CAMUS_EVENT_LOOP", "asyncio")
    loop = new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop) and isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()
