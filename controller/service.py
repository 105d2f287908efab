"""The subscription service: HTTP/JSON over the controller (aiohttp), loopback by default.

    POST   /v1/subscriptions              {"filter": "...", "ttl": 30}  -> 201 {"id", "expires_in", ...}
    GET    /v1/subscriptions              your subscriptions
    POST   /v1/subscriptions/{id}/refresh {"ttl": 30}? (soft state: refresh before it lapses)
    DELETE /v1/subscriptions/{id}
    POST   /v1/changes                    {"changes": [{"op": "subscribe", "filter": "...", "ttl": 30},
                                          {"op": "unsubscribe", "id": "s12"}, {"op": "refresh", "id": "s3"}]}
                                          -> {"results": [...], "version"}: up to 1,000, all or none
    GET    /v1/status                     devices, sync state, push errors, versions
    GET    /v1/status?wait_version=N&timeout=S   the same, once every pushed device holds version
                                          N (or after S seconds, at most 60; default 10)

Every request carries `Authorization: Bearer <token>`; the token names the host whose
subscriptions it may touch (tokens file: `token: host` lines). A change is acknowledged as soon
as the filter is validated (with the subscription-state `version` it made); a background task
compiles what changed since its last pass (a burst of changes is one compile), pushes pending
device tables, retries failures and expires lapsed subscriptions. A client that must know its
change is in the data planes waits until every pushed device's `applied_version` in
/v1/status reaches its `version`: `?wait_version=` answers when it does, so a client waiting
for its change asks once instead of polling (`SubscriptionClient.wait_installed`).
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import time

from aiohttp import web

from . import http_limits
from .tls import HandshakeFailures

from .api_input import body, check_fields, http_error, parse_changes, percentiles, ttl_seconds, wait_args
from .checks import check_changes
from .commits import Commits
from .compile_worker import CompileProcess
from .core import Controller, SubscriptionError
from .shared_front import STATUS_S, SharedFront
from .shared_store import ADD, REMOVE
from .store import StoredSubscription, StoreError
from .tokens import TokenBook
from .verifying import NotCheckable, run_job, verify_job

log = logging.getLogger("camus.controller")
audit = logging.getLogger("camus.audit")          # subscription changes: who, what, when
TICK_S = 0.1
CHECKPOINT_S = 1.0   # how often the database's write-ahead log is checkpointed, off the event loop
CONTROLLER = web.AppKey("controller", object)     # Controller (one process), or None: SHARED's
SHARED = web.AppKey("shared", object)              # SharedFront (several processes, PostgreSQL), or None
TOKENS = web.AppKey("tokens", TokenBook)
DEFAULT_TTL = web.AppKey("default_ttl", float)
LOCK = web.AppKey("lock", asyncio.Lock)
WAKE = web.AppKey("wake", asyncio.Event)
TASK = web.AppKey("task", asyncio.Task)
COMPILER = web.AppKey("compiler", object)          # CompileProcess, or None: a thread
COMMITS = web.AppKey("commits", object)            # Commits (one commit per loop turn), or None
CHANGE_TIMES = web.AppKey("change_times", collections.deque)   # seconds, the last changes' handling
TIMED = 10_000                                     # how many of them /v1/status summarises
TOKEN_ID = web.RequestKey("token_id", str)       # the request's token fingerprint (audit lines)
SUMMARY = web.AppKey("summary", list)              # [when made, the summary /v1/status shows]
HELD = web.AppKey("held", list)                    # [an Event set, and replaced, when the held version may grow]
CLOSING = web.AppKey("closing", list)              # [True] once shutting down: waiting requests answer


@web.middleware
async def _timed(request: web.Request, handler):   # type: ignore[no-untyped-def]
    """How long this process takes to answer each change (subscribe, refresh, unsubscribe),
    from its handler's start (waits for the lock included): /v1/status reports the last ones'
    p50 / p99 / max, so a slow API can be told apart from a client's or the machine's delays."""
    if request.method == "GET":
        return await handler(request)
    t0 = time.perf_counter()
    try:
        return await handler(request)
    finally:
        request.app[CHANGE_TIMES].append(time.perf_counter() - t0)


def _summary(app: web.Application) -> dict:
    """The change timings' summary, sorted at most once a second (clients poll /v1/status)."""
    held = app[SUMMARY]
    if time.monotonic() - held[0] >= 1.0:
        times: collections.deque = app[CHANGE_TIMES]
        held[:] = [time.monotonic(), percentiles(sorted(times))]
    return held[1]


def _host(request: web.Request) -> str:
    """The host the request's token acts for (401 without a known token); the token's
    fingerprint is kept on the request for the audit line."""
    auth = request.headers.get("Authorization", "")
    token = auth[7:] if auth.startswith("Bearer ") else ""
    found = request.app[TOKENS].who(token) if token else None
    if found is None:
        raise web.HTTPUnauthorized(text=json.dumps({"error": "missing or unknown token"}),
                                   content_type="application/json")
    request[TOKEN_ID] = found[1]
    return found[0]


def _audit(request: web.Request, host: str, what: str, sub_id: str, text: str = "") -> None:
    """One line per subscription change: who (host, token fingerprint, peer address), what,
    when (the log's time)."""
    peer = request.remote or "?"
    audit.info("%s %s host=%s token=%s peer=%s%s", what, sub_id, host, request.get(TOKEN_ID, "?"), peer,
               f" filter={text!r}" if text else "")


def _controller(app: web.Application) -> Controller | None:
    """The Controller of this process: its own, or (shared store) while it owns the devices."""
    shared = app[SHARED]
    c = shared.controller if isinstance(shared, SharedFront) else app[CONTROLLER]
    return c if isinstance(c, Controller) else None


def _local(app: web.Application) -> Controller:
    """The Controller of a one-process service (the handlers' path without a shared store)."""
    c = app[CONTROLLER]
    assert isinstance(c, Controller)
    return c


def _stored_view(sub: StoredSubscription) -> dict:
    return {"id": f"s{sub.id}", "host": sub.host, "filter": sub.filter, "ttl": sub.ttl,
            "expires_in": round(max(0.0, sub.expires_wall - time.time()), 3)}


def _fail(exc: SubscriptionError) -> web.Response:
    return web.json_response({"error": str(exc)}, status=exc.status)


async def _stored(request: web.Request) -> None:
    """Wait until the store has committed every write made so far (this request's included)."""
    commits = request.app[COMMITS]
    if isinstance(commits, Commits):
        await commits.stored()


def _unstored(exc: StoreError) -> web.Response:
    log.error("%s", exc)
    return web.json_response({"error": f"{exc}; try again"}, status=503)


async def add(request: web.Request) -> web.Response:
    host = _host(request)
    data = await body(request)
    check_fields(data, host, ("filter", "ttl"))
    shared = request.app[SHARED]
    try:
        ttl = ttl_seconds(data.get("ttl", request.app[DEFAULT_TTL]))
        if not isinstance(data.get("filter", ""), str):
            raise SubscriptionError("filter must be a string, e.g. 'stock == GOOGL and price > 50'")
        if isinstance(shared, SharedFront):
            done = await shared.add(host, str(data.get("filter", "")), ttl)
            _audit(request, host, "subscribe", f"s{done.sub.id}", done.sub.filter)
            return web.json_response({**_stored_view(done.sub), "version": done.version}, status=201)
        c = _local(request.app)
        async with request.app[LOCK]:
            sub = c.add(host, str(data.get("filter", "")), ttl)
            version = c.version
    except SubscriptionError as exc:
        return _fail(exc)
    except StoreError as exc:
        return _unstored(exc)
    try:
        await _stored(request)
    except StoreError as exc:                     # its row rolled back: out of memory too
        async with request.app[LOCK]:
            if sub.id in c.subs:
                c.forget(host, sub.id)
        request.app[WAKE].set()
        return _unstored(exc)
    _audit(request, host, "subscribe", sub.id, sub.filter)
    request.app[WAKE].set()
    return web.json_response({**sub.view(c.clock()), "version": version}, status=201)


async def listing(request: web.Request) -> web.Response:
    host = _host(request)
    shared = request.app[SHARED]
    try:
        subs = (await shared.listing(host) if isinstance(shared, SharedFront)
                else _local(request.app).subscriptions_of(host))
    except StoreError as exc:
        return _unstored(exc)
    return web.json_response({"host": host, "subscriptions": subs})


async def refresh(request: web.Request) -> web.Response:
    host = _host(request)
    data = await body(request)
    check_fields(data, host, ("ttl",))
    shared = request.app[SHARED]
    try:
        ttl = ttl_seconds(data["ttl"]) if "ttl" in data else None
        if isinstance(shared, SharedFront):
            done = await shared.refresh(host, request.match_info["id"], ttl)
            view = _stored_view(done.sub)
        else:
            c = _local(request.app)
            async with request.app[LOCK]:
                sub = c.refresh(host, request.match_info["id"], ttl)
            await _stored(request)
            view = sub.view(c.clock())
    except SubscriptionError as exc:
        return _fail(exc)
    except StoreError as exc:
        return _unstored(exc)
    if "ttl" in data:                                # a keep-alive alone is not a change
        _audit(request, host, f"ttl={view['ttl']:g}", view["id"])
    return web.json_response(view)


async def remove(request: web.Request) -> web.Response:
    host = _host(request)
    shared = request.app[SHARED]
    try:
        if isinstance(shared, SharedFront):
            done = await shared.remove(host, request.match_info["id"])
            _audit(request, host, "unsubscribe", request.match_info["id"])
            return web.json_response({"removed": request.match_info["id"], "version": done.version})
        c = _local(request.app)
        async with request.app[LOCK]:
            sub = c.remove(host, request.match_info["id"])
            version = c.version
    except SubscriptionError as exc:
        return _fail(exc)
    except StoreError as exc:
        return _unstored(exc)
    try:
        await _stored(request)
    except StoreError as exc:                     # its delete rolled back: the row is there, so in memory too
        async with request.app[LOCK]:
            c.restore(sub)
        request.app[WAKE].set()
        return _unstored(exc)
    _audit(request, host, "unsubscribe", request.match_info["id"])
    request.app[WAKE].set()
    return web.json_response({"removed": request.match_info["id"], "version": version})


async def changes(request: web.Request) -> web.Response:
    """POST /v1/changes: several changes of the token's host in one request (a broker relaying
    its clients' subscriptions; under churn, one request instead of hundreds), all or none."""
    host = _host(request)
    data = await body(request)
    check_fields(data, host, ("changes",))
    shared = request.app[SHARED]
    try:
        items = parse_changes(data, host, request.app[DEFAULT_TTL])
        if isinstance(shared, SharedFront):
            items = await shared.checked(host, items)
            made = [(d.version, _stored_view(d.sub)) for d in await shared.change_many(host, items)]
        else:
            c = _local(request.app)
            items = await check_changes(c.topology, c.spec, c.max_ttl, host, items)
            async with request.app[LOCK]:
                done = c.change_many(host, items)
            made = [(version, sub.view(c.clock())) for sub, version in done]
            try:
                await _stored(request)
            except StoreError:                    # rolled back: out of memory too
                async with request.app[LOCK]:
                    c.undo([(ch.op, sub) for ch, (sub, _) in zip(items, done)])
                request.app[WAKE].set()
                raise
    except SubscriptionError as exc:
        return _fail(exc)
    except StoreError as exc:
        return _unstored(exc)
    results, said = [], []
    for ch, (version, view) in zip(items, made):
        if ch.op == ADD:
            said.append(f"subscribe {view['id']} filter={view['filter']!r}")
        elif ch.op == REMOVE:
            said.append(f"unsubscribe {view['id']}")
        elif ch.ttl is not None:                   # a keep-alive alone is not a change
            said.append(f"ttl={view['ttl']:g} {view['id']}")
        results.append({"removed": view["id"], "version": version} if ch.op == REMOVE else {**view, "version": version})
    if said:                                       # one audit line for the request, each change in it
        _audit(request, host, "changes", "; ".join(said))
    request.app[WAKE].set()
    return web.json_response({"results": results, "version": max(v for v, _ in made)})


async def status(request: web.Request) -> web.Response:
    """The status now, or (`wait_version=N`) once every pushed device holds version N or
    `timeout` seconds have passed; the answer is the status either way (the client compares)."""
    _host(request)
    c = _controller(request.app)
    shared = request.app[SHARED]
    wait = wait_args(request.query) if "wait_version" in request.query else None
    if c is None and isinstance(shared, SharedFront):      # the owner's status, from the database
        return await _relayed_status(request, shared, wait)
    assert c is not None
    if wait is not None:
        version, timeout = wait
        deadline = time.monotonic() + timeout
        while (c.held_version() < version and not request.app[CLOSING]
               and (left := deadline - time.monotonic()) > 0):
            try:
                await asyncio.wait_for(request.app[HELD][0].wait(), left)
            except asyncio.TimeoutError:
                break
    extra = {"owner": shared.me, "owner_address": shared.address, "answered_by": shared.me,
             "held_version": c.held_version()} if isinstance(shared, SharedFront) else {}
    return web.json_response({**c.status(), **extra, "api": _summary(request.app),
                              "tls_handshake_failures": HandshakeFailures.count})


async def _relayed_status(request: web.Request, shared: SharedFront, wait: tuple[int, float] | None) -> web.Response:
    """A process that does not own the devices answers with what their owner published last;
    waiting for a version, it reads that again until the owner holds it (or the time is up)."""
    try:
        doc = await shared.owner_status()
        if "devices" not in doc:                 # no owner has published a status yet
            return web.json_response({"error": "no controller process owns the devices yet (one takes them within "
                                               f"{shared.lease_s:g} s of the last owner's end); try again"}, status=503)
        if wait is not None:
            version, timeout = wait
            deadline = time.monotonic() + timeout
            while (doc.get("held_version", -1) < version and not request.app[CLOSING]
                   and time.monotonic() < deadline):
                await asyncio.sleep(STATUS_S)
                doc = await shared.owner_status()
    except StoreError as exc:
        return _unstored(exc)
    return web.json_response({**doc, "api": _summary(request.app), "tls_handshake_failures": HandshakeFailures.count})


async def verify(request: web.Request) -> web.Response:
    """GET /v1/devices/{device}/verify: the switch read back and proven to give what the
    controller placed on it (controller/verifying.py). The rules are taken under the lock; the
    read and the proof run in a thread; a push to the device meanwhile makes the answer
    "undecidable" (run it again)."""
    _host(request)
    c = _controller(request.app)
    device = request.match_info["device"]
    if c is None:
        shared = request.app[SHARED]
        where = shared.owner.address if isinstance(shared, SharedFront) else ""
        raise http_error(409, f"this controller does not own the devices now; ask the one that does"
                               f"{' (' + where + ')' if where else ''}")
    async with request.app[LOCK]:
        try:
            job = verify_job(c, device)
        except NotCheckable as exc:
            raise http_error(exc.status, str(exc)) from None
    out = await asyncio.get_running_loop().run_in_executor(None, run_job, c.spec, job)
    st = c.devices.get(device)
    if st is None or st.applied != job.digest:
        out.update({"verdict": "undecidable", "reason": f"{device} was pushed to during the check: run it again"})
        out.pop("counterexample", None)
    return web.json_response(out)


async def _release_waiters(app: web.Application) -> None:
    """On shutdown (before aiohttp waits for the requests in flight): the status requests
    waiting for a version answer now, so a stop is not held up by a client's wait."""
    app[CLOSING].append(True)
    _held_may_have_grown(app)


def _held_may_have_grown(app: web.Application) -> None:
    """Wake the status requests waiting for a version (each checks its own)."""
    held = app[HELD]
    woken, held[0] = held[0], asyncio.Event()
    woken.set()


async def _housekeeping(app: web.Application) -> None:
    """Expire lapsed subscriptions, compile what changed (in a thread, outside the lock: requests
    keep being answered), push pending tables (in a thread: agents compile), retry."""
    shared = app[SHARED]
    c = _controller(app)
    checkpointed = time.monotonic()
    while True:
        due = c.next_push_at() if c is not None else None     # a device waiting out its push interval
        try:
            await asyncio.wait_for(app[WAKE].wait(), TICK_S if due is None or c is None else
                                   min(TICK_S, max(0.0, due - c.clock())))
        except asyncio.TimeoutError:
            pass
        app[WAKE].clear()
        if time.monotonic() - checkpointed >= CHECKPOINT_S:
            if c is not None and c.store is not None:
                await asyncio.to_thread(c.store.checkpoint)
            note = app[TOKENS].refresh()                # tokens rotate without a restart
            if note:
                log.log(logging.WARNING if "not taken" in note else logging.INFO, note)
            checkpointed = time.monotonic()
        if isinstance(shared, SharedFront):          # the lease; the owner follows the store's log
            c = await shared.tick(app[LOCK])
            if c is None:
                continue
        else:
            c = _local(app)
        async with app[LOCK]:
            gone = c.expire() if not isinstance(shared, SharedFront) else []   # (shared: the owner's writes)
            if gone:
                log.info("expired %s", ", ".join(gone))
            batch = c.take_batch() if c.dirty else None
        if batch is not None:
            try:
                worker = app[COMPILER]
                compiled = (await worker.compile(batch.switches) if isinstance(worker, CompileProcess)
                            else await asyncio.to_thread(c.compile_batch, batch))
            except Exception:                      # validated filters compile; log anything else:
                log.exception("compiling version %d failed", batch.version)
                compiled = {}                      # the push compiles again, reports it and retries
            async with app[LOCK]:
                c.install(batch, compiled)
            _held_may_have_grown(app)               # devices whose tables did not change hold it now
        async with app[LOCK]:
            todo = c.pending()
        for d in todo:
            if isinstance(shared, SharedFront) and not shared.may_push():
                break                               # the lease is not ours for certain any more
            ok = await asyncio.to_thread(c.push_one, d)
            if ok:
                _held_may_have_grown(app)
            else:
                log.warning("push to %s failed: %s (retrying)", d, c.devices[d].error)
        if isinstance(shared, SharedFront):
            shared.publish()


async def _start(app: web.Application) -> None:
    c, shared = app[CONTROLLER], app[SHARED]
    store = c.store if isinstance(c, Controller) else None
    if isinstance(shared, SharedFront):
        shared.wake = app[WAKE]
        shared.start(app[LOCK])
    if store is not None:       # one commit for the changes of a loop turn
        app[COMMITS] = Commits(store, asyncio.get_running_loop())
    app[TASK] = asyncio.create_task(_housekeeping(app))


async def _stop(app: web.Application) -> None:
    app[TASK].cancel()
    try:
        await app[TASK]
    except asyncio.CancelledError:
        pass
    worker = app[COMPILER]
    if isinstance(worker, CompileProcess):
        worker.close()
    commits = app[COMMITS]
    if isinstance(commits, Commits):
        commits.close()
    shared = app[SHARED]
    if isinstance(shared, SharedFront):
        await shared.release(app[LOCK])


def make_app(controller: Controller | None, tokens: TokenBook | dict[str, str], default_ttl: float = 30.0,
             compile_process: bool = False, shared: SharedFront | None = None) -> web.Application:
    """`compile_process`: compile in a worker process (the CLI's choice), else in a thread.
    `shared` (and no controller): one of several processes on a shared store."""
    http_limits.quiet_client_errors()
    app = web.Application(middlewares=[http_limits.body_in_time, _timed])
    app[CHANGE_TIMES] = collections.deque(maxlen=TIMED)
    app[COMMITS] = None
    app[SUMMARY] = [float("-inf"), {"changes": 0}]
    if controller is not None and controller.store is not None:
        controller.store.checkpoint_elsewhere()       # the housekeeping task checkpoints, in a thread
    made = controller if controller is not None else shared
    if made is None:
        raise ValueError("make_app needs a Controller or a SharedFront")
    app[COMPILER] = CompileProcess(made.spec, made.options) if compile_process else None
    book = tokens if isinstance(tokens, TokenBook) else TokenBook(tokens)
    app[CONTROLLER], app[SHARED], app[TOKENS], app[DEFAULT_TTL] = controller, shared, book, default_ttl
    app[LOCK], app[WAKE], app[HELD], app[CLOSING] = asyncio.Lock(), asyncio.Event(), [asyncio.Event()], []
    app.add_routes([web.post("/v1/subscriptions", add), web.get("/v1/subscriptions", listing),
                    web.post("/v1/subscriptions/{id}/refresh", refresh),
                    web.delete("/v1/subscriptions/{id}", remove), web.post("/v1/changes", changes),
                    web.get("/v1/status", status),
                    web.get("/v1/devices/{device}/verify", verify)])
    app.on_startup.append(_start)
    app.on_shutdown.append(_release_waiters)
    app.on_cleanup.append(_stop)
    return app
