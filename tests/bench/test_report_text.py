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


def _rows(counts: list[int]) -> list[dict]:
    return [{"broker": b, "subscriptions": m, "subscribers": 8, "delivered_msgs_per_s": rate * (1 + m / 1e6)}
            for b, rate in (("xdp", 2.5e6), ("mosquitto", 4e4)) for m in counts]


def test_one_subscription_count_is_drawn_as_bars_from_zero_several_as_lines() -> None:
    """A run at one subscription count drew a lone dot per broker on log axes (issue 46): now
    one labelled bar per broker on an axis from 0; several counts stay lines over log axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from camus.bench.report import draw_metric
    fig, ax = plt.subplots()
    kind = draw_metric(ax, _rows([1000]), "delivered_msgs_per_s", "delivered messages/s", "subscriptions",
                       "subscribers", 8, "log", "Throughput")
    assert kind == "bars" and len(ax.patches) == 2 and ax.get_ylim()[0] == 0 and ax.get_yscale() == "linear"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["camus-xdp", "mosquitto (MQTT)"]
    assert "subscriptions = 1,000" in ax.get_title()
    assert sorted(t.get_text() for t in ax.texts) == ["2,502,500", "40,040"]     # each bar says its value
    plt.close(fig)
    fig, ax = plt.subplots()
    kind = draw_metric(ax, _rows([1000, 100_000]), "delivered_msgs_per_s", "delivered messages/s", "subscriptions",
                       "subscribers", 8, "log", "Throughput")
    assert kind == "lines" and len(ax.get_lines()) == 2 and ax.get_xscale() == "log"
    plt.close(fig)
