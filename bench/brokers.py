"""The brokers under test, each started on the lab's broker host (this namespace) and stopped at
the end, all doing the same job: deliver to each subscriber what it subscribed to.

  xdp        camus-xdp attached to the broker interface (XDP classify + TC replicate/rewrite)
  py         the same compiled tables in a Python userspace broker (bench/py_broker.py)
  c          the same compiled tables in C with recvmmsg/sendmmsg (bench/c/broker.c)
  mosquitto  MQTT, topics itch/<stock>          (Debian's mosquitto)
  nats       NATS, subjects itch.<stock>        (Debian's nats-server)
  redis      redis pub/sub, channels itch/<stock> (Debian's redis-server)

A broker is a context manager; `cpu_seconds()` reads the CPU time its processes used.
"""
from __future__ import annotations

import os
import signal
from abc import ABC, abstractmethod
import subprocess
import sys
import time
from pathlib import Path

from .cbuild import binary
from camus.lab.namespaces import FEED_PORT, Lab

BROKERS = ("xdp", "py", "c", "mosquitto", "nats", "redis")
TOPIC_BROKERS = {"mosquitto": ("mqtt", 18830), "nats": ("nats", 42220), "redis": ("redis", 63790)}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def system_cpu_seconds() -> tuple[float, float]:
    """(busy seconds, softirq seconds) of the whole machine so far, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    return (sum(f[:8]) - idle) / CLK_TCK, f[6] / CLK_TCK


class Broker(ABC):
    name = ""
    udp = True                    # the feed arrives as MoldUDP64 frames (else: a topic protocol)

    def __init__(self, lab: Lab, workdir: Path) -> None:
        self.lab, self.workdir = lab, workdir
        self.procs: list[subprocess.Popen] = []
        self._cpu_before = 0.0

    @abstractmethod
    def start(self, compiled, spec_path: Path, rules_path: Path, flat_path: Path) -> None:
        """Bring the broker up on the lab's broker host, serving these subscriptions."""

    def stop(self) -> str:
        out = []
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                o, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                o, _ = p.communicate()
            out.append((o or "").strip())
        self.procs = []
        return " ".join(x for x in out if x)

    def cpu_seconds(self) -> float:
        """CPU time the broker's processes used (the XDP broker works in softirq: see runner)."""
        from .cpus import process_seconds
        return sum(process_seconds(p.pid) for p in self.procs)

    def _spawn(self, cmd: list[str], ready: str | None = "ready") -> subprocess.Popen:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        if ready is not None:
            line = p.stdout.readline().strip()                        # type: ignore[union-attr]
            if line != ready:
                self.stop()
                raise RuntimeError(f"{self.name}: {' '.join(cmd[:2])} did not start: {line}")
        return p

    def ports_file(self) -> Path:
        path = self.workdir / "ports.txt"
        path.write_text("".join(f"{p} {self.lab.sub_ip(p)} {FEED_PORT}\n" for p in self.lab.ports))
        return path


class XdpBroker(Broker):
    name = "xdp"
    fanout = "auto"                  # how copies are made (attach --fanout)

    def start(self, compiled, spec_path: Path, rules_path: Path, flat_path: Path) -> None:
        from camus.dataplane import runtime
        # each copy is rewritten to its subscriber's own MAC, IP and port (remote endpoints)
        ports = self.lab.write_endpoint_ports(self.workdir / "ports.yaml")
        runtime.attach(self.lab.broker, compiled, str(spec_path), str(rules_path), mode="native",
                       ports_path=str(ports), fanout_mode=self.fanout)

    def stop(self) -> str:
        from camus.dataplane import runtime
        runtime.detach(self.lab.broker)
        return ""


class PyBroker(Broker):
    name = "py"

    def start(self, compiled, spec_path: Path, rules_path: Path, flat_path: Path) -> None:
        self._spawn([sys.executable, "-m", "camus.bench.py_broker", str(flat_path), f"{self.lab.net}.0.2",
                     str(FEED_PORT), str(self.ports_file())])


class CBroker(Broker):
    name = "c"

    def start(self, compiled, spec_path: Path, rules_path: Path, flat_path: Path) -> None:
        self._spawn([str(binary("broker")), str(flat_path), f"{self.lab.net}.0.2", str(FEED_PORT),
                     str(self.ports_file())])


class TopicBroker(Broker):
    udp = False

    @property
    def proto(self) -> str:
        return TOPIC_BROKERS[self.name][0]

    @property
    def port(self) -> int:
        return TOPIC_BROKERS[self.name][1]

    def start(self, compiled, spec_path: Path, rules_path: Path, flat_path: Path) -> None:
        host = f"{self.lab.net}.0.2"
        if self.name == "mosquitto":
            conf = self.workdir / "mosquitto.conf"
            conf.write_text(f"listener {self.port} {host}\nallow_anonymous true\npersistence false\n"
                            "max_queued_messages 0\nmax_queued_bytes 0\nlog_dest none\n")
            cmd = ["mosquitto", "-c", str(conf)]
        elif self.name == "nats":
            cmd = ["nats-server", "-a", host, "-p", str(self.port)]
        else:
            cmd = ["redis-server", "--bind", host, "--port", str(self.port), "--save", "", "--appendonly", "no",
                   "--protected-mode", "no", "--client-output-buffer-limit", "pubsub 256mb 128mb 60"]
        self._spawn(cmd, ready=None)
        import socket
        deadline = time.monotonic() + 10
        while True:                                     # ready when it accepts connections
            try:
                socket.create_connection((host, self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    out = self.stop()
                    raise RuntimeError(f"{self.name} did not start: {out[-300:]}")
                time.sleep(0.05)


def make_broker(name: str, lab: Lab, workdir: Path, fanout: str = "auto") -> Broker:
    cls = {"xdp": XdpBroker, "py": PyBroker, "c": CBroker}.get(name, TopicBroker)
    b = cls(lab, workdir)
    b.name = name
    if isinstance(b, XdpBroker):
        b.fanout = fanout
    return b


def available(name: str) -> str | None:
    """Why a broker cannot run here (None: it can)."""
    import shutil
    exe = {"mosquitto": "mosquitto", "nats": "nats-server", "redis": "redis-server"}.get(name)
    if exe and shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
        return f"{exe} is not installed (apt-get install {exe.replace('-server', '-server')})"
    return None
