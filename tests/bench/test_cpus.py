"""--split-cpus (bench/cpus.py) on a real veth: its NAPI becomes a kernel thread pinned to the
broker's CPU and goes back afterwards; a process tree is pinned thread by thread."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from camus.bench import cpus
from camus.dataplane.lab import pass_through
from tests.conftest import veth_pair

pytestmark = pytest.mark.bpf
A, B = "cxcpu0", "cxcpu1"


@pytest.fixture
def veth():
    if cpus.usable():
        pytest.skip(cpus.usable())
    with veth_pair(A, B):
        yield


def test_the_feed_interface_polls_in_a_thread_on_the_broker_cpu(veth) -> None:
    relay = pass_through(A)                       # a veth end polls with NAPI once it has XDP
    try:
        threads = cpus.split(A)
        assert threads and all(os.sched_getaffinity(t) == {cpus.BROKER_CPU} for t in threads)
        assert Path(f"/sys/class/net/{A}/threaded").read_text().strip() == "1"
        cpus.unsplit(A)
        assert Path(f"/sys/class/net/{A}/threaded").read_text().strip() == "0"
    finally:
        relay.remove_xdp(A.encode(), 0)


def test_a_process_tree_is_pinned_thread_by_thread() -> None:
    if cpus.usable():
        pytest.skip(cpus.usable())
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    outer = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{code}'; true"])   # as `ip netns exec` wraps
    child = None
    try:
        time.sleep(0.5)                            # the child and its second thread exist
        cpus.pin(outer.pid, cpus.BROKER_CPU)
        child = next(int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                     if p.read_text().rsplit(")", 1)[1].split()[1] == str(outer.pid))
        tasks = [int(t.name) for t in Path(f"/proc/{child}/task").iterdir()]
        assert len(tasks) >= 2 and all(os.sched_getaffinity(t) == {cpus.BROKER_CPU} for t in tasks)
        assert os.sched_getaffinity(outer.pid) == {cpus.BROKER_CPU}
    finally:
        if child is not None:
            os.kill(child, 9)
        outer.kill()
        outer.wait()


def test_thread_seconds_count_what_a_thread_ran() -> None:
    before = cpus.thread_seconds([os.getpid()])
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cpus.thread_seconds([os.getpid()]) - before >= 0.2
    assert cpus.thread_seconds([1 << 30]) == 0.0               # gone: nothing counted, no error
