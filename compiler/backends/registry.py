"""Every back end by name: `compile --target`, `explain --via`, the controller and the tests
read this table. A new back end is one module plus one line here."""
from __future__ import annotations

from typing import Callable

from ..compiled import Compiled
from ..semantics.explain import Engine, FilterEngine
from .base import Backend
from .ebpf import EbpfBackend
from .ir import IrBackend
from .p4 import P4Backend
from .userspace import UserspaceBackend

BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (
    IrBackend,
    EbpfBackend,
    P4Backend,
    UserspaceBackend,
)}


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown back end {name!r} (one of {', '.join(BACKENDS)})") from None


def explain_layers() -> dict[str, Callable[[Compiled], Engine]]:
    """`explain --via` names: the rules themselves, then each back end that can run messages."""
    layers: dict[str, Callable[[Compiled], Engine]] = {"filters": FilterEngine}
    for b in BACKENDS.values():
        if b.explain_as:
            layers[b.explain_as] = b().engine
    return layers


def engine(via: str, c: Compiled) -> Engine:
    layers = explain_layers()
    if via not in layers:
        raise ValueError(f"unknown layer {via!r} (one of {', '.join(layers)})")
    return layers[via](c)
