"""`bench/xdp_bench.py --spec SPEC --rules RULES` measures any rule set: messages drawn on the
rules' own constants, the program sized as attach sizes it, ns per message next to the floor."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from camus.bench.xdp_bench import rule_messages
from camus.compiler.compile import compile_files
from tests.conftest import APPS, ROOT

SPEC, RULES = APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"


def test_messages_take_the_values_the_rules_name() -> None:
    c = compile_files(SPEC, RULES)
    msgs = rule_messages(c, 400, 1)
    named = {v for r in c.lowered.rules for v in _points(r.formula)}
    stocks = [m["add_order.stock"] for m in msgs]
    assert sum(s in named for s in stocks) > 0.9 * len(stocks)       # mostly symbols the rules name
    assert len(set(stocks)) > 1 and all(0 <= m["add_order.price"] < 1 << 32 for m in msgs)


def _points(f) -> set[int]:
    if f[0] == "lit":
        return {lo for lo, hi in f[2] if lo == hi}
    if f[0] in ("and", "or"):
        return set().union(*(_points(g) for g in f[1]))
    return set()


@pytest.mark.bpf
def test_any_rule_set_is_measured_next_to_the_floor() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "xdp_bench.py"), "--spec", str(SPEC), "--rules",
                          str(RULES), "--quick", "--samples", "2", "--rounds", "1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["rules"] == 6 and figures["ns"] > 0 and figures["floor"] > 0 and figures["worst"] >= figures["ns"]
    assert figures["ns_12msg"] > 0 and "msgs/pkt" in out.stdout
