"""The shipped systemd units (contrib/systemd) pass `systemd-analyze verify`, with ExecStart
pointed at this install's command (verify checks that the program exists)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

UNITS = {"camus-xdp@.service": "camus-xdp@eth0.service", "camus-xdp-metrics.service": "camus-xdp-metrics.service"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize("shipped", sorted(UNITS))
def test_shipped_unit_verifies(tmp_path: Path, shipped: str) -> None:
    command = Path(sys.executable).parent / "camus-xdp"
    if not command.exists():
        pytest.skip("camus-xdp is not installed as a command here")
    text = (ROOT / "contrib" / "systemd" / shipped).read_text()
    assert "/usr/local/bin/camus-xdp " in text
    unit = tmp_path / UNITS[shipped]
    unit.write_text(text.replace("/usr/local/bin/camus-xdp", str(command)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          timeout=120)
    problems = [ln for ln in (done.stdout + done.stderr).splitlines() if str(unit.name) in ln or "error" in ln.lower()]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr
