"""Wildcard semantics against mosquitto: the same subscriptions and publications through
mosquitto and through the edge broker (local delivery, which matches with the same
`topics.matches` the XDP tables are compiled from) give every subscriber the same messages,
and both agree with the matcher."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from camus.compiler.language.topics import matches
from tests.edge.edge_server import free_port, running, topics_broker
from tests.edge.mqtt_corpus import corpus, run_corpus, run_retained


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not shutil.which(exe):
        pytest.skip("mosquitto is not installed (scripts/setup.sh installs it)")
    port = free_port()
    conf = tmp_path_factory.mktemp("mosq") / "m.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60                  # until mosquitto listens (generously bounded)
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert time.monotonic() < deadline and proc.poll() is None, "mosquitto did not start"
        time.sleep(0.05)
    yield port
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def edge():
    with running(topics_broker()) as port:
        yield port


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_edge_broker_delivers_what_mosquitto_delivers(mosquitto, edge, seed) -> None:
    subs, pubs = corpus(seed)
    want = [{(t, f"{k}".encode()) for k, t in enumerate(pubs) if any(matches("mqtt", f, t) for f in fs)}
            for fs in subs]
    theirs = run_corpus("127.0.0.1", mosquitto, subs, pubs)
    ours = run_corpus("127.0.0.1", edge, subs, pubs)
    assert theirs == want, "mosquitto and the matcher disagree"
    assert ours == want
    assert sum(map(len, want)) > 20          # the corpus is not trivial


@pytest.mark.parametrize("seed", [4, 5])
def test_retained_messages_as_mosquitto_keeps_them(mosquitto, edge, seed) -> None:
    """Retained publications (some empty: they clear the topic), then new subscriptions: each
    gets the last retained message of every matching topic, flagged retained, as from mosquitto."""
    subs, pubs = corpus(seed, publications=40)
    pubs = [t for t in pubs if not t.startswith("$")]      # mosquitto keeps clients out of $SYS
    last: dict[str, bytes] = {}
    for k, t in enumerate(pubs):
        last[t] = b"" if k % 4 == 3 else f"r{k}".encode()
    want = [{(t, p, True) for t, p in last.items() if p and any(matches("mqtt", f, t) for f in fs)} for fs in subs]
    theirs = [{m for m in got if not m[0].startswith("$SYS/broker/")}       # mosquitto's own status
              for got in run_retained("127.0.0.1", mosquitto, subs, pubs)]
    ours = run_retained("127.0.0.1", edge, subs, pubs)
    assert theirs == want, "mosquitto and the matcher disagree"
    assert ours == want
    assert sum(map(len, want)) > 5           # the corpus is not trivial
