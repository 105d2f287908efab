"""What every HTTP server we run (the controller's service, the host agent) allows a client: a
request line and headers within HEADER_TIMEOUT_S of connecting or of the previous response (a
connection that sends nothing, or half a request, is closed), a body within BODY_TIMEOUT_S (else
408), and a malformed request answered 400 and logged as one line, not as a server error with
aiohttp's traceback."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

HEADER_TIMEOUT_S = 15.0
BODY_TIMEOUT_S = 60.0


def server_options() -> dict[str, Any]:
    """For web.run_app / AppRunner: aiohttp closes a connection idle this long, counting from
    the connection's start (a request that never completes its headers) and between requests."""
    return {"keepalive_timeout": HEADER_TIMEOUT_S}


@web.middleware
async def body_in_time(request: web.Request, handler: Any) -> web.StreamResponse:
    """Read the body (bounded by client_max_size) within BODY_TIMEOUT_S; handlers then read the
    copy aiohttp keeps."""
    if request.can_read_body:
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                await request.read()
        except TimeoutError:
            raise web.HTTPRequestTimeout(text=f"the request body did not arrive within {BODY_TIMEOUT_S:g} s\n") from None
    return await handler(request)


class _ClientErrorsAsOneLine(logging.Filter):
    """aiohttp logs a request it could not parse (a header line too long, a bad request line)
    at ERROR with a traceback, though it answered 400: the client's mistake, one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            said = str(exc.message).splitlines()[0][:200] if exc.message else type(exc).__name__
            record.msg, record.args = f"{record.getMessage()}: {exc.code} {said}", ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_FILTER = _ClientErrorsAsOneLine()


def quiet_client_errors() -> None:
    logger = logging.getLogger("aiohttp.server")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
