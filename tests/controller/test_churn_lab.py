"""Churn under traffic, end to end (root, namespace lab): `camus-xdp controller serve` pushes
rule-line deltas to `camus-xdp agent` on the broker interface while a publisher sends a
steady feed; a subscriber whose own subscription never changes receives every message sent
to it, not one lost or doubled, while other hosts subscribe and unsubscribe filters on the
same symbol (its price table rebuilt under it) and on others."""
from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from camus.bench.p4rt_bench import free_port
from camus.compiler.codec.packets import build_packet, message_from_text, packet_addresses
from camus.compiler.language.spec_parser import load_spec
from camus.controller.client import SubscriptionClient
from camus.lab.namespaces import Lab, processes
from tests.conftest import APPS

pytestmark = [pytest.mark.netns, pytest.mark.bpf]
SPEC_PATH = APPS / "itch" / "itch.p4"
TOKENS = {"tok-1": "h1", "tok-2": "h2", "tok-3": "h3"}


def _wait(url: str, ok, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got = ok()
            if got:
                return got
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}: not ready in {timeout:.0f} s")


def test_unchanged_subscription_loses_nothing_while_others_churn(tmp_path: Path) -> None:
    spec = load_spec(SPEC_PATH)
    exe = str(Path(sys.executable).parent / "camus-xdp")
    agent, api = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with Lab("camus-churn", subscribers=3, remote_endpoint=False) as lab, processes() as procs:
        ports = lab.write_ports(tmp_path / "ports.yaml")
        (tmp_path / "agent.token").write_text("agent-tok\n")
        topo = {"devices": [{"name": "broker", "kind": "xdp", "layer": "edge", "agent": f"http://{agent}"}]
                + [{"name": h, "kind": "host"} for h in ("h1", "h2", "h3")],
                "links": [{"a": "broker", "a_port": p, "b": f"h{p}", "b_port": 1} for p in (1, 2, 3)]}
        (tmp_path / "topo.yaml").write_text(yaml.safe_dump(topo))
        (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(TOKENS))
        procs.append(subprocess.Popen([exe, "agent", lab.broker, "--spec", str(SPEC_PATH), "--ports", str(ports),
                                       "--listen", agent, "--token-file", str(tmp_path / "agent.token")],
                                      stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([exe, "controller", "serve", "--topology", str(tmp_path / "topo.yaml"),
                                       "--spec", str(SPEC_PATH), "--tokens", str(tmp_path / "tokens.yaml"),
                                       "--db", str(tmp_path / "ctl.db"), "--listen", api,
                                       "--switch-dir", str(tmp_path / "sw"),
                                       "--agent-token-file", str(tmp_path / "agent.token")],
                                      stderr=subprocess.DEVNULL))
        host, port = agent.split(":")
        _wait(agent, lambda: socket.create_connection((host, int(port)), timeout=1).close() or True)
        url = f"http://{api}"
        keeper = SubscriptionClient(url, "tok-1")
        _wait(api, keeper.status)
        kept = keeper.subscribe("stock == KEEP and price > 10", ttl=600)
        keeper.wait_installed(kept["version"], timeout=120)
        churners = [SubscriptionClient(url, t) for t in ("tok-2", "tok-3")]
        warm = churners[0].subscribe("stock == WARM", ttl=600)      # the agent takes its maps over for deltas
        churners[0].wait_installed(warm["version"], timeout=120)
        # the agent holds its interface: a second agent and a CLI update are refused, naming it
        second = subprocess.run([exe, "agent", lab.broker, "--spec", str(SPEC_PATH), "--listen", f"127.0.0.1:{free_port()}",
                                 "--token-file", str(tmp_path / "agent.token")], capture_output=True, text=True,
                                timeout=300)
        assert second.returncode == 1 and "held for live changes by the host agent" in second.stderr, second.stderr
        (tmp_path / "other.txt").write_text("stock == OTHER : fwd(1)\n")
        other = subprocess.run([exe, "update", lab.broker, "--rules", str(tmp_path / "other.txt")],
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 1 and "held for live changes by the host agent" in other.stderr, other.stderr

        m = message_from_text(spec, "stock=KEEP price=500")
        frame = build_packet(spec, [m], dst_mac=lab.broker_mac(), **packet_addresses(spec, m))
        sent = 4000
        stop = threading.Event()
        changes: list[int] = []
        errors: list[BaseException] = []

        def churn(k: int) -> None:
            c, rng, held = churners[k], random.Random(k), []
            try:
                while not stop.is_set():
                    if held and rng.random() < 0.5:
                        v = c.unsubscribe(held.pop(rng.randrange(len(held))))["version"]
                    else:
                        sym = rng.choice(["KEEP", "KEEP", f"X{rng.randrange(50)}"])
                        got = c.subscribe(f"stock == {sym} and price > {rng.randint(1, 999)}", ttl=600)
                        held.append(got["id"])
                        v = got["version"]
                    c.wait_installed(v, timeout=60)
                    changes.append(v)
            except BaseException as exc:           # surfaced below
                errors.append(exc)

        cap = lab.capture(1, seconds=180)             # a bound; stopped once the feed is sent
        threads = [threading.Thread(target=churn, args=(k,)) for k in (0, 1)]
        for th in threads:
            th.start()
        time.sleep(0.3)
        lab.send([frame] * sent, gap_s=0.001)         # about 3-4 s of feed while the others churn
        cap.terminate()                               # it ends once the interface is quiet for 0.5 s
        time.sleep(0.3)
        stop.set()
        for th in threads:
            th.join()
        got = lab.collect(cap, 1)
        assert not errors, errors
        assert len(changes) >= 20, f"only {len(changes)} changes while the feed ran"
        payload = frame[14 + 20 + 8:]
        assert sum(1 for f in got if f == payload) == sent, (len(got), sent, len(changes))
        st = keeper.status()
        assert all(d["in_sync"] and not d["error"] for d in st["devices"].values()), st
