"""Shared test configuration: golden-file updates, Hypothesis profiles, root/kernel skips."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "apps"

settings.register_profile("default", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true",
                     help="rewrite golden files from the current output instead of comparing")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    is_root = os.geteuid() == 0
    for item in items:
        if ("bpf" in item.keywords or "netns" in item.keywords) and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (BPF / network namespaces)"))


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every test that needs it (UI off, quiet)."""
    pytest.importorskip("pyspark")
    from camus.bench.analysis import quiet, spark_session
    session = quiet(spark_session("local[2]", "camus-tests"))
    yield session
    session.stop()


@contextmanager
def veth_pair(a: str, b: str) -> Iterator[None]:
    """A veth pair a <-> b, both up, in this namespace; removed afterwards (and first, if an
    earlier run left it)."""
    subprocess.run(["ip", "link", "del", a], capture_output=True)
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for x in (a, b):
            subprocess.run(["ip", "link", "set", x, "up"], check=True)
        yield
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
