"""The subscription API's request input, checked: the JSON body, TTLs, the fields an endpoint
takes, a status request's wait arguments. Each refusal is an HTTP error with a JSON reason."""
from __future__ import annotations

import json
import math

from aiohttp import web

from .checks import SubscriptionError, numbered, sub_id_number
from .shared_store import ADD, REFRESH, REMOVE, Change

MAX_WAIT_S = 60.0                                  # the longest a status request waits for a version


def percentiles(xs: list[float]) -> dict:
    if not xs:
        return {"changes": 0}
    return {"changes": len(xs), "ms_p50": round(xs[len(xs) // 2] * 1e3, 2),
            "ms_p99": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3, 2), "ms_max": round(xs[-1] * 1e3, 2)}


async def body(request: web.Request) -> dict:
    try:
        raw = await request.read() if request.body_exists else b""      # (read once already: body_in_time)
        data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body is not JSON (UTF-8)"}),
                                 content_type="application/json")
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body must be a JSON object"}),
                                 content_type="application/json")
    return data


def ttl_seconds(value: object) -> float:
    """A TTL from a request body: a finite number of seconds (bools and strings are refused; an
    integer too large for a float, such as 1 followed by 400 zeros, too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SubscriptionError("ttl must be a number of seconds")
    try:
        seconds = float(value)
    except OverflowError:
        raise SubscriptionError("ttl must be a number of seconds, not one with "
                                f"{len(str(value))} digits") from None
    if not math.isfinite(seconds):
        raise SubscriptionError("ttl must be a number of seconds")
    return seconds


def check_fields(data: dict, host: str, allowed: tuple[str, ...]) -> None:
    """Refuse fields the endpoint does not take, and a `host` other than the token's: a token
    acts for its own host only (it used to be ignored, so h1's token silently subscribed h1)."""
    named = data.get("host", host)
    if named != host:
        raise web.HTTPForbidden(text=json.dumps({"error": f"this token acts for host {host}, not {named!r}"}),
                                content_type="application/json")
    unknown = sorted(str(k) for k in data if k not in allowed and k != "host")
    if unknown:
        raise web.HTTPBadRequest(text=json.dumps({"error": f"unknown field(s) {', '.join(unknown)}; this request "
                                                           f"takes {', '.join(allowed)}"}),
                                 content_type="application/json")


def http_error(status: int, message: str) -> web.HTTPException:
    kind = {404: web.HTTPNotFound, 409: web.HTTPConflict}.get(status, web.HTTPBadRequest)
    return kind(text=json.dumps({"error": message}), content_type="application/json")


def wait_args(query) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    try:
        version = int(query["wait_version"])
        timeout = float(query.get("timeout", "10"))
    except ValueError:
        version, timeout = -1, -1.0
    if version < 0 or not 0 <= timeout <= MAX_WAIT_S:      # NaN fails the comparison too
        raise web.HTTPBadRequest(text=json.dumps({"error": "wait_version must be a version (an integer >= 0) and "
                                                           f"timeout a number of seconds in [0, {MAX_WAIT_S:g}]"}),
                                 content_type="application/json")
    return version, timeout


MAX_CHANGES = 1000                                 # changes one POST /v1/changes may carry
CHANGE_FIELDS = {"subscribe": ("filter", "ttl"), "unsubscribe": ("id",), "refresh": ("id", "ttl")}


def parse_changes(data: dict, host: str, default_ttl: float) -> list[Change]:
    """POST /v1/changes's list: each `{"op": "subscribe", "filter": F, "ttl": T}`,
    `{"op": "unsubscribe", "id": ID}` or `{"op": "refresh", "id": ID, "ttl": T}` (ttl optional);
    SubscriptionError naming the first change that is not one of them."""
    items = data.get("changes")
    if not isinstance(items, list) or not items:
        raise SubscriptionError('changes must be a non-empty list, e.g. [{"op": "subscribe", "filter": '
                                '"stock == GOOGL", "ttl": 30}, {"op": "unsubscribe", "id": "s12"}]')
    if len(items) > MAX_CHANGES:
        raise SubscriptionError(f"at most {MAX_CHANGES} changes a request ({len(items)} given)", 413)
    out = []
    for i, item in enumerate(items):
        try:
            out.append(_change(item, host, default_ttl))
        except SubscriptionError as exc:
            raise numbered(exc, i, len(items)) from None
    return out


def _change(item: object, host: str, default_ttl: float) -> Change:
    if not isinstance(item, dict) or item.get("op") not in CHANGE_FIELDS:
        raise SubscriptionError(f"each change is an object with op {', '.join(CHANGE_FIELDS)}")
    op = str(item["op"])
    unknown = sorted(str(k) for k in item if k != "op" and k not in CHANGE_FIELDS[op])
    if unknown:
        raise SubscriptionError(f"{op} takes {', '.join(CHANGE_FIELDS[op])}, not {', '.join(unknown)}")
    if op == "subscribe":
        if not isinstance(item.get("filter"), str):
            raise SubscriptionError("filter must be a string, e.g. 'stock == GOOGL and price > 50'")
        return Change(ADD, host, filter=item["filter"], ttl=ttl_seconds(item.get("ttl", default_ttl)))
    if not isinstance(item.get("id"), str):
        raise SubscriptionError(f"{op} needs the subscription's id (a string such as \"s12\")")
    number = sub_id_number(host, item["id"])
    if op == "unsubscribe":
        return Change(REMOVE, host, number)
    return Change(REFRESH, host, number, ttl=ttl_seconds(item["ttl"]) if "ttl" in item else None)
