"""The report says how the run was made: the throughput phase's feed rate and where the work ran."""
from __future__ import annotations

from camus.bench.report import _placement, _throughput_rate


def test_a_fixed_burst_rate_is_named_not_called_full_speed() -> None:
    assert _throughput_rate({"burst_rate": 1_000_000}) == "1,000,000 messages/s"
    assert _throughput_rate({"burst_rate": 0}) == "the sender's full speed"
    assert _throughput_rate({}) == "the sender's full speed"


def test_the_placement_names_split_cpus_fanout_and_sender() -> None:
    text = _placement({"split_cpus": True, "fanout": "xdp", "sender": "c"})
    assert text == ("broker alone on CPU 1, sender and receivers on CPU 0 (--split-cpus); "
                    "camus-xdp fan-out xdp; sender c")
    assert _placement({}).startswith("sender, broker and receivers sharing the CPUs; camus-xdp fan-out auto")
