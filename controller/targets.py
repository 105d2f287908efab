"""Where a device's tables go: an XDP host's agent (HTTP, token); a P4 switch over P4Runtime
(gRPC: read back what it holds, write the make-before-break delta); or, offline, a switch's
directory of the P4 back end's files (program, simple_switch_CLI, P4Runtime WriteRequest,
bfrt_python, P4Info), replaced atomically."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from camus.compiler.backends.base import TargetOptions
from camus.compiler.fitting import build_fitted
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import P4Tables
from camus.compiler.backends.registry import backend

from .devices import DeviceTables
from .tls import TlsFiles, client_context, explain_failure


class PushError(RuntimeError):
    pass


@dataclass(frozen=True)
class Held:
    """What a device holds now, as far as its target can tell: digest and rule count."""
    digest: str
    rules: int


@dataclass
class AgentTarget:
    """POST the device's rules to its host agent, which compiles and swaps them atomically."""
    url: str
    token: str
    timeout: float = 10.0
    whole_timeout: float = 600.0      # a whole rule set: the agent compiles and writes all of it
    tls: TlsFiles | None = None       # https:// agents: the CA that signed them, our certificate (mutual TLS)

    def current(self, device: str) -> Held | None:
        """The agent's tables now (None when it cannot be asked)."""
        req = urllib.request.Request(self.url.rstrip("/") + "/v1/status",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                doc = json.loads(resp.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return Held(str(doc.get("digest", "")), int(doc.get("rules", 0)))

    def __post_init__(self) -> None:
        self._sent: dict[str, str] = {}          # device -> the digest it last took from us
        self._conn: http.client.HTTPConnection | None = None
        self._ssl = client_context(self.tls) if self.tls is not None and self.tls.enabled else None
        if self._ssl is not None and not self.url.startswith("https://"):
            raise PushError(f"agent {self.url}: TLS is on, so its URL must be https://")

    def push(self, device: str, tables: DeviceTables) -> str:
        """The rule lines that changed since the tables the agent holds, as a delta
        (`/v1/changes`), when the controller knows them (`tables.delta`), the agent still holds
        their base and the change is a small part of the set; else (or when it answers 409)
        the whole rule set."""
        delta = tables.delta
        if (delta is not None and delta.base == self._sent.get(device)
                and len(delta.added) + len(delta.removed) <= max(64, tables.rule_count // 4)):
            try:
                summary = self._post("/v1/changes", {"device": device, "base": delta.base, "digest": tables.digest,
                                                      "added": delta.added, "removed": delta.removed}, tables.digest)
                self._sent[device] = tables.digest
                return summary
            except _Conflict:
                pass
        self._sent.pop(device, None)
        summary = self._post("/v1/tables", {"device": device, "rules": tables.rules, "digest": tables.digest},
                             tables.digest, self.whole_timeout)
        self._sent[device] = tables.digest
        return summary

    def _post(self, path: str, doc: dict, digest: str, timeout: float | None = None) -> str:
        status, body = self._request(path, json.dumps(doc).encode(), timeout or self.timeout)
        if status == 409:
            raise _Conflict()
        if status >= 300:
            raise PushError(f"agent {self.url} refused: {status} {body[:300].decode(errors='replace')}")
        try:
            answer = json.loads(body or b"{}")
        except ValueError:
            raise PushError(f"agent {self.url} answered something that is not JSON") from None
        if answer.get("digest") != digest:
            raise PushError(f"agent {self.url} applied {answer.get('digest')!r}, not {digest!r}")
        return str(answer.get("summary", ""))

    def _request(self, path: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        """POST over one kept-alive connection (a change a millisecond: no connection setup each
        time); a connection the agent closed in between is opened again once (the request had
        not reached it; a delta that had would answer 409 the second time)."""
        url = urllib.parse.urlsplit(self.url)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        for attempt in (0, 1):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = (http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port or 443, timeout=timeout,
                                                          context=self._ssl) if self._ssl is not None else
                              http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=timeout))
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout)
            try:
                self._conn.request("POST", url.path.rstrip("/") + path, body=data, headers=headers)
                resp = self._conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._close()
                if fresh or attempt:
                    raise PushError(explain_failure(exc, self.url) or f"agent {self.url} unreachable: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                self._close()
                raise PushError(explain_failure(exc, self.url) or f"agent {self.url} unreachable: {exc}") from None
        raise AssertionError("unreachable")

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Conflict(Exception):
    """The agent does not hold what a delta was made against."""


@dataclass
class SwitchDirTarget:
    """Write the switch's program and entries into a new version directory and point the symlink
    DIR/<device> at it in one rename: a reader sees the old set or the new set, never a mix."""
    root: Path
    arch: str = "v1model"

    def current(self, device: str) -> Held | None:
        d = self.root / device
        try:
            rules = (d / "rules.txt").read_text()
            return Held((d / "digest").read_text().strip(), sum(1 for x in rules.splitlines() if x.strip()))
        except OSError:
            return None

    def push(self, device: str, tables: DeviceTables) -> str:
        # the same files as `compile --target p4 -o DIR`; over the switch budget nothing is written
        art = build_fitted(tables.compiled, backend("p4"), TargetOptions(arch=self.arch)).artefacts
        files = {**art.files, "rules.txt": tables.rules, "digest": tables.digest + "\n"}
        self.root.mkdir(parents=True, exist_ok=True)
        version = Path(tempfile.mkdtemp(prefix=f".{device}-{tables.digest}-", dir=self.root))
        for name, text in files.items():
            (version / name).write_text(text)
        link = self.root / f".{device}.link"
        link.unlink(missing_ok=True)
        os.symlink(version.name, link)
        os.replace(link, self.root / device)            # DIR/<device> -> the new version, atomically
        for old in self.root.glob(f".{device}-*"):
            if old != version and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        return art.summary.splitlines()[0] if art.summary else "written"


@dataclass
class P4RuntimeTarget:
    """A switch's P4Runtime server: on every push, read back what it holds, plan the delta to
    the new tables (p4_delta: new states under new ids, one flip of the root, then the old
    states' entries deleted) and write it phase by phase. The same path re-synchronises a switch
    that restarted or was changed behind our back: only the difference is written."""
    address: str
    device_id: int = 1
    arch: str = "v1model"
    election_id: int = 1
    pipeline_config: bytes | None = None      # the spec text, for a switch that runs no pipeline yet
    timeout: float = 5.0
    tls: TlsFiles | None = None               # the CA that signed the switch, our certificate (mutual TLS)
    tls_name: str | None = None               # the name in the switch's certificate, when not its address
    verify_pushes: bool = False               # prove each push's tables against its rules before writing

    def __post_init__(self) -> None:
        self.client: Any = None              # P4RuntimeClient (imported on first use: grpc is heavy)
        self.written: P4Tables | None = None      # the tables we last wrote whole, renumbered
        self.session_writes: Any = None           # the session that wrote them (a new one reads back)
        self.signatures: Any = None               # their state signatures (p4_delta), for the next plan
        self.live: Any = None                     # what we wrote, by IR state (p4/live_delta.py)
        self.last: dict[str, int] = {}

    def _session(self):
        from .p4rt_client import P4RuntimeClient
        if self.client is None or self.client.lost:
            if self.client is not None:
                self.client.close()
                self.client = None
            self.client = P4RuntimeClient(self.address, self.device_id, self.election_id, self.timeout,
                                          tls=self.tls, tls_name=self.tls_name)
        return self.client

    def current(self, device: str) -> Held | None:
        """What the switch holds, by the stamp the last push left on t_root's default entry
        (TableEntry.metadata: "<digest> <rules>"); None when it cannot be asked or has none."""
        from .p4rt_client import P4RuntimeError
        try:
            te = self._session().read_default("t_root")
        except (P4RuntimeError, BackendError):
            return None
        digest, _, rules = (te.metadata.decode(errors="replace") if te is not None else "").partition(" ")
        return Held(digest, int(rules)) if digest and rules.isdigit() else None

    def close(self) -> None:
        """Leave the switch (another controller process owns it now): our stream ends."""
        if self.client is not None:
            self.client.close()
            self.client = None

    def forget(self) -> None:
        """The next push reads back what the switch holds instead of trusting our last write."""
        self.session_writes = None
        self.live = None

    def lost(self, device: str) -> bool:
        """The session broke since the last push (the switch may have lost its tables)."""
        return self.client is not None and self.client.lost

    def push(self, device: str, tables: DeviceTables) -> str:
        from camus.compiler.compile import no_cyclic_gc
        spec = tables.compiled.spec
        with no_cyclic_gc():                       # tens of thousands of entries planned: see there
            return self._push(device, tables, spec)

    def _push(self, device: str, tables: DeviceTables, spec: Any) -> str:
        from camus.compiler.backends.p4.delta import plan, repair
        from camus.compiler.backends.p4.entries import P4Tables, check_entries, check_program_fit, p4_tables
        from camus.compiler.backends.p4.live_delta import LiveHeld, live_plan
        from camus.compiler.backends.p4.runtime import (MODIFY, change_update, default_entry, p4info_message,
                                                        tables_from_entities, update)
        from camus.compiler.backends.p4.schema import P4Options, p4_schema
        from .p4rt_client import P4RuntimeError
        try:
            check_program_fit(tables.compiled.pipeline, spec, self.arch)
            schema = p4_schema(spec, P4Options(arch=self.arch))
            c = self._session()
            ours = self.written is not None and self.session_writes is c   # the primary is the only writer
            live, self.live = self.live, None          # until this push is through: unknown
            fast = live_plan(live, tables.compiled, spec) if ours else None
            if fast is not None:                   # from what we wrote, by IR state: the change alone
                check_entries(P4Tables(entries=[ch.entry for ch in fast.changes if ch.op == "insert" and ch.entry]),
                              schema)
                steps = [fast]
            else:
                desired = p4_tables(tables.compiled.pipeline, spec)
                check_entries(desired, schema)
                steps = []
                if ours:
                    held = self.written
                else:
                    if c.pipeline() is None and self.pipeline_config is not None:
                        c.set_pipeline(p4info_message(spec, P4Options(arch=self.arch)), self.pipeline_config)
                    held = tables_from_entities(c.names(), spec, c.read())
                if held is not self.written and self.written is not None:
                    # first back to what we last wrote, in place (a restarted switch holds nothing, a
                    # tampered one a part): then the delta from there; the custom-action ids are ours
                    steps.append(repair(held, self.written))
                    held = self.written
                known = self.signatures if held is self.written else None
                steps.append(plan(held, desired, known))
            proof = prove_before_writing(spec, tables.rules, steps[-1].tables, schema, device) \
                if self.verify_pushes else ""
            self.written = None                    # until this push is through: unknown
            names = c.names()
            for step in steps:
                for phase in step.phases:
                    c.write([change_update(names, ch) for ch in phase])
            stamp = default_entry(names, "t_root", "set_state", (steps[-1].tables.root,))
            stamp.metadata = f"{tables.digest} {tables.rule_count}".encode()
            c.write([update(MODIFY, stamp)])          # what we wrote, for a controller that restarts
        except (BackendError, P4RuntimeError) as exc:
            raise PushError(f"switch {device} at {self.address}: {exc}") from None
        self.written, self.session_writes, self.signatures = steps[-1].tables, c, steps[-1].signatures
        self.live = live if fast is not None else LiveHeld.from_plan(tables.compiled, spec, steps[-1])
        self.last = {k: sum(s.counts()[k] for s in steps) for k in ("insert", "modify", "delete")}
        return (f"{self.last['insert']} inserted, {self.last['modify']} modified, {self.last['delete']} deleted "
                f"({len(steps[-1].tables.entries)} entries held)" + (f"; {proof}" if proof else ""))


def prove_before_writing(spec: Any, rules_text: str, planned: Any, schema: Any, device: str) -> str:
    """The tables a push is about to leave on a switch, decided against the rules they stand for
    before anything is written (`controller serve --verify-pushes`; camus/verify): a difference
    or ill-formed tables refuse the push (PushError: the switch keeps what it had, the status
    shows why); what the checker cannot decide is written and said so. Returns what was proven."""
    from camus.verify.check import check_switch
    from camus.verify.machines import p4_machine
    from camus.verify.rules import TableDefect, Undecidable, read_rules
    try:
        result, note = check_switch(read_rules(spec, rules_text, f"{device}'s rules"), p4_machine(spec, planned, schema))
    except TableDefect as exc:
        raise PushError(f"switch {device}: refused before writing: the planned tables are ill-formed: {exc}") from None
    except Undecidable as exc:
        return f"not proven before writing ({exc})"
    if result.verdict == "differs":
        cx = result.counterexample
        assert cx is not None
        message = " ".join(f"{k}={v}" for k, v in cx.values.items())
        raise PushError(f"switch {device}: refused before writing: the planned tables differ from the rules on "
                        f"the message {message}: the rules give {cx.rules.text()}, the tables {cx.tables.text()}")
    return "proven a cover before writing" if note else "proven equal before writing"
