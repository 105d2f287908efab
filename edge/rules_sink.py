"""Edge brokers' subscriptions into the XDP broker's tables on this machine.

Each edge broker owns one logical port of the XDP broker and the rules that forward to it. Its
rules live in `<dir>/<port>.rules`; an update rewrites that file, then, holding a lock on the
directory (several edge brokers may update at once), joins every port's file into
`combined.rules`, compiles it against the spec the interface was attached with and swaps the
tables (`runtime.update`: atomic, nothing half-installed; a refresh that changes nothing
writes nothing). The XDP program's maps are reached through their pins, so an edge broker in
another network namespace of the same machine can update them.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from camus.compiler.compile import CompileOptions, compile_files

STATE_DIR = Path("/run/camus-xdp/edge")


def rule_line(flt: str, port: int) -> str:
    return f"topic == {json.dumps(flt)} : fwd({port})"


class LocalSink:
    def __init__(self, iface: str, directory: Path | None = None) -> None:
        self.iface = iface
        self.dir = directory or STATE_DIR / iface
        self.dir.mkdir(parents=True, exist_ok=True)

    def apply(self, port: int, filters: list[str]) -> None:
        from camus.dataplane import runtime
        mine = self.dir / f"{port}.rules"
        tmp = mine.with_suffix(".tmp")
        tmp.write_text("".join(rule_line(f, port) + "\n" for f in filters))
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = mine.read_text() if mine.exists() else ""
            os.replace(tmp, mine)
            try:
                combined = self.dir / "combined.rules"
                parts = sorted(self.dir.glob("*.rules"), key=lambda p: p.name)
                text = "".join(p.read_text() for p in parts if p.name != "combined.rules")
                combined.write_text(text or "# no subscriptions\n")
                inst = runtime.load_installed(self.iface)
                compiled = compile_files(inst.spec, combined, CompileOptions(count_rules=inst.count_rules))
                runtime.update(self.iface, compiled, str(combined))
            except BaseException:
                mine.write_text(old)              # this port's rules stay what the tables hold
                raise
