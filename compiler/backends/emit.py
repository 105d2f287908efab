"""What every code-generating back end shares: an indenting emitter and the back-end error."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class BackendError(ValueError):
    """The spec or the tables cannot be realised by this back end (says why)."""


class Emitter:
    """Indenting line emitter for generated C and P4."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.depth + line) if line else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @contextmanager
    def block(self, opening: str) -> Iterator[None]:
        """`opening {` ... `}` with the body indented."""
        self(opening + " {")
        self.depth += 1
        yield
        self.depth -= 1
        self("}")
