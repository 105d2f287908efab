"""--split-cpus (bench/cpus.py) on a real veth: its NAPI becomes a kernel thread pinned to the
broker's CPU and goes back afterwards; a subscriber's veth receives in a thread of its own on the
other CPU; a process tree is pinned thread by thread; CPU time is counted per task."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from camus.bench import cpus
from camus.lab.namespaces import pass_through
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


def test_a_subscribers_receive_work_runs_in_its_own_thread_off_the_broker_cpu() -> None:
    if cpus.usable():
        pytest.skip(cpus.usable())
    ns, outer, inner = "cxcpu-sub", "cxcpu2", "cxcpu3"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        with veth_pair(outer, inner):
            in_ns = ["ip", "netns", "exec", ns]
            subprocess.run(["ip", "link", "set", inner, "netns", ns], check=True)
            subprocess.run([*in_ns, "ip", "addr", "add", "10.198.0.2/24", "dev", inner], check=True)
            subprocess.run([*in_ns, "ip", "link", "set", inner, "up"], check=True)
            subprocess.run([*in_ns, "ethtool", "-K", inner, "gro", "on"], check=True)   # as the lab does
            subprocess.run(["ip", "addr", "add", "10.198.0.1/24", "dev", outer], check=True)
            threads = cpus.split_receivers([(ns, inner)], [outer])
            assert threads and all(os.sched_getaffinity(t) == {cpus.SENDER_CPU} for t in threads)
            tso = subprocess.run(["ethtool", "-k", outer], capture_output=True, text=True, check=True).stdout
            assert "tcp-segmentation-offload: off" in tso
            before = cpus.thread_seconds(threads)
            import socket
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(20000):                 # into the namespace: received by its thread
                    s.sendto(b"x" * 64, ("10.198.0.2", 9))
            time.sleep(0.2)
            assert cpus.thread_seconds(threads) > before
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _parent_of(stat: Path) -> str:
    """The parent pid in a /proc/PID/stat file ("" if the process went away meanwhile)."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return ""


def test_a_process_tree_is_pinned_thread_by_thread() -> None:
    if cpus.usable():
        pytest.skip(cpus.usable())
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    outer = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{code}'; true"])   # as `ip netns exec` wraps
    child = None
    try:
        deadline = time.monotonic() + 60
        while True:                                # until the child and its second thread exist
            child = next((int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                          if _parent_of(p) == str(outer.pid)), None)
            if child is not None and len(list(Path(f"/proc/{child}/task").iterdir())) >= 2:
                break
            assert time.monotonic() < deadline, "the child process never started its thread"
            time.sleep(0.05)
        cpus.pin(outer.pid, cpus.BROKER_CPU)
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
    assert cpus.process_seconds(os.getpid()) >= cpus.thread_seconds([os.getpid()])
    assert cpus.process_seconds(1 << 30) == 0.0
    assert cpus.softirq_seconds() >= cpus.softirq_seconds(cpus.BROKER_CPU) >= 0.0


def test_ksoftirqd_is_the_cpus_own_softirq_thread() -> None:
    for cpu in sorted(os.sched_getaffinity(0)):
        tids = cpus.ksoftirqd(cpu)
        assert len(tids) == 1
        assert Path(f"/proc/{tids[0]}/comm").read_text().strip() == f"ksoftirqd/{cpu}"
        assert os.sched_getaffinity(tids[0]) == {cpu}          # a per-CPU kernel thread
    assert cpus.ksoftirqd(10_000) == []
