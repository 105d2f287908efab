"""What a back end is: it reads only the compiled Pipeline IR (and the spec), writes named
artefacts, and may run messages through its own form of the tables for `explain --via`.

Adding a back end is one module with a `Backend` subclass plus one line in `registry.py`;
`compile --target`, `explain --via`, the controller's switch targets and the tests all read
the registry.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar

from .emit import BackendError

if TYPE_CHECKING:
    from ..compiled import Compiled
    from ..semantics.explain import Engine


def _quiet(message: str) -> None:
    """Default for `TargetOptions.notice`: say nothing."""


@dataclass(frozen=True)
class TargetOptions:
    """Target-specific choices (each back end reads the ones it knows)."""
    arch: str = "v1model"                   # P4: v1model (bmv2) | tna (Tofino)
    budget_file: str | None = None          # P4: switch resource budget (YAML)
    state_bits: int = 32                    # P4: width of meta.state (state ids) in the program
    notice: Callable[[str], None] = field(default=_quiet, compare=False)   # progress for the user


class OverBudget(BackendError):
    """The tables do not fit the target: each resource over, with what they need and what the
    target has. Nothing was written; compiler/fitting.py decides what to give up and retries."""

    def __init__(self, over: list[str]) -> None:
        self.over = over
        super().__init__("the entries do not fit the switch budget (nothing written):\n  " + "\n  ".join(over))

    def headline(self) -> str:
        return self.over[0] if self.over else "over budget"


@dataclass
class Artefacts:
    """What a back end produced for one compile."""
    compiled: "Compiled"                    # the compile these belong to
    files: dict[str, str]                   # file name -> text, written under `compile -o DIR`
    emit: str                               # the main artefact, for `compile --emit`
    summary: str = ""                       # lines added to the resource summary


class Backend(ABC):
    name: ClassVar[str]                     # `compile --target NAME`
    help: ClassVar[str]                     # one line for --help
    explain_as: ClassVar[str | None] = None # `explain --via NAME`; None: this back end cannot run messages

    @abstractmethod
    def build(self, c: "Compiled", options: TargetOptions) -> Artefacts:
        """The target's artefacts; raises BackendError when the tables cannot be realised."""

    def engine(self, c: "Compiled") -> "Engine":
        """Runs messages through this back end's own form of the tables."""
        raise BackendError(f"the {self.name} back end cannot explain messages")


__all__ = ["Artefacts", "Backend", "BackendError", "OverBudget", "TargetOptions"]
