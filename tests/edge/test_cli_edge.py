"""`camus-xdp edge` refuses what cannot work before it listens: a spec without a topic field,
an interface camus-xdp is not attached to, --iface without --port."""
from __future__ import annotations

from click.testing import CliRunner

from camus.cli import main
from tests.conftest import APPS


def test_edge_refuses_bad_setups_at_start() -> None:
    r = CliRunner()
    out = r.invoke(main, ["edge", "--spec", str(APPS / "itch" / "itch.p4")])
    assert out.exit_code == 1 and "no topic field" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--iface", "nosuch0", "--port", "1"])
    assert out.exit_code == 1 and "not attached to nosuch0" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--iface", "nosuch0"])
    assert out.exit_code == 2 and "--iface and --port go together" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--feed", "10.0.0.1"])
    assert out.exit_code == 2 and "expected HOST:PORT" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--listen", "ws://127.0.0.1:9001"])
    assert out.exit_code == 2 and "at least one MQTT listener over TCP" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--listen", "wss://127.0.0.1:9001"])
    assert out.exit_code == 2 and "needs --tls-cert" in out.output
    out = r.invoke(main, ["edge", "--spec", str(APPS / "topics" / "topics.p4"), "--listen", "http://127.0.0.1:80"])
    assert out.exit_code == 2 and "ws:// or wss://" in out.output


def test_edge_refuses_auth_and_tls_files_it_cannot_use(tmp_path) -> None:
    r = CliRunner()
    spec = str(APPS / "topics" / "topics.p4")
    pw = tmp_path / "passwd"
    pw.write_text("# users\nalice:s3cret\n")
    out = r.invoke(main, ["edge", "--spec", spec, "--password-file", str(pw)])
    assert out.exit_code == 1 and f"{pw}:2: expected user:$7$" in out.output
    acl = tmp_path / "acl"
    acl.write_text("user alice\ngrant alice everything\n")
    out = r.invoke(main, ["edge", "--spec", spec, "--acl-file", str(acl)])
    assert out.exit_code == 1 and f"{acl}:2: expected 'user NAME'" in out.output
    out = r.invoke(main, ["edge", "--spec", spec, "--tls-cert", str(pw)])
    assert out.exit_code == 1 and "give both a certificate and its key" in out.output


def test_edge_cli_logs_refusals_and_sums_them_up_at_exit(tmp_path) -> None:
    """The command as a user runs it: a client with a wrong password is refused with a log
    line, and the exit summary counts it."""
    import shutil
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    from camus.edge.auth import hash_password
    from tests.edge.edge_server import free_port
    if shutil.which("mosquitto_pub") is None:
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs them)")
    pw = tmp_path / "passwd"
    pw.write_text(f"alice:{hash_password('s3cret')}\n")
    port = free_port()
    edge = subprocess.Popen([str(Path(sys.executable).parent / "camus-xdp"), "edge", "--spec",
                             str(APPS / "topics" / "topics.p4"), "--listen", f"127.0.0.1:{port}",
                             "--password-file", str(pw), "--log-level", "info"], stderr=subprocess.PIPE, text=True)
    try:
        assert "edge broker: MQTT on" in (edge.stderr.readline() if edge.stderr else "")
        bad = subprocess.run(["mosquitto_pub", "-p", str(port), "-u", "alice", "-P", "nope", "-t", "a", "-m", "x"],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0
        good = subprocess.run(["mosquitto_pub", "-p", str(port), "-u", "alice", "-P", "s3cret", "-t", "a", "-m", "x"],
                              capture_output=True, text=True, timeout=60)
        assert good.returncode == 0, good.stderr
    finally:
        edge.send_signal(signal.SIGINT)
        _, err = edge.communicate(timeout=60)
    assert "refused: wrong user name or password (user 'alice')" in err
    assert "refused clients 1" in err and edge.returncode == 0


def test_edge_reloads_users_on_sighup_and_serves_several_listeners(tmp_path) -> None:
    """Two listeners (IPv4 and IPv6 loopback) serve one broker; SIGHUP reloads the password file
    as mosquitto does: a user added connects, a user removed is refused at its next CONNECT, and a
    client connected before the reload stays and keeps receiving."""
    import queue
    import shutil
    import signal
    import subprocess
    import sys
    import threading
    from pathlib import Path

    import pytest

    from camus.edge.auth import hash_password
    from tests.edge.edge_server import free_port
    if shutil.which("mosquitto_pub") is None:
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs them)")
    pw = tmp_path / "passwd"
    pw.write_text(f"alice:{hash_password('s3cret')}\n")
    p4, p6, pws = free_port(), free_port(), free_port()
    edge = subprocess.Popen([str(Path(sys.executable).parent / "camus-xdp"), "edge", "--spec",
                             str(APPS / "topics" / "topics.p4"), "--listen", f"127.0.0.1:{p4}", "--listen",
                             f"[::1]:{p6}", "--listen", f"ws://127.0.0.1:{pws}", "--password-file", str(pw),
                             "--log-level", "info"],
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in edge.stderr], daemon=True).start()   # type: ignore[union-attr]

    def wait_line(text: str) -> str:
        while True:
            line = lines.get(timeout=60)            # each event is logged: no fixed sleeps
            if text in line:
                return line

    def pub(host: str, port: int, user: str, password: str, msg: str) -> int:
        return subprocess.run(["mosquitto_pub", "-h", host, "-p", str(port), "-u", user, "-P", password, "-t",
                               "news/a", "-m", msg, "-q", "1"], capture_output=True, text=True, timeout=60).returncode
    sub = None
    try:
        started = wait_line("edge broker: MQTT on")
        assert f"mqtt://127.0.0.1:{p4}" in started and f"mqtt://[::1]:{p6}" in started
        assert f"ws://127.0.0.1:{pws}/mqtt" in started
        sub = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(p4), "-u", "alice", "-P", "s3cret",
                                "-t", "news/#", "-q", "1", "-C", "2", "-i", "keeps"], stdout=subprocess.PIPE, text=True)
        wait_line("keeps")                            # its session is open (logged at info)
        assert pub("::1", p6, "alice", "s3cret", "one") == 0           # the other listener, the same broker
        assert pub("::1", p6, "bob", "b0b", "x") != 0                  # no such user yet
        pw.write_text(f"bob:{hash_password('b0b')}\n")                  # alice removed, bob added
        edge.send_signal(signal.SIGHUP)
        wait_line("SIGHUP: reloaded passwords")
        assert pub("::1", p6, "bob", "b0b", "two") == 0
        assert pub("127.0.0.1", p4, "alice", "s3cret", "x") != 0       # refused at her next CONNECT
        out, _ = sub.communicate(timeout=60)                           # connected before: still served
        assert out.split() == ["one", "two"]
        assert edge.poll() is None                                     # SIGHUP did not stop it
    finally:
        if sub is not None and sub.poll() is None:
            sub.kill()
        edge.send_signal(signal.SIGINT)
        edge.wait(timeout=60)
    assert edge.returncode == 0
