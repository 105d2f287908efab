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
import logging
import os
import socket
import struct
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from . import http_limits

from .tls import HandshakeFailures, peer_names


log = logging.getLogger("camus.agent")
MAX_BODY = 512 * 1024 * 1024
LOCAL = "local-"                   # digests of rules files a local `update` handed the agent
LOCAL_RUNNER = web.AppKey("local_runner", web.AppRunner)


class Conflict(Exception):
    """The change is not against the tables the agent holds (HTTP 409)."""


def _item_counts(raw: set[str]) -> Counter[str]:
    """How many of the lines give each live item (no rule counters)."""
    from camus.dataplane.live_state import line_texts
    count: Counter[str] = Counter()
    for line in raw:
        for item in line_texts(line):
            count[item] += 1
    return count


class LocalLines:
    """The lines of the last rules file `camus-xdp update` handed the agent, and how many of its
    lines give each live item: the next file is diffed by its changed lines only (100K lines:
    set operations in milliseconds, no rule text stripped twice). Rule counters number rules by
    their place in the file: with them, every line is looked at again."""

    def __init__(self) -> None:
        self.raw: set[str] | None = None
        self.count: Counter[str] = Counter()
        self._next: tuple[set[str], Counter[str]] | None = None

    @property
    def live_count(self) -> int:
        return len(self.count)

    def forget(self) -> None:
        self.raw, self._next = None, None
        self.count = Counter()

    def change(self, text: str, live: Any) -> tuple[list[str], list[str]]:
        """Live lines to add and remove for the file `text` (kept until commit())."""
        from camus.compiler.incremental import live_items
        from camus.dataplane.live_state import line_texts
        n = live.compiler.options.count_rules
        raw = set(text.splitlines())
        if self.raw is None or n:
            items = live_items(line_texts(text), n)
            old = set(live.compiler.live_slots)
            self._next = (raw, _item_counts(raw))
            return sorted(items - old), sorted(old - items)
        delta: Counter[str] = Counter()       # per live item: lines giving it, gained or lost
        before = self.raw
        for line in before.symmetric_difference(raw):       # (one pass over the two sets)
            gone = -1 if line in before else 1
            for item in line_texts(line):
                delta[item] += gone
        had = self.count.get
        added = sorted(i for i, d in delta.items() if d > 0 and had(i, 0) == 0)
        removed = sorted(i for i, d in delta.items() if d < 0 and had(i, 0) + d <= 0)
        self._next = (raw, delta)
        return added, removed

    def adopt(self, path: str, live: Any) -> None:
        """Start from the file the attached tables were written from, when its lines are exactly
        the live ones (the first local update is then a diff of its changed lines too)."""
        from camus.compiler.incremental import live_items
        from camus.dataplane.live_state import line_texts
        if live.compiler.options.count_rules:
            return
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return
        if live_items(line_texts(text), 0) == set(live.compiler.live_slots):
            raw = set(text.splitlines())
            self.raw, self.count, self._next = raw, _item_counts(raw), None

    def commit(self) -> None:
        if self._next is None:
            return
        raw, change = self._next
        if self.raw is None:                  # a whole file: `change` is every item's count
            self.count = change
        else:
            for item, d in change.items():
                n = self.count.get(item, 0) + d
                if n > 0:
                    self.count[item] = n
                else:
                    self.count.pop(item, None)
        self.raw, self._next = raw, None


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
    local_lines: LocalLines = field(default_factory=lambda: LocalLines())   # the last local file's lines

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

    def apply(self, rules: str, digest: str, source: str | None = None) -> str:
        """Compile and install; raises ValueError (bad rules) or RuntimeError (data plane).
        `source`: the file the rules came from (a local update), named in the state file."""
        from camus.compiler.compile import CompileOptions
        from camus.compiler.incremental import IncrementalCompiler
        from camus.compiler.language.errors import CompileError, CompileErrors
        from camus.compiler.language.spec_parser import load_spec
        from camus.dataplane import installed as state
        from camus.dataplane import runtime
        path = self.workdir / f"rules-{digest}.txt"
        path.write_text(rules)
        self.local_lines.forget()              # the live lines are the controller's now
        self._release_live()                   # a whole update owns the interface again
        try:
            if self.compiler is None:          # kept warm: the next rule set is compiled incrementally
                self.compiler = IncrementalCompiler(load_spec(self.spec_path), CompileOptions())
            compiled = self.compiler.compile(rules, source or str(path))
        except (CompileErrors, CompileError) as exc:
            raise ValueError(str(exc)) from None
        self._held()                           # (a bad rule set was refused before this)
        try:
            if any(i.iface == self.iface for i in state.installed()):
                report = runtime.update(self.iface, compiled, source or str(path), hold=self.hold)
                summary = (f"{report.old_entries} -> {report.new_entries} entries in {report.seconds * 1000:.0f} ms; "
                           f"{len(report.added)} rules added, {len(report.removed)} removed"
                           if report.written else "unchanged: the same tables are live, nothing written")
            else:
                runtime.attach(self.iface, compiled, self.spec_path, source or str(path), mode=self.mode,
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
        self.local_lines.forget()
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

    def apply_file(self, rules_path: str) -> tuple[dict[str, Any], Callable[[], None]]:
        """`camus-xdp update IFACE --rules FILE` on this host while the agent holds IFACE: the
        file's changed lines as a delta through the live classifier (milliseconds), or the whole
        file when the agent holds no live tables or the change needs a whole write. Returns what
        changed and what is left to do once the caller has answered: the state file brought up
        to date, so it names the file (`status`). The controller's next change is then against
        tables the agent no longer holds (409) and its next push is the whole set again. Raises
        ValueError (bad rules, with their position) or RuntimeError (data plane); nothing
        changes then."""
        import time
        import zlib
        from camus.compiler.incremental import NotLive, split_line
        from camus.compiler.language.errors import CompileError, CompileErrors
        from camus.compiler.language.rules_parser import parse_rules
        from camus.dataplane.program import DataplaneError
        t0 = time.perf_counter()
        path = str(Path(rules_path).resolve())
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{rules_path}: {exc}") from None
        digest = f"{LOCAL}{zlib.crc32(text.encode()):08x}-{len(text)}"   # ours alone: no need for a slow hash
        if self.digest and not self.digest.startswith(LOCAL):
            raise Conflict(f"{self.iface} is held for live changes by the host agent (pid {os.getpid()}), which "
                           "serves the controller's tables: change subscriptions through the controller "
                           "(`camus-xdp subscribe`), or stop the agent to manage the rules here")
        self._held()
        if self.live is None:
            self._go_live()                   # the tables attached (not attached: the whole path)
        live = self.live
        if live is not None:
            old_lines = live.inst.rule_lines
            added, removed = self.local_lines.change(text, live)
            try:
                report = live.apply(added, removed)
            except (CompileErrors, CompileError) as exc:
                self.local_lines.forget()
                try:                          # a typo: said with its position, the live tables kept
                    parse_rules(text, path)
                except (CompileErrors, CompileError) as parsed:
                    raise ValueError(str(parsed)) from None
                log.info("%s: a line does not compile alone (%s): the whole file is compiled", self.iface, exc)
            except (KeyError, NotLive, DataplaneError):
                self.local_lines.forget()     # rules only a whole write takes: the whole path
            else:
                self.local_lines.commit()
                self.digest, self.applied, self.rules = digest, self.applied + 1, self.local_lines.live_count

                def finish() -> None:
                    live.inst.rules = path
                    live.save(live.rule_lines_after(old_lines, added, removed))

                def texts(lines: list[str]) -> list[str]:
                    return sorted({split_line(ln)[0] for ln in lines})
                return ({"written": bool(report.writes), "path": "whole" if report.whole else "delta",
                         "added": texts(added), "removed": texts(removed),
                         "ms": round((time.perf_counter() - t0) * 1e3, 1)}, finish)
        summary = self.apply(text, digest, source=path)
        return ({"written": True, "path": "whole", "added": [], "removed": [], "summary": summary,
                 "ms": round((time.perf_counter() - t0) * 1e3, 1)}, lambda: None)

    def take_over(self) -> None:
        """Hold the attached unit's tables for deltas now (nothing attached, or rules the delta
        path does not take: the first update says so)."""
        from camus.dataplane.installed import state_path
        if self.live is None and state_path(self.iface).exists():
            try:
                self._held()
            except RuntimeError:
                return
            self._go_live()
            if self.live is not None and not self.digest:
                self.local_lines.adopt(self.live.inst.rules, self.live)

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


def _peer_uid(sock: socket.socket) -> int:
    """The connecting process's user (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def local_socket(unit: str) -> Path:
    """Where an agent holding `unit` takes `camus-xdp update` from this host."""
    from camus.dataplane.installed import STATE_ROOT, valid_unit
    return STATE_ROOT / f"{valid_unit(unit)}.agent"


def make_agent_app(agent: Agent, controller_names: frozenset[str] = frozenset(),
                   local: Path | None = None) -> web.Application:
    """`controller_names`: under mutual TLS, the names one of which the client's verified
    certificate must carry (the controller's): a certificate the same CA gave another host is
    refused, and so is a token replayed without the controller's key. `local`: a Unix socket
    where `camus-xdp update` on this host hands the agent its rules file (plain HTTP, root's
    alone, never on the network side)."""
    lock = asyncio.Lock()
    pending: set[asyncio.Task[None]] = set()       # state-file saves after local updates

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

    async def locked(fn: Callable[..., Any], *args: Any) -> Any:
        """Run one update at a time off the event loop; its refusal raised as an HTTP status
        (409: not the tables the agent holds, 422: the rules, 503: the data plane)."""
        async with lock:
            try:
                out = await asyncio.to_thread(fn, *args)
            except Conflict as exc:
                raise web.HTTPConflict(text=json.dumps({"error": str(exc)}), content_type="application/json")
            except (ValueError, RuntimeError) as exc:
                agent.last_error = str(exc)
                refusal = web.HTTPUnprocessableEntity if isinstance(exc, ValueError) else web.HTTPServiceUnavailable
                raise refusal(text=json.dumps({"error": str(exc)}), content_type="application/json")
        agent.last_error = ""
        return out

    async def applied(fn: Callable[..., str], *args: Any) -> web.Response:
        summary = await locked(fn, *args)
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
                                  "rules": agent.rules, "last_error": agent.last_error,
                                  "live": agent.live is not None, "starting": bool(pending),
                                  "tls_handshake_failures": HandshakeFailures.count})

    async def local_update(request: web.Request) -> web.Response:
        """`camus-xdp update` on this host, from root (the socket is root's alone as well)."""
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is None or _peer_uid(sock) != 0:
            raise web.HTTPForbidden(text='{"error": "local updates are root\'s"}', content_type="application/json")
        try:
            data = await request.json()
            rules = str(data["rules"])
        except (json.JSONDecodeError, KeyError, TypeError):
            return web.json_response({"error": "expected {rules: PATH}"}, status=400)
        doc, finish = await locked(agent.apply_file, rules)

        async def saved() -> None:       # after the answer, before the next update
            async with lock:
                await asyncio.to_thread(finish)
        pending.add(task := asyncio.get_running_loop().create_task(saved()))
        task.add_done_callback(pending.discard)
        return web.json_response(doc)

    async def take_over(app: web.Application) -> None:
        """The attached tables taken over for deltas as the agent starts (100K rules: seconds),
        not on the first local update."""
        async with lock:
            await asyncio.to_thread(agent.take_over)

    async def start_local(app: web.Application) -> None:
        assert local is not None
        pending.add(task := asyncio.get_running_loop().create_task(take_over(app)))
        task.add_done_callback(pending.discard)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.unlink(missing_ok=True)            # a dead agent's (the unit's hold says none runs)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(local))
        os.chmod(local, 0o600)
        side = web.Application(client_max_size=64 * 1024)
        side.add_routes([web.post("/v1/local/update", local_update)])
        runner = web.AppRunner(side, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        app[LOCAL_RUNNER] = runner

    async def cleanup(app: web.Application) -> None:
        for task in list(pending):
            await task
        if LOCAL_RUNNER in app:
            await app[LOCAL_RUNNER].cleanup()
        if local is not None:
            local.unlink(missing_ok=True)
        agent.close()

    # a whole rule set is one request body: 1M subscriptions are tens of MB (aiohttp's default: 1 MB)
    http_limits.quiet_client_errors()
    app = web.Application(client_max_size=MAX_BODY, middlewares=[http_limits.body_in_time])
    app.add_routes([web.post("/v1/tables", tables), web.post("/v1/changes", changes),
                    web.get("/v1/status", status)])
    if local is not None:
        app.on_startup.append(start_local)
    app.on_cleanup.append(cleanup)
    return app
