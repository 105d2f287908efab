"""Golden IR for the shipped examples: the compiler's output is deterministic and reviewed.
Run `./run test --update-goldens` after an intended change and review the diff."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.resources import render_report, resource_report
from tests.conftest import APPS

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = {
    "itch_example": (APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", CompileOptions()),
    "itch_compressed": (APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", CompileOptions(compress_max=16)),
    "int_example": (APPS / "int" / "int.p4", APPS / "int" / "rules.txt", CompileOptions()),
    "camus_syntax": (APPS / "itch" / "itch.p4", APPS / "camus_compat" / "rules.txt", CompileOptions()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ir_matches_golden(name: str, update_goldens: bool) -> None:
    spec, rules, opts = CASES[name]
    c = compile_files(spec, rules, opts)
    text = c.pipeline.dumps() + "\n" + render_report(resource_report(c.pipeline)) + "\n"
    path = GOLDEN / f"{name}.txt"
    if update_goldens or not path.exists():
        path.write_text(text)
        if not update_goldens:
            pytest.fail(f"golden {path.name} did not exist; written now, review and commit it")
    assert text == path.read_text(), f"IR of {name} changed; review, then --update-goldens"


def test_output_is_deterministic_across_runs() -> None:
    spec, rules, opts = CASES["int_example"]
    a = compile_files(spec, rules, opts).pipeline.dumps()
    b = compile_files(spec, rules, opts).pipeline.dumps()
    assert a == b and json.loads(a)["format"] == "camus-pipeline/1"
