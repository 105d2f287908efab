"""Per-device compilation: each filtering device's rule set through the compiler, cached by its
digest, so a subscription change recompiles only the devices whose rules changed, and those
incrementally (compiler/incremental.py); resource reports per device and memory per layer."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable

from camus.compiler.compile import Compiled, CompileOptions
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.ir.resources import resource_report
from camus.compiler.language.spec import Spec

from .live_routing import rules_digest
from .routing import Routing


@dataclass
class LineDelta:
    """The rule lines that changed since the tables a device holds (`base`, its digest)."""
    base: str
    added: list[str]
    removed: list[str]


@dataclass
class DeviceTables:
    """One device's rule set at one version: its digest and rule count always; the rules text
    and the compiled tables when asked. A controller's tables make the text from the live
    routing (`source`), valid while they are the device's current tables; an XDP host's are
    compiled only when something asks (its agent compiles them itself)."""
    device: str
    kind: str                 # p4 | xdp
    digest: str
    rule_count: int
    source: Callable[[], str] | str
    compiled_: Compiled | None = None
    compile: Callable[[str], Compiled] | None = None
    delta: LineDelta | None = None        # set by the controller before a push

    @property
    def rules(self) -> str:
        if callable(self.source):
            self.source = self.source()
        return self.source

    @property
    def compiled(self) -> Compiled:
        if self.compiled_ is None:
            assert self.compile is not None, f"{self.device}: tables without a compiler"
            self.compiled_ = self.compile(self.rules)
        return self.compiled_

    @property
    def entries(self) -> int:
        p = self.compiled.pipeline
        return p.entry_count + len(p.leaves)

    @property
    def entries_known(self) -> int | None:
        """Table entries when compiled here (an agent's own compile is not counted)."""
        return self.entries if self.compiled_ is not None else None


@dataclass
class DeviceCompiler:
    spec: Spec
    options: CompileOptions = field(default_factory=CompileOptions)
    cache: dict[str, DeviceTables] = field(default_factory=dict)
    compiled_last: list[str] = field(default_factory=list)    # devices the last call (re)compiled
    # per device: its rule set's compile kept warm, so a change redoes only what it reaches
    incremental: dict[str, IncrementalCompiler] = field(default_factory=dict)

    def device_options(self, kind: str, exact: frozenset[int]) -> CompileOptions:
        # alpha widens only what a later filtering hop narrows again: last-hop rules stay exact;
        # a switch gets the diagram, as a cover when the exact one would not fit
        return dataclasses.replace(self.options, exact_rules=exact if self.options.alpha > 1 else frozenset(),
                                   strategy="switch" if kind == "p4" else self.options.strategy)

    def compile_device(self, device: str, kind: str, rules: str, exact: frozenset[int]) -> Compiled:
        """One device's rule set, incrementally from its last one."""
        options = self.device_options(kind, exact)
        inc = self.incremental.get(device)
        if inc is None or inc.options != options:
            inc = self.incremental[device] = IncrementalCompiler(self.spec, options)
        return inc.compile(rules, f"<{device}>")

    def forget(self, devices: Iterable[str]) -> None:
        for d in devices:
            self.cache.pop(d, None)
            self.incremental.pop(d, None)

    def compile(self, routing: Routing) -> dict[str, DeviceTables]:
        """Tables for every filtering device of the routing; unchanged rule sets are reused."""
        self.compiled_last = []
        out = {}
        for d in sorted(routing.filters):
            rules, exact = routing.device_rule_set(d)
            lines = rules.splitlines()
            h = rules_digest(lines, exact if self.options.alpha > 1 else ())
            cached = self.cache.get(d)
            if cached is None or cached.digest != h:
                kind = routing.topology.kind(d)
                cached = DeviceTables(d, kind, h, len(lines), rules, self.compile_device(d, kind, rules, exact))
                self.cache[d] = cached
                self.compiled_last.append(d)
            out[d] = cached
        self.forget(set(self.cache) - set(out))
        return out


def memory_per_layer(routing: Routing, tables: dict[str, DeviceTables]) -> dict[str, dict[str, int]]:
    """Per layer: devices, total table entries (match + leaf), the largest device."""
    out: dict[str, dict[str, int]] = {}
    for d, t in tables.items():
        layer = routing.topology.layer(d) or "-"
        row = out.setdefault(layer, {"devices": 0, "entries": 0, "max_entries": 0, "rules": 0})
        row["devices"] += 1
        row["entries"] += t.entries
        row["max_entries"] = max(row["max_entries"], t.entries)
        row["rules"] += t.rule_count
    return out


def device_reports(tables: dict[str, DeviceTables]) -> dict[str, dict]:
    return {d: resource_report(t.compiled.pipeline) for d, t in tables.items()}
