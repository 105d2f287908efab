"""Golden IR for the shipped examples: the compiler's output is deterministic and reviewed.
Run `./run test --update-goldens` after an intended change and review the diff."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.ir.resources import render_report, resource_report
from tests.conftest import APPS

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = {
    "itch_example": (APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", CompileOptions()),
    "itch_compressed": (APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt", CompileOptions(compress_max=16)),
    "int_example": (APPS / "int" / "int.p4", APPS / "int" / "rules.txt", CompileOptions()),
    "camus_syntax": (APPS / "itch" / "itch.p4", APPS / "camus_compat" / "rules.txt", CompileOptions()),
    "topics_example": (APPS / "topics" / "topics.p4", APPS / "topics" / "rules.txt", CompileOptions()),
    "attrs_example": (APPS / "attrs" / "bitmask.p4", APPS / "attrs" / "rules.txt", CompileOptions()),
}


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    if update or not path.exists():
        path.write_text(text)
        if not update:
            pytest.fail(f"golden {path.name} did not exist; written now, review and commit it")
    assert text == path.read_text(), f"{name} changed; review the difference, then --update-goldens"


@pytest.mark.parametrize("name", sorted(CASES))
def test_ir_matches_golden(name: str, update_goldens: bool) -> None:
    spec, rules, opts = CASES[name]
    c = compile_files(spec, rules, opts)
    check_golden(f"{name}.txt", c.pipeline.dumps() + "\n" + render_report(resource_report(c.pipeline)) + "\n",
                 update_goldens)


def test_output_is_deterministic_across_runs() -> None:
    spec, rules, opts = CASES["int_example"]
    a = compile_files(spec, rules, opts).pipeline.dumps()
    b = compile_files(spec, rules, opts).pipeline.dumps()
    assert a == b and json.loads(a)["format"] == "camus-pipeline/1"


@pytest.mark.parametrize("app, spec", [("itch", "itch"), ("int", "int"), ("topics", "topics"),
                                       ("attrs", "pairs")])
def test_generated_xdp_header_matches_golden(app: str, spec: str, update_goldens: bool) -> None:
    """The spec-specific C (field reads, feed port, framing, topics, attributes) is reviewed like the IR."""
    from camus.compiler.backends.ebpf.program import EbpfLimits, generate_header
    from camus.compiler.language.spec_parser import load_spec
    check_golden(f"{app}_camus_gen.h", generate_header(load_spec(APPS / app / f"{spec}.p4"), EbpfLimits()),
                 update_goldens)
