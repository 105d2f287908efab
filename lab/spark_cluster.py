"""A standalone Spark cluster on this machine, started from the installed PySpark's own
`spark-class` (a Master and one Worker, on loopback): what the Spark cluster test runs the
benchmark analysis on, and a way to try `camus-xdp bench report RUN --master spark://...`
without a cluster. A real cluster is given by its master URL instead (docs/benchmarks.md)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 180.0       # a JVM's start on a slow, busy 2-core machine: tens of seconds


class ClusterError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(log: Path, line: str, proc: subprocess.Popen, what: str, timeout: float) -> None:
    """Until `line` is in the process's log (the event), the process ends, or `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if line in text:
            return
        if proc.poll() is not None:
            raise ClusterError(f"the Spark {what} ended (exit {proc.returncode}) before it was up:\n{text[-2000:]}")
        time.sleep(0.2)
    raise ClusterError(f"the Spark {what} was not up within {timeout:g} s:\n{log.read_text(errors='replace')[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def standalone_cluster(workdir: Path, cores: int = 1, memory: str = "1g",
                       timeout: float = START_TIMEOUT_S) -> Iterator[str]:
    """Start a Master and a Worker registered with it; yield the master URL (spark://...);
    stop both (their whole process groups) on the way out, whatever happened."""
    import pyspark
    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(workdir), "SPARK_WORKER_DIR": str(workdir / "work")}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        master_log = workdir / "master.log"
        with master_log.open("w") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(_free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(master_log, "Starting Spark master at", procs[0], "master", timeout)
        worker_log = workdir / "worker.log"
        with worker_log.open("w") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", str(cores), "--memory", memory, "--webui-port", str(_free_port()),
                 "--work-dir", str(workdir / "work")],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs[1], "worker", timeout)
        yield url
    finally:
        for p in reversed(procs):
            _stop(p)
