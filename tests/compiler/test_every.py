"""every(n): SANDS's 1-out-of-N frequency filter. The n-th, 2n-th ... message matching the rest
of the filter is delivered, through the filters, the IR and (tests/dataplane) the kernel."""
from __future__ import annotations

import pytest

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import check_program_fit, p4_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.schema import P4Options
from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import compile_rules
from camus.compiler.language.cover import stateless_cover
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.semantics.filter_eval import FilterEvaluator
from camus.compiler.semantics.interpreter import PipelineInterpreter
from tests.conftest import APPS

ITCH = (APPS / "itch" / "itch.p4").read_text()
SEQ = "\n@pragma query_counter(seq, 0, 16)\n"
RULES = """stock == GOOGL and every(10) : fwd(1)
stock == GOOGL and price > 50 : fwd(2)
stock == AAPL and not every(3) : fwd(3)
every(4) or stock == MSFT : fwd(4)
"""
STOCKS = ["GOOGL", "AAPL", "MSFT", "IBM"]


def stock_of(i: int) -> str:
    return STOCKS[i % 4] if i % 7 else "GOOGL"


def feed(spec, n: int = 240) -> list[dict[str, int]]:
    return [message_from_text(spec, f"stock={stock_of(i)} price={i * 13 % 100}") for i in range(n)]


def test_one_out_of_n_through_filters_and_tables() -> None:
    spec = parse_spec(ITCH + SEQ, "itch.p4")
    c = compile_rules(spec, RULES)
    direct, tables = FilterEvaluator(c.rules, c.lowered), PipelineInterpreter(c.pipeline)
    got: dict[int, list[int]] = {1: [], 2: [], 3: [], 4: []}
    for i, m in enumerate(feed(spec)):
        have = tables.run(m).actions
        assert sorted(have.ports) == sorted(direct.run(m).ports), i
        for p in have.ports:
            got[p].append(i)
    googl = [i for i in range(240) if stock_of(i) == "GOOGL"]
    aapl = [i for i in range(240) if stock_of(i) == "AAPL"]
    assert got[1] == googl[9::10]                                      # exactly every tenth
    assert got[3] == [i for k, i in enumerate(aapl) if (k + 1) % 3]    # two of every three
    assert got[4] == sorted(set(range(3, 240, 4)) | {i for i in range(240) if stock_of(i) == "MSFT"})


def test_two_subscriptions_with_the_same_filter_share_one_count() -> None:
    spec = parse_spec(ITCH + SEQ, "itch.p4")
    c = compile_rules(spec, "stock == GOOGL and every(5) : fwd(1)\nstock == GOOGL and every(5) : fwd(2)\n")
    assert len(c.pipeline.state_vars) == 1
    tables = PipelineInterpreter(c.pipeline)
    hits = [i for i, m in enumerate(feed(spec, 60)) if tables.run(m).actions.ports]
    assert hits == [i for i in range(60) if stock_of(i) == "GOOGL"][4::5]


@pytest.mark.parametrize("spec_tail, rules, why, column", [
    ("", "every(10) : fwd(1)", "every(n) needs a counter that never resets", 1),
    (SEQ, "stock == A and every(0) : fwd(1)", "a whole number n >= 1", 22),
    (SEQ, "every(x) : fwd(1)", "a whole number n >= 1", 7),
    (SEQ, "every(3, nope) : fwd(1)", "unknown or unspecified counter", 1),
    (SEQ + "@pragma query_counter(win, 1000, 4)\n", "every(3, win) and every(3, nope) : fwd(1)",
     "unknown or unspecified counter", 19),
])
def test_errors_point_at_the_mistake(spec_tail: str, rules: str, why: str, column: int) -> None:
    spec = parse_spec(ITCH + spec_tail, "itch.p4")
    with pytest.raises(CompileErrors) as exc:
        compile_rules(spec, rules + "\n")
    err = exc.value.errors[0]
    assert err.position is not None
    assert why in str(err) and err.position.column == column, (str(err), err.position)


def test_a_windowed_counter_restarts_the_count_each_window() -> None:
    spec = parse_spec(ITCH + "\n@pragma query_counter(win, 1000, 4)\n", "itch.p4")
    tables = PipelineInterpreter(compile_rules(spec, "every(3, win) : fwd(1)\n").pipeline)
    m = message_from_text(spec, "stock=A price=1")
    hits = [t for t in range(0, 2000, 250) if tables.run(m, t).actions.ports]
    assert hits == [500, 1500]          # 3rd of the window [0, 1000), 3rd of [1000, 2000)


def test_earlier_hops_forward_by_the_cover() -> None:
    assert stateless_cover("stock == GOOGL and every(10)") == "stock == GOOGL"
    assert stateless_cover("not every(3) and price > 5") == "price > 5"


def test_the_switch_keeps_the_count_modulo_n_and_delivers_the_same() -> None:
    """v1model: every(n)'s register wraps at n (a compare, no division); the entries, run by the
    entry interpreter, deliver exactly what the IR does, on an endless and a windowed counter."""
    spec = parse_spec(ITCH + SEQ + "@pragma query_counter(win, 1024, 4)\n", "itch.p4")
    for rules, times in ((RULES, [0] * 240), ("every(3, win) : fwd(1)\nstock == AAPL and every(2) : fwd(2)\n",
                                                [i * 200 for i in range(240)])):
        c = compile_rules(spec, rules)
        ir, switch = PipelineInterpreter(c.pipeline), EntryInterpreter(p4_tables(c.pipeline, spec))
        for i, (m, now) in enumerate(zip(feed(spec), times)):
            assert sorted(switch.run(m, now).ports) == sorted(ir.run(m, now).actions.ports), (rules, i)
    text = program_text(spec, P4Options(arch="v1model"))
    assert "action update_seq_every(bit<32> index, bit<64> modulus)" in text
    assert "r_seq_count.write(index, count == modulus ? 0 : count);" in text
    with pytest.raises(BackendError, match="use --arch v1model"):
        check_program_fit(compile_rules(spec, RULES).pipeline, spec, "tna")
