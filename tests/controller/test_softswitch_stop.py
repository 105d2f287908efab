"""The software switch stops on Ctrl-C (SIGINT) and SIGTERM with a line and exit status 0, never
a traceback (root: it reads its ports with packet sockets)."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.conftest import APPS, veth_pair

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_software_switch_stops_quietly(tmp_path, sig: signal.Signals) -> None:
    with veth_pair("cxss-a", "cxss-b"):
        sw = subprocess.Popen([sys.executable, "-m", "camus.controller.softswitch", "--dir", str(tmp_path),
                               "--spec", str(APPS / "itch" / "itch.p4"), "--port", "1=cxss-a"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert sw.stdout is not None and sw.stdout.readline().strip() == "ready"
            sw.send_signal(sig)
            _, err = sw.communicate(timeout=60)
        finally:
            if sw.poll() is None:
                sw.kill()
        assert sw.returncode == 0 and "Traceback" not in err, err
        if sig == signal.SIGINT:
            assert "software switch stopped" in err
