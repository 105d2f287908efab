"""Edge brokers' subscriptions into the XDP broker's tables on this machine.

Each edge broker owns one logical port of the XDP broker and the rules that forward to it. Its
rules live in `<dir>/<port>.rules`, `<dir>` beside the attachment's state (removed by detach,
cleared by attach, so the rules of an earlier attachment never come back); an update rewrites
that file, then, holding a lock on the directory (several edge brokers may update at once),
joins every port's file into `combined.rules`, compiles it against the spec the interface was
attached with and swaps the tables (`runtime.update`: atomic, nothing half-installed; a refresh
that changes nothing writes nothing). Shared subscription groups are declared in the port's file
(`# share ["GROUP", "FILTER"]`) and forwarded to the lowest declaring port only (edge/shared.py).
A failed update leaves both files as the live tables are. The XDP program's maps are reached
through their pins, so an edge broker in another network namespace of the same machine can
update them.
"""
from __future__ import annotations

import fcntl
import json
import os

from pathlib import Path

from camus.compiler.compile import CompileOptions, compile_files

from .shared import declaration, declared


def rule_line(flt: str, port: int) -> str:
    return f"topic == {json.dumps(flt)} : fwd({port})"


def homes(texts: dict[int, str]) -> dict[tuple[str, str], int]:
    """Each declared shared group's home: the lowest port whose rules file declares it."""
    out: dict[tuple[str, str], int] = {}
    for port in sorted(texts):
        for line in texts[port].splitlines():
            group = declared(line)
            if group is not None and group not in out:
                out[group] = port
    return out


def combine(texts: dict[int, str]) -> str:
    """The rules of every port, and each shared group's rule for its home port only."""
    lines = [line for port in sorted(texts) for line in texts[port].splitlines() if line and declared(line) is None]
    lines += [rule_line(flt, port) for (_, flt), port in sorted(homes(texts).items())]
    return "".join(f"{line}\n" for line in dict.fromkeys(lines))


class LocalSink:
    def __init__(self, iface: str) -> None:
        self.iface = iface

    def _directory(self) -> Path:
        from camus.dataplane import installed as state
        return state.attachment_dir(self.iface) / "edge"

    def _texts(self) -> dict[int, str]:
        """Every port's rules file (a file being replaced is read whole, old or new)."""
        out = {}
        for path in self._directory().glob("*.rules"):
            if path.stem.isdigit():
                try:
                    out[int(path.stem)] = path.read_text()
                except FileNotFoundError:
                    continue
        return out

    def homes(self) -> dict[tuple[str, str], int]:
        """Each shared group's home port, as the rules files declare them now."""
        return homes(self._texts())

    def apply(self, port: int, filters: list[str], shared: list[tuple[str, str]] | None = None) -> None:
        from camus.dataplane import runtime
        from camus.dataplane import installed as state
        directory = self._directory()
        directory.mkdir(parents=True, exist_ok=True)
        mine, combined = directory / f"{port}.rules", directory / "combined.rules"
        tmp = mine.with_suffix(".tmp")
        tmp.write_text("".join(rule_line(f, port) + "\n" for f in filters) +
                       "".join(declaration(g, f) + "\n" for g, f in shared or ()))
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = {p: p.read_text() for p in (mine, combined) if p.exists()}
            os.replace(tmp, mine)
            try:
                combined.write_text(combine(self._texts()) or "# no subscriptions\n")
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
