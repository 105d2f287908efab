"""Custom actions an XDP host runs itself (compiler/backends/ebpf/custom.py) are refused, with
the reason, where the program cannot run them: on the bit-vector stage, and on a spec without the
header they act on. Nothing is written: map_contents raises before any map exists."""
from __future__ import annotations

import pytest

from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.backends.emit import BackendError
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS
from tests.dataplane.test_xdp_kernel import LIMITS


@pytest.mark.parametrize("app, own_rule, itch_rule, reason", [
    ("dns", 'qname == "a.example" : answerDNS(10.0.0.1)', "stock == GOOGL : answerDNS(10.0.0.1)",
     "no DNS query to answer"),
    ("ila", "ipv6.dst == 2001:db8::1 : ila(2001:db8:1:2::)", "stock == GOOGL : ila(2001:db8:1:2::)",
     "no IPv6 header")])
def test_custom_actions_need_the_diagram_stage_and_their_header(app: str, own_rule: str, itch_rule: str,
                                                                reason: str) -> None:
    spec = load_spec(APPS / app / f"{app}.p4")
    c = compile_rules(spec, own_rule, options=CompileOptions(strategy="bitvector"))
    with pytest.raises(BackendError, match="decision-diagram stage"):
        map_contents(c.pipeline, c.spec, LIMITS)
    c = compile_rules(load_spec(APPS / "itch" / "itch.p4"), itch_rule)
    with pytest.raises(BackendError, match=reason):
        map_contents(c.pipeline, c.spec, LIMITS)
