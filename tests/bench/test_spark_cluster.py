"""The benchmark analysis on a real Spark cluster: a standalone Master and Worker started from
the installed PySpark (lab/spark_cluster.py), `camus-xdp bench report RUN --master spark://...`
run on a run directory, and the same figures as the local run."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from camus.bench.analysis import run_analysis
from camus.lab.spark_cluster import standalone_cluster
from tests.bench.test_analysis import run_dir  # noqa: F401  (the fixture: a run with known answers)

pytestmark = pytest.mark.spark


def _rows(spark, run: Path) -> list[dict]:
    return sorted((r.asDict() for r in spark.read.parquet(str(run / "results" / "summary")).collect()),
                  key=lambda r: (r["broker"], r["phase"]))


def test_the_report_on_a_standalone_cluster_equals_the_local_one(spark, run_dir, tmp_path) -> None:  # noqa: F811
    local, remote = tmp_path / "local", tmp_path / "remote"
    for d in (local, remote):
        shutil.copytree(run_dir, d, ignore=shutil.ignore_patterns("results"))
    run_analysis(local, spark=spark)
    with standalone_cluster(tmp_path / "cluster", cores=1, memory="2g") as url:
        done = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "bench", "report",
                               str(remote), "--master", url], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        # the job ran on the cluster's executor, not in the driver: the worker started one for it
        assert list((tmp_path / "cluster" / "work").glob("app-*")), "no application ran on the worker"
    want = json.loads((local / "results" / "headline.json").read_text())
    got = json.loads((remote / "results" / "headline.json").read_text())
    assert got == want
    assert _rows(spark, remote) == _rows(spark, local)
    assert (remote / "results" / "report.md").read_text() == (local / "results" / "report.md").read_text()
