"""Nothing in clear between machines (issue 48): the subscription API, the agents' API and
P4Runtime over TLS, with mutual TLS where a credential writes tables; every refusal is a
sentence (no trust in the server, a certificate that is not the controller's, no client
certificate, plain HTTP to a TLS port); tokens rotate without a restart; every change leaves
an audit line. All over loopback with a private CA made by `make_pki`."""
from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import ssl
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from aiohttp import web

from camus.compiler.backends.p4.runtime import p4runtime_pb2_grpc
from camus.controller.agent import Agent, make_agent_app
from camus.controller.client import ConnectionFailure, ServiceError, SubscriptionClient
from camus.controller.core import Controller
from camus.controller.p4rt_client import P4RuntimeClient, P4RuntimeError
from camus.controller.p4rt_server import P4RuntimeSwitch
from camus.controller.service import make_app
from camus.controller.tls import (HandshakeFailures, TlsError, TlsFiles, client_context, grpc_server_credentials, make_pki,
                                  server_context)
from camus.controller.tokens import load_tokens
from camus.controller.topology import leaf_spine
from tests.controller.test_service import SPEC, TOKENS, Recorder
from tests.conftest import APPS


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, TlsFiles]:
    return make_pki(tmp_path_factory.mktemp("pki"), {p: ["localhost", "127.0.0.1"] for p in
                                                     ("controller", "h1", "h2", "sw1")})


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An aiohttp app served on loopback from a thread of its own (TLS when given a context)."""

    def __init__(self, app: web.Application, ssl_context: ssl.SSLContext | None) -> None:
        self.port = _port()
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port,
                                                     ssl_context=ssl_context).start())
            started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def test_files_are_checked_with_sentences(pki, tmp_path: Path) -> None:
    with pytest.raises(TlsError, match="no such file"):
        TlsFiles(str(tmp_path / "none.crt"), pki["h1"].key)
    with pytest.raises(TlsError, match="both a certificate and its key"):
        TlsFiles(pki["h1"].cert, None)
    with pytest.raises(TlsError, match="is not the private key of"):
        server_context(TlsFiles(pki["h1"].cert, pki["h2"].key))
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    with pytest.raises(TlsError, match="not a PEM certificate"):
        client_context(TlsFiles(ca=str(tmp_path / "junk.crt")))
    with pytest.raises(TlsError, match="needs the CA"):
        server_context(TlsFiles(pki["h1"].cert, pki["h1"].key), require_client=True)
    assert oct(Path(pki["h1"].key).stat().st_mode & 0o777) == "0o600"          # keys readable by the owner alone


def _controller() -> Controller:
    t = leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
    return Controller(t, SPEC, "mr", targets={d: Recorder() for d in t.devices})


def test_the_api_over_tls_and_what_it_refuses(pki) -> None:
    served = Served(make_app(_controller(), TOKENS), server_context(pki["controller"]))
    try:
        url = f"https://localhost:{served.port}"
        c = SubscriptionClient(url, "tok-a", tls=TlsFiles(ca=pki["controller"].ca))
        sub = c.subscribe("stock == GOOGL and price > 50")
        assert [s["id"] for s in c.subscriptions()] == [sub["id"]]
        with pytest.raises(ConnectionFailure, match="certificate is not trusted.*--ca"):
            SubscriptionClient(url, "tok-a").subscriptions()          # the system's CAs do not know ours
        with pytest.raises(ConnectionFailure, match="use https://"):
            SubscriptionClient(f"http://localhost:{served.port}", "tok-a").subscriptions()
        with pytest.raises(ServiceError, match="401"):
            SubscriptionClient(url, "nope", tls=TlsFiles(ca=pki["controller"].ca)).subscriptions()
    finally:
        served.close()


def test_api_clients_must_show_a_certificate_when_asked(pki, caplog) -> None:
    served = Served(make_app(_controller(), TOKENS), server_context(pki["controller"], require_client=True))
    try:
        url = f"https://localhost:{served.port}"
        failed = HandshakeFailures.count
        with caplog.at_level(logging.WARNING, logger="camus.tls"):
            with pytest.raises((ConnectionFailure, OSError)):
                SubscriptionClient(url, "tok-a", tls=TlsFiles(ca=pki["controller"].ca)).subscriptions()
            end = time.monotonic() + 30                  # the server's side of the handshake ends after the client's
            while HandshakeFailures.count == failed and time.monotonic() < end:
                time.sleep(0.01)
        # logged (asyncio says nothing of it outside debug mode), with the client and the reason
        assert HandshakeFailures.count > failed
        assert any("TLS handshake with 127.0.0.1 failed: this server refused the client" in r.getMessage()
                   and "CERTIFICATE" in r.getMessage() for r in caplog.records), caplog.text
        ok = SubscriptionClient(url, "tok-a", tls=pki["h1"])                  # a certificate the CA signed
        assert ok.subscriptions() == []
    finally:
        served.close()


def _get_status(port: int, files: TlsFiles, token: str = "agent-secret") -> int:
    conn = http.client.HTTPSConnection("localhost", port, context=client_context(files), timeout=10)
    try:
        conn.request("GET", "/v1/status", headers={"Authorization": f"Bearer {token}"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_an_agent_takes_tables_only_from_the_controllers_certificate(pki, tmp_path: Path) -> None:
    agent = Agent("cx-none0", str(APPS / "itch" / "itch.p4"), "agent-secret", workdir=tmp_path)
    served = Served(make_agent_app(agent, frozenset({"controller"})), server_context(pki["h1"], require_client=True))
    try:
        assert _get_status(served.port, pki["controller"]) == 200
        assert _get_status(served.port, pki["h2"]) == 403                    # same CA, another party: refused
        assert _get_status(served.port, pki["controller"], token="replayed-or-wrong") == 401
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _get_status(served.port, TlsFiles(ca=pki["controller"].ca))       # no client certificate at all
        from camus.controller.targets import AgentTarget, PushError
        held = AgentTarget(f"https://localhost:{served.port}", "agent-secret", tls=pki["controller"]).current("h1")
        assert held is not None and held.rules == 0
        with pytest.raises(PushError, match="must be https://"):
            AgentTarget(f"http://localhost:{served.port}", "agent-secret", tls=pki["controller"])
    finally:
        served.close()


class _Switch:
    def __init__(self, creds) -> None:
        self.port = _port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(
            P4RuntimeSwitch(1, SPEC, (APPS / "itch" / "itch.p4").read_text()), self.server)
        assert self.server.add_secure_port(f"127.0.0.1:{self.port}", creds)
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


def test_p4runtime_over_mutual_tls(pki) -> None:
    sw = _Switch(grpc_server_credentials(pki["sw1"], require_client=True))
    try:
        client = P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, 3, timeout=10.0, tls=pki["controller"], tls_name="sw1")
        assert client.primary
        client.close()
        with pytest.raises(P4RuntimeError, match="TLS"):        # no client certificate: not served
            P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, 4, timeout=3.0, tls=TlsFiles(ca=pki["controller"].ca),
                            tls_name="sw1")
        with pytest.raises(P4RuntimeError, match="does not answer P4Runtime in clear: it wants TLS"):
            P4RuntimeClient(f"127.0.0.1:{sw.port}", 1, 5, timeout=3.0)       # in clear to a TLS port
        with pytest.raises(P4RuntimeError, match="no P4Runtime server at"):   # nothing there at all
            P4RuntimeClient(f"127.0.0.1:{_port()}", 1, 6, timeout=1.0)
    finally:
        sw.stop()


def test_tokens_rotate_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("tok-old: h1\n")
    book = load_tokens(path)
    assert book.host("tok-old") == "h1" and book.refresh() == ""
    time.sleep(0.01)
    path.write_text("tok-new: h1\ntok-b: h2\n")
    assert "re-read: 2 tokens" in book.refresh()
    assert book.host("tok-old") is None and book.host("tok-new") == "h1"
    path.write_text("tok-x: [unclosed\n")                        # half written: the tokens in force stay
    assert "not taken" in book.refresh() and book.host("tok-new") == "h1"


def test_every_change_leaves_an_audit_line(caplog) -> None:
    served = Served(make_app(_controller(), TOKENS), None)
    try:
        with caplog.at_level(logging.INFO, logger="camus.audit"):
            c = SubscriptionClient(f"http://127.0.0.1:{served.port}", "tok-a")
            sub = c.subscribe("stock == GOOGL", ttl=9)
            c.refresh(sub["id"], ttl=20)
            c.refresh(sub["id"])                                   # a keep-alive alone: no line
            c.unsubscribe(sub["id"])
    finally:
        served.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "camus.audit"]
    fp = lines[0].split("token=")[1].split()[0]
    assert len(fp) == 8 and "tok-a" not in " ".join(lines)                          # the token never written
    assert lines[0].startswith(f"subscribe {lines[0].split()[1]} host=h0_0 token={fp} peer=")
    assert lines[0].endswith("filter='stock == GOOGL'")
    assert lines[1].startswith("ttl=20 ") and lines[2].startswith("unsubscribe ")



def test_verify_reads_a_switch_over_mutual_tls(pki, tmp_path: Path) -> None:
    """`verify --switch` with the controller's credentials reads the switch (an empty one: the
    rules then differ, exit 1); without them it cannot read it and says so (exit 2)."""
    from click.testing import CliRunner

    from camus.cli import main
    sw = _Switch(grpc_server_credentials(pki["sw1"], require_client=True))
    try:
        rules = tmp_path / "r.txt"
        rules.write_text("stock == GOOGL : fwd(1)\n")
        base = ["verify", str(APPS / "itch" / "itch.p4"), str(rules), "--target", "p4", "--switch",
                f"127.0.0.1:{sw.port}", "--json"]
        c = pki["controller"]
        got = CliRunner().invoke(main, base + ["--tls-ca", c.ca, "--tls-cert", c.cert, "--tls-key", c.key,
                                               "--tls-name", "sw1"])
        assert got.exit_code == 1 and '"differs"' in got.output, got.output
        got = CliRunner().invoke(main, base)
        assert got.exit_code == 2 and "cannot read the switch" in got.output, got.output
    finally:
        sw.stop()


def test_a_push_to_a_tls_switch_reached_in_clear_shows_in_the_status(pki) -> None:
    """A switch that wants TLS, reached in clear: the push fails, and /v1/status says why and how
    many times it was tried (it used to show error '' and attempts 0)."""
    from camus.controller.core import Controller
    from camus.controller.targets import P4RuntimeTarget
    from camus.controller.topology import Topology
    sw = _Switch(grpc_server_credentials(pki["sw1"], require_client=True))
    target = P4RuntimeTarget(f"127.0.0.1:{sw.port}", 1, election_id=7, timeout=3.0)
    try:
        topo = Topology("one-switch")
        topo.add_device("sw", "p4", "edge", p4runtime=f"127.0.0.1:{sw.port}", device_id="1")
        topo.add_device("h1", "host")
        topo.add_link("sw", "h1", 1, 1)
        ctl = Controller(topo, SPEC, "mr", targets={"sw": target})
        ctl.add("h1", "stock == GOOGL", 30)
        assert ctl.push_pending() == {"sw": False}
        st = ctl.status()["devices"]["sw"]
        assert st["attempts"] == 1 and not st["in_sync"], st
        assert "wants TLS" in st["error"] and f"127.0.0.1:{sw.port}" in st["error"], st
    finally:
        if target.client is not None:
            target.client.close()
        sw.stop()
