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
