"""The event loop the long-running services answer on: uvloop's where it is installed (the
controller's loop is busy end to end under churn; uvloop's transports and scheduling cost it
less per request), asyncio's otherwise or when CAMUS_EVENT_LOOP=asyncio asks for it."""
from __future__ import annotations

import asyncio
import os


def new_event_loop() -> asyncio.AbstractEventLoop:
    if os.environ.get("CAMUS_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
