"""`camus-xdp edge --config mosquitto.conf`: the options the two brokers share, read in
mosquitto's format; a line the edge cannot take is refused with its position; the command line
wins over the file."""
from __future__ import annotations

from pathlib import Path

import click
import pytest

from camus.cli_edge import edge
from camus.edge.mosquitto_conf import ConfError, read_conf
from tests.conftest import APPS

SPEC = str(APPS / "topics" / "topics.p4")


def _conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mosquitto.conf"
    path.write_text(text)
    return str(path)


def test_a_mosquitto_conf_becomes_the_edges_options(tmp_path: Path) -> None:
    conf = _conf(tmp_path, """# a mosquitto 2.0 file
per_listener_settings false
log_dest stdout
listener 1883 127.0.0.1
listener 8883
certfile /etc/mosquitto/certs/edge.crt
keyfile /etc/mosquitto/certs/edge.key
cafile /etc/mosquitto/ca.crt
require_certificate true
listener 1884 ::1
listener 9001
protocol websockets
password_file /etc/mosquitto/passwd   # users
acl_file /etc/mosquitto/acl
allow_anonymous false
max_packet_size 4096
max_inflight_messages 10
max_queued_messages 500
queue_qos0_messages true
sys_interval 5
""")
    assert read_conf(conf) == {
        "listens": ("mqtt://127.0.0.1:1883", "mqtts://0.0.0.0:8883", "mqtt://[::1]:1884", "ws://0.0.0.0:9001"),
        "tls_cert": "/etc/mosquitto/certs/edge.crt", "tls_key": "/etc/mosquitto/certs/edge.key",
        "tls_ca": "/etc/mosquitto/ca.crt", "password_file": "/etc/mosquitto/passwd",
        "acl_file": "/etc/mosquitto/acl", "allow_anonymous": False, "max_packet": 4096, "max_inflight": 10,
        "max_queued": 500, "queue_qos0": True, "sys_interval": 5.0}


@pytest.mark.parametrize("text, said", [
    ("listener 1883\nconnection bridge1\n", ":2: connection bridge1: `connection` is not an option"),
    ("certfile a.crt\nlistener 8883\n", ":1: certfile a.crt: certfile belongs to a listener"),
    ("listener 1\ncertfile a.crt\nkeyfile a.key\nlistener 2\ncertfile b.crt\n", ":5: certfile b.crt: the edge serves one"),
    ("listener 70000\n", ":1: listener 70000: a port from 1 to 65535"),
    ("max_packet_size big\n", ":1: max_packet_size big: invalid literal"),
    ("allow_anonymous yes\n", ":1: allow_anonymous yes: true or false"),
    ("listener 8883\ncertfile a.crt\nkeyfile a.key\ncafile ca.crt\n", "exactly when it has their CA"),
    ("listener 8883\ncertfile a.crt\n", "needs both certfile and keyfile"),
])
def test_a_line_the_edge_cannot_take_is_refused_with_its_position(tmp_path: Path, text: str, said: str) -> None:
    conf = _conf(tmp_path, text)
    with pytest.raises(ConfError) as err:
        read_conf(conf)
    assert said in str(err.value) and str(err.value).startswith(conf)


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("")
    conf = _conf(tmp_path, f"listener 1999 127.0.0.1\npassword_file {passwd}\nmax_packet_size 4096\n")
    ctx = edge.make_context("edge", ["--config", conf, "--spec", SPEC, "--max-packet", "9999"])
    assert ctx.params["max_packet"] == 9999 and ctx.params["password_file"] == str(passwd)
    assert ctx.params["listens"] == ("mqtt://127.0.0.1:1999",)
    with pytest.raises(click.BadParameter, match="bridge"):
        edge.make_context("edge", ["--config", _conf(tmp_path, "connection bridge\n"), "--spec", SPEC])
    store = tmp_path / "store"
    ctx = edge.make_context("edge", ["--config", _conf(tmp_path, f"persistence true\npersistence_location {store}\n"),
                                     "--spec", SPEC])
    assert ctx.params["persistence"] == str(store)
    ctx = edge.make_context("edge", ["--config", _conf(tmp_path, f"persistence false\npersistence_location {store}\n"),
                                     "--spec", SPEC])
    assert ctx.params["persistence"] is None
