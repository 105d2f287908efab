"""The Spark analysis on small captures with known answers: precision, recall, loss,
duplicates, rates, latency percentiles and the headline ratios, figure by figure."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from camus.bench.analysis import headline, run_analysis
from camus.bench.bench_run import _write_parquet

pytestmark = pytest.mark.spark
S = 1_000_000_000


def _deliveries(run: Path, broker: str, phase: str, rows: list[tuple[int, int, int, int]]) -> None:
    """rows: (subscriber, seq, latency_us, rx_offset_ns)"""
    cols = {"subscriber": [], "seq": [], "send_ts": [], "rx_ts": [], "packet": []}
    for sub, seq, lat_us, rx_off in rows:
        rx = S + rx_off
        for c, v in zip(cols.values(), (sub, seq, rx - lat_us * 1000, rx, seq)):
            c.append(v)
    by_sub: dict[int, dict[str, list]] = {}
    for i, sub in enumerate(cols["subscriber"]):
        d = by_sub.setdefault(sub, {k: [] for k in cols})
        for k in cols:
            d[k].append(cols[k][i])
    for sub, d in by_sub.items():
        _write_parquet(d, run / "deliveries" / f"broker={broker}/subscribers=2/subscriptions=10/phase={phase}" /
                       f"sub{sub}.parquet")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    (run / "config.json").write_text(json.dumps({"messages": 12, "interesting_share": 1.0, "duration": 1,
                                                 "latency_rate": 10, "latency_seconds": 1}))
    # subscriber 1 wants seqs 1..10, subscriber 2 wants 1..5
    _write_parquet({"seq": list(range(1, 11)) + list(range(1, 6)), "subscriber": [1] * 10 + [2] * 5},
                   run / "expected" / "subscribers=2" / "subscriptions=10" / "part.parquet")
    facts = []
    for broker, phase, sent, cpu in (("xdp", "latency", 10, 0.0), ("xdp", "throughput", 10, 0.0),
                                     ("mosquitto", "latency", 12, 0.5), ("mosquitto", "throughput", 12, 0.6)):
        facts.append({"broker": broker, "subscribers": 2, "subscriptions": 10, "phase": phase, "rate": 0,
                      "sent_messages": sent, "send_seconds": 1.0, "started": 0, "received_messages": 0,
                      "broker_cpu_s": cpu, "system_busy_s": 2.0, "softirq_s": 0.1})
    (run / "runs.jsonl").write_text("".join(json.dumps(f) + "\n" for f in facts))
    # xdp latency: sub 1 gets 1..10 (seq 10 slow), sub 2 gets 1..4 plus a duplicate of 1; span 1 s
    rows = [(1, q, 100 if q == 10 else 10, (q - 1) * S // 9) for q in range(1, 11)]
    rows += [(2, q, 20, q * 1000) for q in range(1, 5)] + [(2, 1, 30, 5000)]
    _deliveries(run, "xdp", "latency", rows)
    # xdp throughput: everything, 15 copies over 0.5 s
    _deliveries(run, "xdp", "throughput", [(1, q, 5, (q - 1) * S // 18) for q in range(1, 11)] +
                [(2, q, 5, q * S // 10) for q in range(1, 6)])
    # mosquitto latency: sub 1 gets 1..12 (11 and 12 unwanted), sub 2 nothing; span 1 s
    _deliveries(run, "mosquitto", "latency", [(1, q, 50, (q - 1) * S // 11) for q in range(1, 13)])
    # mosquitto throughput: 12 copies over 2 s
    _deliveries(run, "mosquitto", "throughput", [(1, q, 500, (q - 1) * 2 * S // 11) for q in range(1, 13)])
    return run


def test_known_answers(spark, run_dir: Path) -> None:
    head = run_analysis(run_dir, spark=spark)
    rows = {(r["broker"], r["phase"]): r for r in
            (x.asDict() for x in spark.read.parquet(str(run_dir / "results" / "summary")).collect())}
    x = rows[("xdp", "latency")]
    assert (x["expected"], x["delivered"], x["correct"], x["duplicates"]) == (15, 14, 14, 1)
    assert x["recall"] == pytest.approx(14 / 15) and x["loss"] == pytest.approx(1 / 15) and x["precision"] == 1.0
    assert x["delivered_copies"] == 15 and x["packets"] == 14 and x["rx_span_s"] == pytest.approx(1.0)
    assert x["delivered_msgs_per_s"] == pytest.approx(15.0) and x["packets_per_s"] == pytest.approx(14.0)
    assert (x["p50_us"], x["p99_us"], x["p999_us"]) == (10.0, 100.0, 100.0)
    assert x["system_cpu_s_per_mmsg"] == pytest.approx(2.0 / 10e-6)
    m = rows[("mosquitto", "latency")]
    assert (m["expected"], m["delivered"], m["correct"]) == (15, 12, 10)
    assert m["precision"] == pytest.approx(10 / 12) and m["recall"] == pytest.approx(10 / 15)
    assert m["broker_cpu_s_per_mmsg"] == pytest.approx(0.5 / 12e-6)
    per = {(r["broker"], r["phase"], r["subscriber"]): r for r in
           (x.asDict() for x in spark.read.parquet(str(run_dir / "results" / "per_subscriber")).collect())}
    assert per[("mosquitto", "latency", 2)]["delivered"] == 0 and per[("mosquitto", "latency", 2)]["recall"] == 0
    assert per[("xdp", "latency", 2)]["recall"] == pytest.approx(4 / 5)
    assert rows[("xdp", "throughput")]["delivered_msgs_per_s"] == pytest.approx(15 / 0.5)
    assert rows[("mosquitto", "throughput")]["delivered_msgs_per_s"] == pytest.approx(12 / 2)
    # wanted deliveries: xdp 15 in 0.5 s, mosquitto 10 of its 12 (2 unwanted) in 2 s
    assert rows[("mosquitto", "throughput")]["wanted_msgs_per_s"] == pytest.approx(10 / 2)
    assert head["ratio_xdp_to_mosquitto"] == pytest.approx(6.0)
    # CPU per delivered copy: (process + softirq) / copies; runs without bpf_s read it as 0
    assert rows[("xdp", "throughput")]["cpu_ns_per_msg"] == pytest.approx(0.1e9 / 15)
    assert rows[("mosquitto", "throughput")]["cpu_ns_per_msg"] == pytest.approx(0.7e9 / 12)
    assert rows[("xdp", "throughput")]["bpf_ns_per_msg"] == 0.0
    assert head["cpu_ratio_xdp_to_mosquitto"] == pytest.approx((0.7e9 / 12) / (0.1e9 / 15), rel=1e-2)
    # the feed worked through: 10 sent, 14/15 of the deliveries made, last one 2 s after the start
    assert x["input_msgs_per_s"] == pytest.approx(10 * 14 / 15 / 2.0)
    assert head["brokers"]["xdp"]["10"]["p99_us"] == 100.0
    cdf = [r.asDict() for r in spark.read.parquet(str(run_dir / "results" / "latency_cdf")).collect()
           if r["broker"] == "xdp" and r["phase"] == "latency"]
    assert sorted(r["latency_us"] for r in cdf)[0] == 10.0 and max(r["latency_us"] for r in cdf) == 100.0
    report = (run_dir / "results" / "report.md").read_text()
    assert "| camus-xdp | 30 | 0.00% | 100.0 | 1 (itself) |" in report
    assert "throughput phase at the sender's full speed (capped at 1 s)" in report
    assert "sender, broker and receivers sharing the CPUs; camus-xdp fan-out auto" in report
    assert (run_dir / "results" / "report.html").exists()
    assert (run_dir / "results" / "plots" / "latency_cdf_10.png").exists()
    assert (run_dir / "results" / "plots" / "cpu_vs_subscriptions.png").exists()


def test_headline_ratios_use_the_slowest_configuration() -> None:
    rows = [{"broker": b, "subscribers": 8, "subscriptions": s, "phase": "throughput", "delivered_msgs_per_s": v,
             "loss": 0.0, "precision": 1.0} for b, s, v in
            (("xdp", 1000, 100.0), ("xdp", 100000, 90.0), ("py", 1000, 10.0), ("py", 100000, 3.0))]
    for r, cpu in zip(rows, (50.0, 60.0, 1000.0, 3000.0)):
        r["cpu_ns_per_msg"] = cpu
    h = headline(rows)
    assert h["ratios"] == {"ratio_xdp_to_py@1000": 10.0, "ratio_xdp_to_py@100000": 30.0}
    assert h["ratio_xdp_to_py"] == 10.0
    assert h["cpu_ratios"] == {"ratio_xdp_to_py@1000": 20.0, "ratio_xdp_to_py@100000": 50.0}
    assert h["cpu_ratio_xdp_to_py"] == 20.0
