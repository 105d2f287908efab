"""The systemd units of a host (`camus-xdp install-units`): camus-xdp@IFACE.service attaches an
interface from /etc/camus-xdp/config.yaml at boot and detaches it on stop; camus-xdp-metrics
.service runs the Prometheus exporter. Their ExecStart names this host's own camus-xdp (where
pip put it), so they verify and run as written; they are checked with `systemd-analyze verify`
before they replace anything in the unit folder, and written whole or not at all."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from .program import DataplaneError

UNIT_FILES = ("camus-xdp@.service", "camus-xdp-metrics.service")
UNIT_DIR = Path("/etc/systemd/system")
COMMAND_SLOT = "{{CAMUS_XDP}}"
VERIFY_INSTANCE = "eth0"          # a template unit is verified as one of its instances


def this_command() -> Path:
    """The camus-xdp executable of this installation: beside the running interpreter (a venv or
    pip's scripts folder), else the one on PATH."""
    beside = Path(sys.executable).parent / "camus-xdp"
    found = beside if beside.exists() else (Path(p) if (p := shutil.which("camus-xdp")) else None)
    if found is None:
        raise DataplaneError("no camus-xdp command beside this Python or on PATH: give --command")
    return found.absolute()


def unit_texts(command: Path) -> dict[str, str]:
    """Each unit's text with ExecStart naming `command`."""
    if not command.is_absolute() or any(c.isspace() for c in str(command)):
        raise DataplaneError(f"{command}: systemd needs an absolute path without spaces for ExecStart")
    folder = files("camus.dataplane").joinpath("systemd")
    return {name: folder.joinpath(name).read_text().replace(COMMAND_SLOT, str(command)) for name in UNIT_FILES}


def verify(folder: Path) -> str:
    """`systemd-analyze verify` of the units in `folder` ("" when they pass or no systemd-analyze
    is installed; else what it said)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return ""
    paths = []
    for name in UNIT_FILES:
        path = folder / name
        if name.endswith("@.service"):             # verify the template as an instance of it
            inst = folder / name.replace("@.", f"@{VERIFY_INSTANCE}.")
            inst.write_text(path.read_text())
            path = inst
        paths.append(str(path))
    done = subprocess.run([tool, "verify", "--man=no", *paths], capture_output=True, text=True, timeout=120)
    said = [ln for ln in (done.stdout + done.stderr).splitlines()
            if any(Path(p).name in ln for p in paths) or "error" in ln.lower()]
    return "\n".join(said) if done.returncode or said else ""


def install_units(command: Path, unit_dir: Path = UNIT_DIR) -> list[Path]:
    """Write the units into `unit_dir` once they verify (DataplaneError with what systemd-analyze
    said otherwise; nothing is written then). Returns the files written."""
    texts = unit_texts(command)
    with tempfile.TemporaryDirectory(prefix="camus-units-") as tmp:
        for name, text in texts.items():
            (Path(tmp) / name).write_text(text)
        problems = verify(Path(tmp))
        if problems:
            raise DataplaneError(f"the units do not verify (nothing written):\n{problems}")
    unit_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        path = unit_dir / name
        part = path.with_name(f".{name}.part")
        part.write_text(text)
        os.chmod(part, 0o644)
        os.replace(part, path)                     # each file whole: never half a unit
        written.append(path)
    return written
