"""Per-device compilation: each filtering device's rule set through the compiler, cached by the
rule text, so a subscription change recompiles only the devices whose rules changed, and those
incrementally (compiler/incremental.py); resource reports per device and memory per layer."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

from camus.compiler.compile import Compiled, CompileOptions
from camus.compiler.incremental import IncrementalCompiler
from camus.compiler.ir.resources import resource_report
from camus.compiler.language.spec import Spec

from .routing import Routing


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class DeviceTables:
    device: str
    kind: str                 # p4 | xdp
    rules: str
    digest: str
    compiled: Compiled
    rule_count: int = -1      # when `compiled.rules` was dropped (compile_worker): how many there were

    @property
    def rule_total(self) -> int:
        return self.rule_count if self.rule_count >= 0 else len(self.compiled.rules)

    @property
    def entries(self) -> int:
        p = self.compiled.pipeline
        return p.entry_count + len(p.leaves)


@dataclass
class DeviceCompiler:
    spec: Spec
    options: CompileOptions = field(default_factory=CompileOptions)
    cache: dict[str, DeviceTables] = field(default_factory=dict)
    compiled_last: list[str] = field(default_factory=list)    # devices the last call (re)compiled
    # per device: its rule set's compile kept warm, so a change redoes only what it reaches
    incremental: dict[str, IncrementalCompiler] = field(default_factory=dict)

    def compile(self, routing: Routing) -> dict[str, DeviceTables]:
        """Tables for every filtering device of the routing; unchanged rule sets are reused."""
        self.compiled_last = []
        out = {}
        for d in sorted(routing.filters):
            rules, exact = routing.device_rule_set(d)
            # alpha widens only what a later filtering hop narrows again: last-hop rules stay exact;
            # a switch gets the diagram, as a cover when the exact one would not fit
            kind = routing.topology.kind(d)
            options = dataclasses.replace(self.options, exact_rules=exact if self.options.alpha > 1 else frozenset(),
                                          strategy="switch" if kind == "p4" else self.options.strategy)
            h = digest(rules + repr(sorted(exact)) if self.options.alpha > 1 else rules)
            cached = self.cache.get(d)
            if cached is None or cached.digest != h:
                inc = self.incremental.get(d)
                if inc is None or inc.options != options:
                    inc = self.incremental[d] = IncrementalCompiler(self.spec, options)
                cached = DeviceTables(d, kind, rules, h, inc.compile(rules, f"<{d}>"))
                self.cache[d] = cached
                self.compiled_last.append(d)
            out[d] = cached
        for gone in set(self.cache) - set(out):
            del self.cache[gone]
            self.incremental.pop(gone, None)
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
        row["rules"] += t.rule_total
    return out


def device_reports(tables: dict[str, DeviceTables]) -> dict[str, dict]:
    return {d: resource_report(t.compiled.pipeline) for d, t in tables.items()}
