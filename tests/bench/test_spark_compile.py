"""Per-device compilation on Spark gives the same resource reports as compiling locally."""
from __future__ import annotations

import pytest

from camus.bench.routing_bench import itch_subscriptions
from camus.bench.spark_compile import compile_on_spark
from camus.compiler.ir.resources import resource_report
from camus.compiler.language.spec_parser import load_spec
from camus.controller.devices import DeviceCompiler
from camus.controller.routing import route
from camus.controller.topology import random_graph
from tests.conftest import APPS

pytestmark = pytest.mark.spark


def test_spark_compile_matches_local(spark) -> None:
    spec_path = APPS / "itch" / "itch.p4"
    t = random_graph(60, seed=4)
    routing = route(t, itch_subscriptions(t.hosts, 3, 4), "mst++")
    rules = {d: routing.device_rules(d) for d in routing.filters}
    remote = compile_on_spark(spark, rules, spec_path.read_text(), partitions=4)
    local = DeviceCompiler(load_spec(spec_path)).compile(routing)
    assert set(remote) == set(local) == set(t.devices)
    for d, tables in local.items():
        want = resource_report(tables.compiled.pipeline)
        got = {k: v for k, v in remote[d].items() if k != "compile_s"}
        assert got == want, d
