"""bench/sink_bench.py's bookkeeping: what each subscriber is due when the feed repeats, the
latency quantiles from the sinks' histogram, and the ratios the summary reports."""
from __future__ import annotations

import sys
from pathlib import Path

from camus.bench.sinks import BUCKET_NS, BUCKETS, Counts

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sink_bench  # noqa: E402


def test_due_counts_whole_passes_of_the_feed_and_the_part_sent_of_the_next() -> None:
    e = sink_bench.Expected([(3, 1), (1, 1), (7, 2), (10, 1), (3, 2)], total=10)
    assert [e.count(1, s) for s in (0, 1, 2, 3, 9, 10)] == [0, 1, 1, 2, 2, 3]
    assert e.count(1, 23) == 2 * 3 + 2              # two passes, then messages 1..3 again
    assert e.count(2, 17) == 2 + 2                  # 3 and 7, then 3 and 7 of the second pass
    assert e.count(5, 1000) == 0                    # a subscriber nobody's rules name


def test_latency_quantiles_are_bucket_upper_edges_and_counts_subtract() -> None:
    lat = [0] * BUCKETS
    lat[0], lat[4], lat[BUCKETS - 1] = 90, 9, 1
    before = Counts({1: 5}, {1: 50}, [0] * BUCKETS, other=2)
    now = Counts({1: 105}, {1: 350}, lat, other=3)
    d = now.minus(before)
    assert d.copies == {1: 100} and d.total_messages == 300 and d.other == 1
    assert d.latency_quantile_ms(0.5) == BUCKET_NS / 1e6
    assert d.latency_quantile_ms(0.99) == 5 * BUCKET_NS / 1e6
    assert d.latency_quantile_ms(1.0) == BUCKETS * BUCKET_NS / 1e6     # the overflow bucket: "at least"
    assert Counts({}, {}, [0] * BUCKETS).latency_quantile_ms(0.99) is None


def _result(lossless: int, cpu_best: int, cpu_at_rate: int, net_best: int | None = None) -> dict:
    best = {"achieved": lossless, "cpu_ns_per_msg": cpu_best, "net_cpu_ns_per_msg": net_best, "p99_ms": 0.1}
    return {"best": best, "common": {"cpu_ns_per_msg": cpu_at_rate, "net_cpu_ns_per_msg": None},
            "floor_best": {"ns_per_feed_msg": 88.0}, "sender_best": 5_000_000, "broker_bound": True}


def test_summary_ratios_are_the_smallest_over_the_subscription_counts(capsys) -> None:
    results = {"xdp@1000": _result(4_000_000, 1000, 2000, 500), "c@1000": _result(1_000_000, 3000, 8000, 2500),
               "xdp@100000": _result(3_000_000, 1100, 2500, 600), "c@100000": _result(1_500_000, 2500, 5000, 2400)}
    figures = sink_bench.summary(results, ["xdp", "c"], [1000, 100_000], 100_000)
    assert figures["lossless_ratio_xdp_to_c"] == 2.0            # min(4.0, 2.0)
    assert figures["cpu_ratio_xdp_to_c"] == 2.27                # min(3000/1000, 2500/1100)
    assert figures["net_cpu_ratio_xdp_to_c"] == 4.0             # min(2500/500, 2400/600)
    assert figures["cpu_ratio_at_rate_xdp_to_c"] == 2.0         # min(8000/2000, 5000/2500)
    assert figures["net_cpu_ratio_at_rate_xdp_to_c"] is None    # no floor measured at that rate
    assert figures["lossless_xdp@100000"] == 3_000_000
    assert "lossless x2.0" in capsys.readouterr().out


def test_a_broker_with_no_lossless_probe_gets_no_ratio() -> None:
    results = {"xdp@1000": _result(4_000_000, 1000, 2000),
               "py@1000": {"best": None, "common": {"cpu_ns_per_msg": 30000}, "sender_best": 10, "broker_bound": True}}
    figures = sink_bench.summary(results, ["xdp", "py"], [1000], 100_000)
    assert figures["lossless_py@1000"] == 0 and figures["lossless_ratio_xdp_to_py"] is None
    assert figures["cpu_ratio_at_rate_xdp_to_py"] == 15.0


def test_net_cost_takes_the_floor_per_feed_message_out() -> None:
    probe = {"cpu_s": 1.0, "sent": 4_000_000, "delivered": 1_000_000}
    floor = {"cpu_s": 0.2, "sent": 2_000_000}                   # 100 ns per feed message
    assert sink_bench.net_ns_per_msg(probe, floor) == 600       # (1.0 - 0.4) s / 1M
    assert sink_bench.net_ns_per_msg({**probe, "delivered": 0}, floor) is None
