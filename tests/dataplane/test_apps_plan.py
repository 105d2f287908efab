"""Which app gets which frames on a shared interface (dataplane/apps.py plan): refusals come
before anything is loaded, so they need no root."""
from __future__ import annotations

import pytest

from camus.compiler.compile import compile_rules
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.dataplane import apps, dispatch
from camus.dataplane.program import DataplaneError
from tests.conftest import APPS


def app(name: str, folder: str, spec_file: str, rules: str) -> apps.App:
    spec = load_spec(APPS / folder / spec_file)
    return apps.App(name, compile_rules(spec, rules), spec_file, "rules.txt")


ITCH = app("itch", "itch", "itch.p4", "stock == GOOGL : fwd(1)\n")
KAFKA = app("kafka", "kafka", "kafka.p4", 'topic == "orders" : fwd(1)\n')
PAIRS = app("pairs", "attrs", "pairs.p4", "kind == 3 : fwd(1)\n")


def test_keys_are_udp_ports_or_the_attribute_ethertype() -> None:
    keys = apps.plan([ITCH, KAFKA, PAIRS])
    assert keys == {dispatch.KEY_UDP | 26400: 0, dispatch.KEY_UDP | 9092: 1, dispatch.KEY_ETHER | 0x9001: 2}
    assert apps.dispatch_keys(PAIRS.compiled.spec) == {dispatch.KEY_ETHER | 0x9001: "EtherType 0x9001"}


@pytest.mark.parametrize("todo,message", [
    ([app("car", "car", "car.p4", "speed > 1 : fwd(1)\n"), app("topics", "topics", "topics.p4", 'topic == "a/#" : fwd(1)\n')],
     "'car' and 'topics' both take UDP port 9200"),
    ([PAIRS, app("bits", "attrs", "bitmask.p4", "kind == 3 : fwd(1)\n")], "both take EtherType 0x9001"),
    ([ITCH, ITCH], "two apps are named 'itch'"),
    ([apps.App("a b", ITCH.compiled, "s", "r"), KAFKA], "not a valid app name"),
    ([ITCH], "one app: plain `attach --spec --rules`"),
    ([apps.App(f"a{i}", ITCH.compiled, "s", "r") for i in range(17)], "2 to 16 apps"),
])
def test_refusals_name_the_apps_and_the_key(todo: list[apps.App], message: str) -> None:
    with pytest.raises(DataplaneError, match=message.replace("(", r"\(").replace(")", r"\)")):
        apps.plan(todo)


def test_a_spec_on_any_port_cannot_share() -> None:
    spec = parse_spec((APPS / "itch" / "itch.p4").read_text().replace("@pragma udp_port(26400)", ""))
    with pytest.raises(DataplaneError, match="takes any UDP port"):
        apps.plan([ITCH, apps.App("any", compile_rules(spec, "stock == A : fwd(1)\n"), "s", "r")])
