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
