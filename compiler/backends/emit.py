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


def fill_template(name: str, slots: dict[str, str]) -> str:
    """A P4 template of p4/ (shipped as package data) with its `{{NAME}}` slots filled; a slot
    left unfilled is an error naming it (a template and its generator out of step)."""
    from importlib.resources import files
    text = files("camus.p4").joinpath(name).read_text()
    for k, v in slots.items():
        text = text.replace("{{" + k + "}}", v)
    if "{{" in text:
        left = text[text.index("{{"):].split("}}")[0] + "}}"
        raise BackendError(f"template {name} has an unfilled slot {left}")
    return text
