"""The Spark job behind `camus-xdp bench report`: captured traffic in, figures out.

Reads a run directory (bench_run.py's layout: runs.jsonl, expected/, deliveries/ as
Parquet partitioned by broker/subscribers/subscriptions/phase) and computes per broker and
configuration: delivered messages/s and packets/s, loss, duplicates, precision and recall per
subscriber against the expected deliveries (over-delivery of topic brokers shows here), latency
p50/p99/p99.9 and its CDF, CPU seconds per million messages. Everything is DataFrame
aggregation (joins, approximate percentiles), so the job runs unchanged on captures far larger
than memory, locally (`local[*]`) or on a cluster (`--master`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEYS = ["broker", "subscribers", "subscriptions", "phase"]
CDF_POINTS = [i / 100 for i in range(1, 100)] + [0.995, 0.999]
ACCURACY = 20000          # percentile_approx: relative error about 1/ACCURACY of the rank


def spark_session(master: str = "local[*]", app: str = "camus-bench"):
    import os
    import sys
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master(master).appName(app)
            .config("spark.pyspark.python", sys.executable)       # workers import camus from this venv,
            .config("spark.executorEnv.PYTHONSAFEPATH", "1")      # not the checkout's camus/ folder
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "2g")
            .getOrCreate())


def quiet(spark):
    spark.sparkContext.setLogLevel("ERROR")
    return spark


RUN_PARTS = ("runs.jsonl", "expected", "deliveries")     # what `bench run` writes and the analysis reads


def check_run_dir(run_dir: Path) -> None:
    """Refuse a directory that is not a benchmark run, before Spark starts (tens of seconds)."""
    missing = [p for p in RUN_PARTS if not (run_dir / p).exists()]
    if missing:
        raise ValueError(f"{run_dir} is not a benchmark run directory (no {', '.join(missing)}); "
                         "`camus-xdp bench run --out DIR` makes one")
    if not any(ln.strip() for ln in (run_dir / "runs.jsonl").read_text().splitlines()):
        raise ValueError(f"{run_dir}: runs.jsonl holds no runs (the run was stopped before its first one)")


def load(spark, run_dir: Path):
    """(runs, expected, deliveries) DataFrames of a run directory."""
    from pyspark.sql import functions as F
    runs = spark.read.json(str(run_dir / "runs.jsonl"))
    expected = spark.read.parquet(str(run_dir / "expected"))
    deliveries = spark.read.parquet(str(run_dir / "deliveries"))
    # partition columns come back typed by inference: make the keys uniform
    for c in ("subscribers", "subscriptions"):
        expected = expected.withColumn(c, F.col(c).cast("long"))
        deliveries = deliveries.withColumn(c, F.col(c).cast("long"))
        runs = runs.withColumn(c, F.col(c).cast("long"))
    return runs, expected, deliveries


def analyse(spark, run_dir: Path) -> dict[str, Any]:
    """All tables of the report, as Spark DataFrames (and written as Parquet under results/)."""
    from pyspark.sql import functions as F
    runs, expected, deliveries = load(spark, run_dir)
    from pyspark import StorageLevel
    runs = runs.dropDuplicates(KEYS)
    cfg = ["subscribers", "subscriptions"]
    # How many deliveries each phase should have made: expected rows of the messages it sent,
    # counted per subscriber right away (never materialised per phase).
    exp_counts = (runs.select(*KEYS, "sent_messages").join(expected, cfg)
                  .where(F.col("seq") <= F.col("sent_messages"))
                  .groupBy(*KEYS, "subscriber").agg(F.count("*").alias("expected")))
    got = (deliveries.groupBy(*KEYS, "subscriber", "seq").agg(F.count("*").alias("copies"))
           .persist(StorageLevel.MEMORY_AND_DISK))
    marked = got.join(expected.select(*cfg, "subscriber", "seq").withColumn("wanted", F.lit(1)),
                      cfg + ["subscriber", "seq"], "left")
    per_sub = (marked.groupBy(*KEYS, "subscriber")
               .agg(F.count("*").alias("delivered"), F.sum(F.coalesce("wanted", F.lit(0))).alias("correct"),
                    F.sum(F.col("copies") - 1).alias("duplicates"))
               .join(exp_counts, KEYS + ["subscriber"], "full")
               .fillna(0, ["delivered", "correct", "duplicates", "expected"])
               .withColumn("precision", F.when(F.col("delivered") > 0, F.col("correct") / F.col("delivered")))
               .withColumn("recall", F.when(F.col("expected") > 0, F.col("correct") / F.col("expected")))
               .persist(StorageLevel.MEMORY_AND_DISK))
    lat = deliveries.withColumn("latency_us", (F.col("rx_ts") - F.col("send_ts")) / 1000.0)
    # (a distinct count in the same aggregation as percentile_approx makes Spark expand every row
    # and fall back to a sort-based plan that takes minutes on a few million rows: keep apart)
    packets = (lat.select(*KEYS, "subscriber", "packet").distinct().groupBy(*KEYS)
               .agg(F.count("*").alias("packets")))
    timing = lat.groupBy(*KEYS).agg(
        F.count("*").alias("delivered_copies"),
        ((F.max("rx_ts") - F.min("rx_ts")) / 1e9).alias("rx_span_s"),
        (F.max("rx_ts") / 1e9).alias("last_rx_s"),
        F.percentile_approx("latency_us", [0.5, 0.99, 0.999], ACCURACY).alias("lat")).join(packets, KEYS, "left")
    totals = per_sub.groupBy(*KEYS).agg(
        F.sum("delivered").alias("delivered"), F.sum("correct").alias("correct"),
        F.sum("expected").alias("expected"), F.sum("duplicates").alias("duplicates"))
    if "bpf_s" not in runs.columns:               # runs recorded before BPF run time was kept
        runs = runs.withColumn("bpf_s", F.lit(0.0))
    if "napi_s" not in runs.columns:              # runs without --split-cpus' NAPI threads
        runs = runs.withColumn("napi_s", F.lit(0.0))
    if "receivers_cpu_s" not in runs.columns:     # runs recorded before the receivers were timed
        runs = runs.withColumn("receivers_cpu_s", F.lit(None).cast("double"))
    summary = (runs.select(*KEYS, "sent_messages", "send_seconds", "started", "broker_cpu_s", "system_busy_s",
                           "softirq_s", "bpf_s", "napi_s", "receivers_cpu_s")
               .join(totals, KEYS, "left").join(timing, KEYS, "left")
               .fillna(0, ["delivered", "correct", "expected", "duplicates", "delivered_copies", "packets"])
               .withColumn("delivered_msgs_per_s",
                           F.when(F.col("rx_span_s") > 0, F.col("delivered_copies") / F.col("rx_span_s")))
               .withColumn("packets_per_s", F.when(F.col("rx_span_s") > 0, F.col("packets") / F.col("rx_span_s")))
               # what subscribers asked for, per second (topic brokers' extra copies left out)
               .withColumn("wanted_msgs_per_s", F.when(F.col("rx_span_s") > 0, F.col("correct") / F.col("rx_span_s")))
               # the feed worked through per second: sent messages whose deliveries all arrived,
               # from the phase's start to the last delivery
               .withColumn("input_msgs_per_s",
                           F.when((F.col("last_rx_s") > F.col("started")) & (F.col("expected") > 0),
                                  F.col("sent_messages") * F.col("correct") / F.col("expected")
                                  / (F.col("last_rx_s") - F.col("started"))))
               .withColumn("loss", F.when(F.col("expected") > 0, 1 - F.col("correct") / F.col("expected")))
               .withColumn("precision", F.when(F.col("delivered") > 0, F.col("correct") / F.col("delivered")))
               .withColumn("recall", F.when(F.col("expected") > 0, F.col("correct") / F.col("expected")))
               .withColumn("p50_us", F.col("lat")[0]).withColumn("p99_us", F.col("lat")[1])
               .withColumn("p999_us", F.col("lat")[2]).drop("lat")
               .withColumn("mmsgs", F.col("sent_messages") / 1e6)
               .withColumn("broker_cpu_s_per_mmsg", F.when(F.col("mmsgs") > 0, F.col("broker_cpu_s") / F.col("mmsgs")))
               .withColumn("system_cpu_s_per_mmsg", F.when(F.col("mmsgs") > 0, F.col("system_busy_s") / F.col("mmsgs")))
               # CPU per delivered copy (bench/report.py says how): the broker's processes plus the
               # machine's softirq time (where XDP and TC run; with --split-cpus the feed's receive
               # work runs in its NAPI thread instead), and the part in camus-xdp's programs
               .withColumn("cpu_ns_per_msg", F.when(F.col("delivered_copies") > 0,
                                                    (F.col("broker_cpu_s") + F.col("softirq_s") + F.col("napi_s"))
                                                    * 1e9
                                                    / F.col("delivered_copies")))
               # the lab's side, not counted above: the receivers' processes and (--split-cpus) their
               # veths' NAPI threads, per copy they took
               .withColumn("receivers_ns_per_msg", F.when(F.col("delivered_copies") > 0,
                                                          F.col("receivers_cpu_s") * 1e9 / F.col("delivered_copies")))
               .withColumn("bpf_ns_per_msg", F.when(F.col("delivered_copies") > 0,
                                                    F.col("bpf_s") * 1e9 / F.col("delivered_copies")))
               .drop("mmsgs", "started", "last_rx_s"))
    cdf = (lat.groupBy(*KEYS).agg(F.percentile_approx("latency_us", CDF_POINTS, ACCURACY).alias("q"))
           .select(*KEYS, F.posexplode("q").alias("i", "latency_us"))
           .withColumn("fraction", F.element_at(F.array(*[F.lit(p) for p in CDF_POINTS]), F.col("i") + 1))
           .drop("i"))
    out = run_dir / "results"
    result = {}
    for name, df in (("per_subscriber", per_sub), ("summary", summary), ("latency_cdf", cdf)):
        df.coalesce(1).write.mode("overwrite").parquet(str(out / name))
        result[name] = spark.read.parquet(str(out / name))          # read back: computed once
    got.unpersist()
    per_sub.unpersist()
    return result


def headline(summary_rows: list[dict], subscribers: int | None = None, maxrate: list[dict] | None = None
             ) -> dict[str, Any]:
    """Per broker: delivered msgs/s (throughput phase) and p99 latency (latency phase) at each
    number of subscriptions, for the largest number of subscribers run; ratios xdp / broker."""
    rows = [r for r in summary_rows]
    if not rows:
        return {}
    n = subscribers or max(r["subscribers"] for r in rows)
    out: dict[str, Any] = {"subscribers": n, "brokers": {}}
    for r in rows:
        if r["subscribers"] != n:
            continue
        b = out["brokers"].setdefault(r["broker"], {})
        cell = b.setdefault(str(r["subscriptions"]), {})
        if r["phase"] == "throughput":
            cell["delivered_msgs_per_s"] = r.get("wanted_msgs_per_s", r["delivered_msgs_per_s"])
            cell["all_copies_per_s"] = r["delivered_msgs_per_s"]
            cell["input_msgs_per_s"] = r.get("input_msgs_per_s")
            cell["loss"] = r["loss"]
            cell["precision"] = r["precision"]
            cell["cpu_ns_per_msg"] = r.get("cpu_ns_per_msg")
            cell["bpf_ns_per_msg"] = r.get("bpf_ns_per_msg")
        else:
            cell["p99_us"] = r["p99_us"]
            cell["p50_us"] = r["p50_us"]
            cell["latency_phase_loss"] = r["loss"]
    for m in maxrate or []:
        if m["subscribers"] == n and m["broker"] in out["brokers"]:
            out["brokers"][m["broker"]].setdefault(str(m["subscriptions"]), {})["max_lossless_msgs_per_s"] = \
                m["max_lossless_msgs_per_s"]
    xdp = out["brokers"].get("xdp", {})
    for name, cells in out["brokers"].items():
        if name == "xdp":
            continue
        for subs, cell in cells.items():
            mine, theirs = xdp.get(subs, {}).get("delivered_msgs_per_s"), cell.get("delivered_msgs_per_s")
            if mine and theirs:
                out.setdefault("ratios", {})[f"ratio_xdp_to_{name}@{subs}"] = round(mine / theirs, 2)
            mine, theirs = xdp.get(subs, {}).get("cpu_ns_per_msg"), cell.get("cpu_ns_per_msg")
            if mine and theirs:      # their CPU per message over ours: how many times cheaper
                out.setdefault("cpu_ratios", {})[f"ratio_xdp_to_{name}@{subs}"] = round(theirs / mine, 2)
            mine, theirs = xdp.get(subs, {}).get("max_lossless_msgs_per_s"), cell.get("max_lossless_msgs_per_s")
            if mine and theirs:
                out.setdefault("lossless_ratios", {})[f"ratio_xdp_to_{name}@{subs}"] = round(mine / theirs, 2)
    for name in out["brokers"]:
        if name != "xdp":
            vals = [v for k, v in out.get("ratios", {}).items() if k.startswith(f"ratio_xdp_to_{name}@")]
            if vals:
                out[f"ratio_xdp_to_{name}"] = min(vals)
            vals = [v for k, v in out.get("lossless_ratios", {}).items() if k.startswith(f"ratio_xdp_to_{name}@")]
            if vals:
                out[f"lossless_ratio_xdp_to_{name}"] = min(vals)
            vals = [v for k, v in out.get("cpu_ratios", {}).items() if k.startswith(f"ratio_xdp_to_{name}@")]
            if vals:
                out[f"cpu_ratio_xdp_to_{name}"] = min(vals)
    return out


def collect(df) -> list[dict]:
    return [r.asDict() for r in df.orderBy(*[c for c in KEYS if c in df.columns]).collect()]


def run_analysis(run_dir: Path, master: str = "local[*]", spark=None) -> dict[str, Any]:
    """Spark job + report files; returns the headline (also written to results/headline.json).
    With `spark` given, that session is used and left running."""
    from .report import write_report
    check_run_dir(run_dir)
    own = spark is None
    spark = quiet(spark_session(master)) if own else spark
    try:
        tables = analyse(spark, run_dir)
        summary = collect(tables["summary"])
        per_sub = collect(tables["per_subscriber"])
        cdf = collect(tables["latency_cdf"])
    finally:
        if own:
            spark.stop()
    maxrate = [json.loads(x) for x in (run_dir / "maxrate.jsonl").read_text().splitlines() if x.strip()] \
        if (run_dir / "maxrate.jsonl").exists() else []
    head = headline(summary, maxrate=maxrate)
    (run_dir / "results").mkdir(exist_ok=True)
    (run_dir / "results" / "headline.json").write_text(json.dumps(head, indent=1) + "\n")
    write_report(run_dir, summary, per_sub, cdf, head)
    return head
