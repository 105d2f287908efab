"""The host agent: on an XDP host, receives the tables the controller computed for it and
applies them with the data plane's atomic update (attaching first if needed).

    POST /v1/tables   {"rules": "...", "digest": "..."}  -> 200 {"digest", "summary"}
    POST /v1/changes  {"base": "...", "digest": "...", "added": [...], "removed": [...]}
                      -> 200 {"digest", "summary"} | 409 (the agent does not hold `base`)
    GET  /v1/status

The rules are compiled here against the agent's spec, then swapped in as one update: a packet
sees the old tables or the new ones. A rule set that does not compile or does not fit is
refused (4xx) and the tables in place keep serving.

A change of a few rule lines against the tables the agent holds (`/v1/changes`, the digest it
holds as `base`) goes to the maps as a delta through a `LiveClassifier`, in milliseconds; an
agent that holds other tables, or rules the delta path does not take, answers 409 and the
controller sends the whole rule set instead.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from . import http_limits

from .tls import peer_names


MAX_BODY = 512 * 1024 * 1024


class Conflict(Exception):
    """The change is not against the tables the agent holds (HTTP 409)."""


@dataclass
class Agent:
    iface: str
    spec_path: str
    token: str
    ports_path: str | None = None
    mode: str = "native"
    digest: str = ""
    applied: int = 0
    rules: int = 0                  # rules in the tables it holds (the controller's restart hold reads it)
    last_error: str = ""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="camus-agent-")))
    compiler: Any = None            # IncrementalCompiler for the spec, made on the first push
    live: Any = None                # LiveClassifier holding the interface while changes come as deltas
    hold: Any = None                # the interface's lock, held while the agent runs (dataplane/installed.py)

    def hold_interface(self) -> None:
        """Hold the interface for as long as the agent runs: `camus-xdp update`, `detach` and a
        second agent are refused, naming this one (a whole write beside the agent would leave
        its next delta written against tables no longer serving, its digest naming tables that
        are not). Waits for a command that holds it; DataplaneError when another agent does."""
        from camus.dataplane.installed import hold_unit
        if self.hold is None:
            self.hold = hold_unit(self.iface, f"the host agent (pid {os.getpid()})")

    def _held(self) -> None:
        from camus.dataplane.program import DataplaneError
        try:
            self.hold_interface()
        except (DataplaneError, OSError) as exc:
            raise RuntimeError(f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)) from None

    def apply(self, rules: str, digest: str) -> str:
        """Compile and install; raises ValueError (bad rules) or RuntimeError (data plane)."""
        from camus.compiler.compile import CompileOptions
        from camus.compiler.incremental import IncrementalCompiler
        from camus.compiler.language.errors import CompileError, CompileErrors
        from camus.compiler.language.spec_parser import load_spec
        from camus.dataplane import installed as state
        from camus.dataplane import runtime
        path = self.workdir / f"rules-{digest}.txt"
        path.write_text(rules)
        self._release_live()                   # a whole update owns the interface again
        try:
            if self.compiler is None:          # kept warm: the next rule set is compiled incrementally
                self.compiler = IncrementalCompiler(load_spec(self.spec_path), CompileOptions())
            compiled = self.compiler.compile(rules, str(path))
        except (CompileErrors, CompileError) as exc:
            raise ValueError(str(exc)) from None
        self._held()                           # (a bad rule set was refused before this)
        try:
            if any(i.iface == self.iface for i in state.installed()):
                report = runtime.update(self.iface, compiled, str(path), hold=self.hold)
                summary = (f"{report.old_entries} -> {report.new_entries} entries in {report.seconds * 1000:.0f} ms; "
                           f"{len(report.added)} rules added, {len(report.removed)} removed"
                           if report.written else "unchanged: the same tables are live, nothing written")
            else:
                runtime.attach(self.iface, compiled, self.spec_path, str(path), mode=self.mode,
                               ports_path=self.ports_path)
                summary = f"attached to {self.iface}"
        except Exception as exc:                     # the data plane says why; old tables stay
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        self.digest, self.applied = digest, self.applied + 1
        self.rules = sum(1 for line in rules.splitlines() if line.strip())
        for old in self.workdir.glob("rules-*.txt"):     # only the live rule file is kept
            if old != path:
                old.unlink(missing_ok=True)
        self._go_live()
        return summary

    def _go_live(self) -> str:
        """Take the interface over for deltas, handing the compiler that holds the set to a live
        classifier. Called inside each whole update (which the controller waits long for): built
        lazily by the first delta it took 30 s at 1M subscriptions, past the delta's timeout, and
        the controller fell back to a whole update on every change. Returns why not, if the
        delta path cannot take the rules (wide fields, a layout that does not fit): they keep
        the whole updates."""
        from camus.compiler.compile import CompileOptions
        from camus.dataplane.live import LiveClassifier
        from camus.dataplane.program import DataplaneError
        try:
            self.live = LiveClassifier(self.iface, CompileOptions(), compiler=self.compiler, hold=self.hold)
        except DataplaneError as exc:
            return str(exc)
        self.compiler = None
        return ""

    def apply_changes(self, added: list[str], removed: list[str], base: str, digest: str) -> str:
        """Apply rule lines added and removed as a delta. Raises Conflict (the caller sends
        the whole set), ValueError (bad rules) or RuntimeError (data plane); nothing changes then."""
        from camus.compiler.backends.ebpf.contents import CapacityError
        from camus.compiler.incremental import NotLive
        from camus.compiler.language.errors import CompileError, CompileErrors
        from camus.dataplane.program import DataplaneError
        if not self.digest or base != self.digest:
            raise Conflict(f"holding {repr(self.digest) if self.digest else 'nothing'}, not {base!r}")
        self._held()
        if self.live is None:          # e.g. a restarted agent: take over what is attached
            why = self._go_live()
            if self.live is None:
                raise Conflict(why)
        try:
            report = self.live.apply(added, removed)
        except (CompileErrors, CompileError) as exc:
            raise ValueError(str(exc)) from None
        except (KeyError, NotLive) as exc:            # not what it holds, or rules only a whole update takes
            raise Conflict(str(exc)) from None
        except DataplaneError as exc:
            if isinstance(exc.__cause__, CapacityError):   # past the program: a whole update grows it
                raise Conflict(f"{exc}; the whole set grows the program") from None
            raise RuntimeError(str(exc)) from None
        self.digest, self.applied = digest, self.applied + 1
        self.rules += len(added) - len(removed)
        how = "whole set written into the other bank" if report.whole else "delta"
        return (f"{len(added)} rules added, {len(removed)} removed: {report.writes} map entries ({how}) in "
                f"{report.compile_ms + report.write_ms:.1f} ms")

    def _release_live(self) -> None:
        if self.live is not None:
            self.live.close()
            self.compiler = self.live.compiler    # warm: the next whole set compiles incrementally
            self.live = None

    def close(self) -> None:
        """Release the interface's maps and remove the agent's working directory (on exit)."""
        import shutil
        self._release_live()
        if self.hold is not None:
            self.hold.release()
            self.hold = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def make_agent_app(agent: Agent, controller_names: frozenset[str] = frozenset()) -> web.Application:
    """`controller_names`: under mutual TLS, the names one of which the client's verified
    certificate must carry (the controller's): a certificate the same CA gave another host is
    refused, and so is a token replayed without the controller's key."""
    lock = asyncio.Lock()

    def authorised(request: web.Request) -> None:
        if controller_names:
            ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
            names = peer_names(ssl_object.getpeercert() if ssl_object is not None else None)
            if not names & controller_names:
                raise web.HTTPForbidden(text=json.dumps({"error": f"only the controller pushes tables here; this "
                                                                  f"client's certificate names {sorted(names) or 'nothing'}"}),
                                        content_type="application/json")
        if not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {agent.token}"):
            raise web.HTTPUnauthorized(text='{"error": "bad token"}', content_type="application/json")

    async def tables(request: web.Request) -> web.Response:
        authorised(request)
        try:
            data = await request.json()
            rules, digest = str(data["rules"]), str(data["digest"])
        except (json.JSONDecodeError, KeyError, TypeError):
            return web.json_response({"error": "expected {rules, digest}"}, status=400)
        return await applied(agent.apply, rules, digest)

    async def applied(fn: Callable[..., str], *args: Any) -> web.Response:
        """Run one update at a time off the event loop; its refusal as an HTTP status."""
        async with lock:
            try:
                summary = await asyncio.to_thread(fn, *args)
            except Conflict as exc:
                return web.json_response({"error": str(exc)}, status=409)
            except (ValueError, RuntimeError) as exc:
                agent.last_error = str(exc)
                return web.json_response({"error": str(exc)}, status=422 if isinstance(exc, ValueError) else 503)
        agent.last_error = ""
        return web.json_response({"digest": agent.digest, "summary": summary})

    async def changes(request: web.Request) -> web.Response:
        authorised(request)
        try:
            data = await request.json()
            if not isinstance(data["added"], list) or not isinstance(data["removed"], list):
                raise TypeError("added and removed are lists of rule lines")
            added, removed = [str(x) for x in data["added"]], [str(x) for x in data["removed"]]
            base, digest = str(data["base"]), str(data["digest"])
        except (json.JSONDecodeError, KeyError, TypeError):
            return web.json_response({"error": "expected {base, digest, added, removed}"}, status=400)
        return await applied(agent.apply_changes, added, removed, base, digest)

    async def status(request: web.Request) -> web.Response:
        authorised(request)
        return web.json_response({"iface": agent.iface, "digest": agent.digest, "applied": agent.applied,
                                  "rules": agent.rules, "last_error": agent.last_error})

    async def cleanup(app: web.Application) -> None:
        agent.close()

    # a whole rule set is one request body: 1M subscriptions are tens of MB (aiohttp's default: 1 MB)
    http_limits.quiet_client_errors()
    app = web.Application(client_max_size=MAX_BODY, middlewares=[http_limits.body_in_time])
    app.add_routes([web.post("/v1/tables", tables), web.post("/v1/changes", changes),
                    web.get("/v1/status", status)])
    app.on_cleanup.append(cleanup)
    return app
