"""`camus-xdp install-units` writes the systemd units with ExecStart naming this installation's
command, and exactly the files it writes pass `systemd-analyze verify`; units that would not
verify (a command that does not exist) are refused with what systemd said, and nothing is written."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.dataplane.units import UNIT_FILES

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


def _command() -> Path:
    command = Path(sys.executable).parent / "camus-xdp"
    if not command.exists():
        pytest.skip("camus-xdp is not installed as a command here")
    return command


def test_the_written_units_verify_as_written(tmp_path: Path) -> None:
    command = _command()
    got = CliRunner().invoke(main, ["install-units", "--dir", str(tmp_path)], catch_exceptions=False)
    assert got.exit_code == 0, got.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(UNIT_FILES)
    for name in UNIT_FILES:
        text = (tmp_path / name).read_text()
        assert f"ExecStart={command.absolute()} " in text and "{{" not in text
    # exactly what was written, the template as one of its instances (systemd reads it so)
    check = tmp_path / "check"
    check.mkdir()
    paths = []
    for name in UNIT_FILES:
        dest = check / name.replace("@.", "@eth0.")
        shutil.copy(tmp_path / name, dest)
        paths.append(str(dest))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *paths], capture_output=True, text=True,
                          timeout=120)
    said = [ln for ln in (done.stdout + done.stderr).splitlines() if "camus-xdp" in ln or "error" in ln.lower()]
    assert done.returncode == 0 and not said, done.stdout + done.stderr


def test_units_that_do_not_verify_write_nothing(tmp_path: Path) -> None:
    _command()
    units = tmp_path / "units"
    got = CliRunner().invoke(main, ["install-units", "--dir", str(units), "--command", str(tmp_path / "nowhere")])
    assert got.exit_code != 0 and "do not verify" in got.output and "nowhere" in got.output
    assert not units.exists() or not any(units.iterdir())
