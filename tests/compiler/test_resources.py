from __future__ import annotations

from camus.compiler.compile import CompileOptions, compile_files
from camus.compiler.ir.resources import render_report, resource_report
from tests.conftest import APPS


def test_report_counts_what_the_pipeline_holds() -> None:
    c = compile_files(APPS / "int" / "int.p4", APPS / "int" / "rules.txt")
    r = resource_report(c.pipeline)
    assert r["entries"] == sum(len(t.entries) for t in c.pipeline.tables)
    assert r["leaf_entries"] == len(c.pipeline.leaves) and r["groups"] == len(c.pipeline.groups)
    assert r["state_vars"] == 1 and r["register_bits"] == 192
    assert r["state_bits"] == max(c.pipeline.state_ids).bit_length()
    assert all(t["key_bits"] == r["state_bits"] + 32 for t in r["tables"][:4])
    assert "multicast group" in render_report(r)


def test_compression_shrinks_keys() -> None:
    plain = resource_report(compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt").pipeline)
    small = resource_report(compile_files(APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt",
                                          CompileOptions(compress_max=16)).pipeline)
    stock = lambda r: next(t for t in r["tables"] if t["table"] == "add_order.stock")  # noqa: E731
    assert stock(small)["key_bits"] < stock(plain)["key_bits"]
    assert small["domain_entries"] > 0 and plain["domain_entries"] == 0
