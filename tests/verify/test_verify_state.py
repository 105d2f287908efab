"""State functions (count, sum, avg, every) in `verify`: an aggregate is one more variable of the
message and its update part of what the tables must give. The shipped windowed apps are proven on
the IR; a wrong threshold or a missing update is reported, and the counterexample is reproduced
by feeding the reference interpreter that many messages."""
from __future__ import annotations

import dataclasses

import pytest

from camus.compiler.codec.packets import message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.verify.check import check
from camus.verify.machines import ir_machine
from camus.verify.rules import read_rules
from tests.conftest import APPS

INT = APPS / "int" / "int.p4"
ITCH = (APPS / "itch" / "itch.p4").read_text() + "\n@pragma query_counter(seq, 0, 16)\n@pragma query_counter(w, 1000, 16)\n"
MIXED = """stock == GOOGL and every(10, seq) : fwd(1)
stock == GOOGL and price > 50 : fwd(2)
stock == AAPL and not every(3, seq) : fwd(3)
every(4, seq) or stock == MSFT : fwd(4)
not count(price, w) > 5 and stock == IBM : fwd(5)
sum(shares, w) >= 1000 and (stock == IBM or price < 20) : fwd(6)
avg(price, w) > 70 and stock == GOOGL : drop
count(price, w) > 5 and stock == IBM : fwd(7)
"""


@pytest.mark.parametrize("app", ["int", "hicn"])
def test_the_windowed_apps_are_proven_on_the_ir(app: str) -> None:
    spec = load_spec(APPS / app / f"{app}.p4")
    text = (APPS / app / "rules.txt").read_text()
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    assert c.pipeline.state_vars
    assert check(read_rules(spec, text), ir_machine(spec, c.pipeline)).verdict == "equal"


def test_every_state_function_under_and_or_not_is_proven() -> None:
    spec = parse_spec(ITCH)
    c = compile_rules(spec, MIXED, options=CompileOptions(strategy="bdd"))
    rules = read_rules(spec, MIXED)
    # the two IBM rules share an aggregate (same function, field, window, condition); the others own one
    assert len([f for f in rules.fields if f.part == "state"]) == len(c.pipeline.state_vars) == 6
    assert check(rules, ir_machine(spec, c.pipeline)).verdict == "equal"


def test_a_wrong_threshold_is_reported_and_reproduced_with_that_many_messages() -> None:
    spec = load_spec(INT)
    text = "count(hop_latency) > 100 and hop_latency > 20000 : fwd(4)\nhop_latency > 100000 : fwd(1)\n"
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    t = next(t for t in c.pipeline.tables if t.state_var is not None)
    entries = [dataclasses.replace(e, match=("range", e.match[1] + 1, e.match[2])) if e.match[0] == "range"
               and e.match[1] == 101 else e for e in t.entries]
    assert entries != t.entries
    bad = dataclasses.replace(c.pipeline, tables=[dataclasses.replace(t, entries=entries) if x is t else x
                                                  for x in c.pipeline.tables])
    got = check(read_rules(spec, text), ir_machine(spec, bad))
    assert got.verdict == "differs" and got.counterexample is not None
    cx = got.counterexample
    aggregate = next(v for k, v in cx.values.items() if k.startswith("state."))
    assert aggregate == 101 and 4 in cx.rules.ports and 4 not in cx.tables.ports, cx.to_json()
    # the reference interpreter, fed 101 such messages in one window: the good tables deliver the
    # 101st to port 4, the bad ones do not
    message = message_from_text(spec, f"hop_latency={cx.values['int_report.hop_latency']}")
    for pipeline, delivered in ((c.pipeline, True), (bad, False)):
        run = PipelineInterpreter(pipeline)
        verdicts = [run.run(message, 0) for _ in range(101)]
        assert (4 in verdicts[-1].actions.ports) == delivered
        assert 4 not in verdicts[-2].actions.ports


def test_a_missing_update_is_reported() -> None:
    spec = load_spec(INT)
    text = "count(hop_latency) > 100 and hop_latency > 20000 : fwd(4)\n"
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    aggregate_table = next(t for t in c.pipeline.tables if t.state_var is not None)
    state = next(s for s in c.pipeline.state_updates if s in aggregate_table.states)   # where the interpreter reads it
    bad = dataclasses.replace(c.pipeline, state_updates={s: v for s, v in c.pipeline.state_updates.items()
                                                         if s != state})
    got = check(read_rules(spec, text), ir_machine(spec, bad))
    assert got.verdict == "differs" and got.counterexample is not None
    assert got.counterexample.rules.updates == {"state.latency_window#0:count(int_report.hop_latency)"}
    assert not got.counterexample.tables.updates
    assert "adds to aggregate" in got.counterexample.rules.text()


def test_the_xdp_maps_aggregates_are_read_back() -> None:
    """--target ebpf: the maps as attach writes them, aggregates included (svar_cfg names each
    one, `updates` says which a state adds to); a cleared update mask is reported."""
    import ctypes
    from camus.verify.targets import written_xdp
    spec = load_spec(INT)
    text = (APPS / "int" / "rules.txt").read_text()
    maps, machine = written_xdp(compile_rules(spec, text, options=CompileOptions(strategy="bdd")))
    assert check(read_rules(spec, text), machine()).verdict == "equal"
    boundary = next(s for s, ups in machine().updates.items() if ups)    # where update_svars reads it
    maps.store["updates"][bytes(ctypes.c_uint32(boundary & 0x3FFFFFFF))] = bytes(ctypes.c_uint64(0))
    got = check(read_rules(spec, text), machine())
    assert got.verdict == "differs" and got.counterexample is not None
    assert got.counterexample.rules.updates and not got.counterexample.tables.updates
