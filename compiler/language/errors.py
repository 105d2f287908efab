"""Errors that point at the exact place of a mistake in a rule file or a spec.

Every user-facing failure of the compiler is a `CompileError` carrying the source name, the
1-based line and column, what went wrong and (when known) what was expected there. A file with
several mistakes raises one `CompileErrors` listing all of them, so users fix a file in one go.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Position:
    source: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"


class CompileError(Exception):
    """One mistake at one position."""

    def __init__(self, message: str, position: Position | None = None,
                 expected: str | None = None, line_text: str | None = None) -> None:
        self.message = message
        self.position = position
        self.expected = expected
        self.line_text = line_text
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.position}: " if self.position else ""
        text = f"{where}error: {self.message}"
        if self.expected:
            text += f" (expected {self.expected})"
        if self.line_text is not None and self.position is not None:
            caret = " " * (self.position.column - 1) + "^"
            text += f"\n    {self.line_text.rstrip()}\n    {caret}"
        return text


@dataclass
class CompileErrors(Exception):
    """All the mistakes found in one input; the input is rejected as a whole."""

    errors: list[CompileError] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"{len(self.errors)} error(s); nothing was compiled or changed"
        return "\n".join([e.render() for e in self.errors] + [head])


def read_source(path: "str | os.PathLike[str]", what: str) -> str:
    """A spec or rules file's text; CompileErrors with the position of the first byte that is not
    UTF-8 (a binary file, a latin-1 file) or the reason it cannot be read."""
    from pathlib import Path
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise CompileErrors([CompileError(f"cannot read {what}: {exc.strerror}", Position(str(p), 1, 1))]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise CompileErrors([CompileError(f"byte 0x{data[exc.start]:02x} is not UTF-8 text ({what} files are UTF-8 "
                                          "text; is this a binary file?)", Position(str(p), line, column))]) from None
