"""A compile that lets its rules go (compile_rules' keep_rules=False: what `bench/p4_resources.py
--table1` uses for its million names) builds the same tables, and says so when asked to evaluate
its rules."""
from __future__ import annotations

import pytest

from camus.bench.workloads import SENSOR_SPEC, itch_rules, sensor_rules
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.compile import CompileOptions, compile_rules, recompile
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.semantics.explain import FilterEngine, IrEngine

from camus.data import apps_dir

CASES = {   # an exact diagram (ITCH), a switch cover (8 attributes)
    "itch": (load_spec(apps_dir() / "itch" / "itch.p4"), "\n".join(itch_rules(2000, 3)) + "\n", "bdd"),
    "sensor": (parse_spec(SENSOR_SPEC), "\n".join(sensor_rules(300, 3, n_hosts=16)) + "\n", "switch"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_lean_compile_builds_the_same_tables(case: str) -> None:
    spec, rules, strategy = CASES[case]
    opts = CompileOptions(strategy=strategy)
    full = compile_rules(spec, rules, "r.txt", opts)
    lean = compile_rules(spec, rules, "r.txt", opts, keep_rules=False)
    assert lean.pipeline.dumps() == full.pipeline.dumps()
    assert lean.pipeline.rule_count == full.pipeline.rule_count == rules.count("\n")
    assert lean.rules == [] and lean.lowered.rules == [] and lean.exact_lowered is None
    # what the fitting driver does next: compiled again (from the kept text) with other options
    assert recompile(lean, CompileOptions(strategy=strategy, alpha=10)).pipeline.dumps() == \
        recompile(full, CompileOptions(strategy=strategy, alpha=10)).pipeline.dumps()


def test_explaining_a_lean_compile_is_refused_with_the_reason() -> None:
    spec, rules, _ = CASES["itch"]
    lean = compile_rules(spec, rules, "r.txt", keep_rules=False)
    with pytest.raises(ValueError, match="compiled without keeping them"):
        FilterEngine(lean)          # the rules themselves are gone
    IrEngine(lean).run({q.path: 0 for q in spec.query_fields}, 0)      # the tables are all there
