"""The switch's cost model (compiler/backends/p4/tofino.py, budget.py): range rows that cover
exactly their range, a three-rule example checked by hand, stages from the program's tables,
equality entries in SRAM, and TNA programs over the pipe's stages refused."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.base import BackendError, TargetOptions
from camus.compiler.backends.p4.budget import Budget, schema_stages, switch_resources
from camus.compiler.backends.p4.entries import p4_tables
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.backends.p4.tofino import (TOFINO2, exact_words, range_row_blocks, range_rows,
                                               tcam_blocks_wide)
from camus.compiler.backends.registry import backend
from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.data import apps_dir

ITCH = apps_dir() / "itch" / "itch.p4"
THREE = "stock == GOOGL and price > 50 : fwd(1)\nstock == GOOGL : fwd(2)\nstock == MSFT and price > 100 : fwd(1)\n"


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20).flatmap(lambda bits: st.tuples(st.just(bits), st.integers(0, (1 << bits) - 1),
                                                          st.integers(0, (1 << bits) - 1))))
def test_range_rows_cover_exactly_the_range(case: tuple[int, int, int]) -> None:
    """Each row is consecutive aligned blocks under one parent block (one nibble's set of values,
    the nibbles above fixed); together they hold exactly [lo, hi], none twice."""
    bits, a, b = case
    lo, hi = min(a, b), max(a, b)
    rows = range_row_blocks(lo, hi, bits)
    covered = []
    for first, size, count in rows:
        assert first % size == 0 and 1 <= count <= 16
        assert first // (size * 16) == (first + size * count - 1) // (size * 16)    # one parent block
        covered.append((first, first + size * count - 1))
    assert covered[0][0] == lo and covered[-1][1] == hi
    assert all(x[1] + 1 == y[0] for x, y in zip(covered, covered[1:]))
    nibbles = -(-bits // 4)
    assert len(rows) <= max(1, 2 * nibbles - 1)


def test_range_rows_examples() -> None:
    assert range_rows(0, (1 << 32) - 1, 32) == 1 and range_rows(5, 5, 32) == 1
    assert range_rows(0x10, 0x2F, 32) == 1 and range_rows(15, 16, 32) == 2 and range_rows(1, 1000, 32) == 5
    assert range_rows(51, (1 << 32) - 1, 32) == 8            # 51-63, 64-255, then one row per nibble above


def test_three_rules_by_hand() -> None:
    """The numbers a reader derives from tofino.py's figures for three ITCH rules."""
    spec = load_spec(ITCH)
    c = compile_rules(spec, THREE)
    r = switch_resources(p4_tables(c.pipeline, spec), p4_schema(spec))
    t = r["tables"]
    # two stocks, exact: key 32 + 64 bits less 10 hashed + next state 32 + version 4 = 122 bits: a word each
    assert t["t_add_order_stock_exact"] == {"kind": "exact", "entries": 2, "sram_words": 2, "tcam_rows": 0,
                                            "tcam_block_rows": 0, "sram_rams": 1, "tcams": 0}
    # price: [0, 50] = 0-47 (3 blocks of 16) + 48-50: 2 rows; [51, max] and [101, max]: 8 rows each;
    # a row is state 32 + price 2 x 32 bits (range nibbles decoded) = 96 bits: 3 blocks of 44;
    # action data 32 bits: 4 rows' to a word
    # memories are whole: the 18 rows take one TCAM deep, three wide; the 5 words one RAM
    assert t["t_add_order_price"] == {"kind": "range", "entries": 3, "sram_words": 5, "tcam_rows": 18,
                                      "tcam_block_rows": 54, "sram_rams": 1, "tcams": 3}
    assert (r["sram_rams"], r["sram_alloc_words"], r["tcams"], r["tcam_alloc_block_rows"]) == (3, 3 * 1024, 3, 3 * 512)
    # three leaves: state 32 - 10 + group 16 + 4 = 42 bits: three to a word
    assert t["t_leaf"]["sram_words"] == 1
    assert (r["multicast_groups"], r["multicast_nodes"], r["multicast_copies"]) == (1, 1, 2)
    # t_root, one stage per field (stock, price, shares, buy_sell), the leaf
    assert r["stages"] == 6
    assert exact_words(3, 32, 16) == 1 and exact_words(2, 96, 32) == 2 and tcam_blocks_wide(64, 32) == 3


def test_exact_entries_pack_into_wide_words_as_bf_p4c_lays_them_out() -> None:
    """bf-p4c's layouts: n entries (up to 9, 5 a RAM) in w RAMs (up to 8), w bounded by the
    entries' bits, key bytes and overhead. A (24-bit state, 64-bit name) -> 24-bit state entry is
    106 bits: six in five words, so 1M hICN names take 833,335 words, not 1M (one pipe: 983,040)."""
    assert exact_words(6, 88, 24) == 5 and exact_words(1_000_000, 88, 24) == 833_335
    assert exact_words(7, 64, 32) == 5                     # 90 bits: seven in five words
    assert exact_words(1, 64, 32) == 1                     # a small table takes a small layout
    assert exact_words(300, 28, 16) == 100                 # 38 bits: three a word (wider: no better)
    assert exact_words(4, 1200, 32) == 4 * 10              # wider than any layout: a word per 128 bits


def test_equalities_on_a_range_field_go_to_sram() -> None:
    """`stock ==` only: no TCAM for stock; a one-value price test exact, intervals in the range table."""
    spec = load_spec(ITCH)
    c = compile_rules(spec, "stock == GOOGL and price == 7 : fwd(1)\nstock == MSFT and price > 9 : fwd(2)\n")
    t = p4_tables(c.pipeline, spec)
    by = {e.table for e in t.entries}
    assert "t_add_order_stock" not in by and "t_add_order_stock_exact" in by
    assert any(e.table == "t_add_order_price_exact" and e.matches[1].value == 7 for e in t.entries)
    assert all(m.kind == "exact" for e in t.entries if e.table.endswith("_exact") for m in e.matches)
    assert t.guards["t_add_order_price"] == "t_add_order_price_exact"
    assert t.guards["t_add_order_price_any"] == "t_add_order_price"


def test_the_summary_and_resources_say_each_tables_kind_and_the_stages(tmp_path: Path) -> None:
    spec = load_spec(ITCH)
    c = compile_rules(spec, THREE)
    art = backend("p4").build(c, TargetOptions(arch="tna"))
    import re
    assert re.search(r"t_add_order_stock_exact +exact +2 ", art.summary)
    assert re.search(r"t_add_order_price +range +3 ", art.summary)
    assert "stages: 6 dependent of the pipe's 12" in art.summary
    import json
    report = json.loads(art.files["switch_resources.json"])
    assert report["tables"]["t_add_order_price"]["kind"] == "range" and report["stages"] == 6
    assert 'hdr.add_order.stock : exact @name("add_order.stock")' in art.files["camus.p4"]


def _fields_spec(n: int) -> str:
    return (f"header m_t {{ {' '.join(f'bit<16> f{i};' for i in range(n))} }}\nstruct headers {{ m_t m; }}\n"
            + "".join(f"@pragma query_field(m.f{i})\n" for i in range(n)))


def test_a_tofino_program_over_its_stages_is_refused_with_what_to_change(tmp_path: Path) -> None:
    """t_root, one stage per field, the leaf: 10 fields fit Tofino-1's 12 stages, 11 do not (on
    TNA; bmv2 runs any number), a tofino2 budget (20 stages) takes them."""
    for n, fits in ((10, True), (11, False)):
        spec = parse_spec(_fields_spec(n), "m.p4")
        at = schema_stages(p4_schema(spec, P4Options(arch="tna")))
        assert 1 + max(at.values()) == n + 2
        c = compile_rules(spec, "f0 == 1 and f1 > 5 : fwd(1)\n")
        if fits:
            backend("p4").build(c, TargetOptions(arch="tna"))
            continue
        with pytest.raises(BackendError, match=r"needs 13 dependent stages.*at most 10 query fields.*device: tofino2"):
            backend("p4").build(c, TargetOptions(arch="tna"))
        budget = tmp_path / "b.yaml"
        budget.write_text("device: tofino2\n")
        assert Budget.load(budget).stages == TOFINO2.stages
        backend("p4").build(c, TargetOptions(arch="tna", budget_file=str(budget)))
        backend("p4").build(c, TargetOptions(arch="v1model"))


def test_budget_files_name_a_device_or_figures(tmp_path: Path) -> None:
    b = tmp_path / "b.yaml"
    b.write_text("device: tofino2\ntcam_block_rows: 1000\n")
    got = Budget.load(b)
    assert got.sram_words == TOFINO2.sram_words and got.tcam_block_rows == 1000
    b.write_text("device: tofino9\n")
    with pytest.raises(ValueError, match="device must be one of"):
        Budget.load(b)
    b.write_text("group_members: 5\n")                          # old files still load
    assert Budget.load(b).group_members == 5


def test_fitting_tries_no_alpha_where_no_table_has_a_range(tmp_path: Path) -> None:
    """Discretising constants cannot shrink tables of equalities on exact fields: an over-budget
    set of them fails at once, instead of recompiling once per alpha step for the same tables."""
    from camus.compiler.backends.base import OverBudget
    from camus.compiler.fitting import build_fitted
    spec = parse_spec("header m_t { bit<32> name; }\nstruct headers { m_t m; }\n@pragma query_field_exact(m.name)\n",
                      "names.p4")
    c = compile_rules(spec, "".join(f"name == {i} : fwd({1 + i % 4})\n" for i in range(200)))
    budget = tmp_path / "b.yaml"
    budget.write_text("sram_words: 10\n")
    notes: list[str] = []
    with pytest.raises(OverBudget, match="sram words"):
        build_fitted(c, backend("p4"), TargetOptions(budget_file=str(budget), notice=notes.append))
    assert not any("--alpha" in n for n in notes), notes
