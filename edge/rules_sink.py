"""Edge brokers' subscriptions into the XDP broker's tables on this machine.

Each edge broker owns one logical port of the XDP broker and the rules that forward to it. Its
rules live in `<dir>/<port>.rules`, `<dir>` beside the attachment's state (removed by detach,
cleared by attach, so the rules of an earlier attachment never come back); an update rewrites
that file, then, holding a lock on the directory (several edge brokers may update at once),
joins every port's file into `combined.rules`, compiles it against the spec the interface was
attached with and swaps the tables (`runtime.update`: atomic, nothing half-installed; a refresh
that changes nothing writes nothing). A failed update leaves both files as the live tables
are. The XDP program's maps are reached through their pins, so an edge broker in another
network namespace of the same machine can update them.
"""
from __future__ import annotations

import fcntl
import json
import os

from camus.compiler.compile import CompileOptions, compile_files


def rule_line(flt: str, port: int) -> str:
    return f"topic == {json.dumps(flt)} : fwd({port})"


class LocalSink:
    def __init__(self, iface: str) -> None:
        self.iface = iface

    def apply(self, port: int, filters: list[str]) -> None:
        from camus.dataplane import runtime
        from camus.dataplane import installed as state
        directory = state.attachment_dir(self.iface) / "edge"
        directory.mkdir(parents=True, exist_ok=True)
        mine, combined = directory / f"{port}.rules", directory / "combined.rules"
        tmp = mine.with_suffix(".tmp")
        tmp.write_text("".join(rule_line(f, port) + "\n" for f in filters))
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = {p: p.read_text() for p in (mine, combined) if p.exists()}
            os.replace(tmp, mine)
            try:
                parts = sorted(directory.glob("*.rules"), key=lambda p: p.name)
                text = "".join(p.read_text() for p in parts if p != combined)
                combined.write_text(text or "# no subscriptions\n")
                inst = state.load_installed(self.iface)
                compiled = compile_files(inst.spec, combined, CompileOptions(count_rules=inst.count_rules))
                runtime.update(self.iface, compiled, str(combined))
            except BaseException:
                for p in (mine, combined):       # the files stay what the live tables hold
                    if p in old:
                        p.write_text(old[p])
                    else:
                        p.unlink(missing_ok=True)
                raise
