"""Every broker on a small lab, end to end: feed, receivers, captures to Parquet, Spark report.
At the latency phase's low rate the exact brokers (camus-xdp, C, Python) deliver exactly the
expected messages, and the topic brokers deliver all of them plus the price-filtered extras."""
from __future__ import annotations

from pathlib import Path

import pytest

from camus.bench.analysis import run_analysis
from camus.bench.bench_run import BenchConfig, run_bench

pytestmark = [pytest.mark.netns, pytest.mark.spark, pytest.mark.slow]


def test_all_brokers_small_run(spark, tmp_path: Path) -> None:
    cfg = BenchConfig(brokers=["xdp", "c", "py", "mosquitto", "nats", "redis"], out=tmp_path / "run",
                      subscribers=[3], subscriptions=[200], messages=20_000, duration=1.0,
                      latency_rate=4000, latency_seconds=1.0, interesting_share=0.2, search_steps=2,
                      search_seconds=0.5)
    steps = []
    facts = run_bench(cfg, lambda what, frac: steps.append(frac))
    assert steps[-1] == 1.0 and len(facts) == 12
    head = run_analysis(cfg.out, spark=spark)
    rows = {(r["broker"], r["phase"]): r.asDict() for r in
            spark.read.parquet(str(cfg.out / "results" / "summary")).collect()}
    for b in ("xdp", "c", "py"):
        r = rows[(b, "latency")]
        assert r["expected"] > 50 and (r["correct"], r["delivered"]) == (r["expected"], r["expected"]), r
        assert r["duplicates"] == 0 and 0 < r["p50_us"] < 100_000
    for b in ("mosquitto", "nats", "redis"):
        r = rows[(b, "latency")]
        assert r["recall"] == 1.0 and r["precision"] < 1.0, r          # topics cannot filter on price
    assert set(head["brokers"]) == {"xdp", "c", "py", "mosquitto", "nats", "redis"}
    assert (cfg.out / "results" / "report.md").read_text().count("| camus-xdp |") == 1
    assert not list((cfg.out / "tmp").glob("*.bin"))                   # raw captures converted and removed
    import json
    found = [json.loads(x) for x in (cfg.out / "maxrate.jsonl").read_text().splitlines()]
    assert {m["broker"] for m in found} == set(cfg.brokers) and all(len(m["probes"]) == 2 for m in found)
    xdp = next(m for m in found if m["broker"] == "xdp")
    assert xdp["max_lossless_msgs_per_s"] > cfg.latency_rate             # the first probe already lossless
    assert head["brokers"]["xdp"]["200"]["max_lossless_msgs_per_s"] == xdp["max_lossless_msgs_per_s"]


def test_leftovers_of_an_earlier_lab_are_removed() -> None:
    """A crashed run with more subscribers left namespaces and links behind: the next lab with
    the same prefix finds them by name and removes them, and removes its own on exit."""
    from camus.lab.namespaces import Lab, sh
    sh("ip", "netns", "add", "camus-left-s7")
    sh("ip", "link", "add", "camus-le-s7b", "type", "veth", "peer", "name", "camus-le-s7", "netns", "camus-left-s7")
    with Lab("camus-left", subscribers=1):
        names = sh("ip", "netns", "list").stdout
        assert "camus-left-s7" not in names and "camus-left-s1" in names
        assert "camus-le-s7b" not in sh("ip", "-o", "link").stdout
    assert "camus-left" not in sh("ip", "netns", "list").stdout


def test_labs_of_two_runs_stand_apart_and_a_dead_runs_lab_is_removed() -> None:
    """Runs name their labs after their process (run_lab_prefix) on a net no address uses
    (free_net): a second lab beside the first leaves it standing, on another net; a lab whose
    owner died without removing it (kill -9) is removed by the next lab to start (issue 46)."""
    import subprocess
    from camus.lab.namespaces import LAB_OWNERS, Lab, free_net, run_lab_prefix, sh
    with Lab(run_lab_prefix("ta"), subscribers=1, routed=True, net=free_net()) as a:
        assert len(a.prefix) <= 8 and (LAB_OWNERS / a.prefix).read_text() == str(__import__("os").getpid())
        with Lab(run_lab_prefix("tb"), subscribers=1, routed=True, net=free_net()) as b:
            assert b.net != a.net and b.prefix != a.prefix
            names = sh("ip", "netns", "list").stdout
            assert f"{a.prefix}-s1" in names and f"{b.prefix}-s1" in names
        assert f"{a.prefix}-s1" in sh("ip", "netns", "list").stdout and not (LAB_OWNERS / b.prefix).exists()
    gone = subprocess.Popen(["true"])
    gone.wait()                                         # a process id nobody holds now
    stale = Lab("tdead", subscribers=1)
    stale.__enter__()                                   # entered, never exited: as a killed run leaves it
    (LAB_OWNERS / "tdead").write_text(str(gone.pid))
    from camus.dataplane.installed import STATE_ROOT
    lock = STATE_ROOT / "locks" / stale.broker          # a command on its broker killed while holding it
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    held = STATE_ROOT / "locks" / "cxgone-brk"          # another killed run's, its interface long gone
    held.touch()
    with Lab(run_lab_prefix("tc"), subscribers=1):
        assert "tdead-" not in sh("ip", "netns", "list").stdout and "tdead-" not in sh("ip", "-o", "link").stdout
        assert not (LAB_OWNERS / "tdead").exists()
        assert not lock.exists() and not held.exists()


def test_bench_run_refuses_a_lab_prefix_too_long_for_interface_names() -> None:
    from click.testing import CliRunner
    from camus.cli_bench import bench
    out = CliRunner().invoke(bench, ["run", "--lab-prefix", "much-too-long"])
    assert out.exit_code == 1 and "1-8 characters" in out.output
