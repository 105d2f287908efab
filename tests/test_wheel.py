"""The package works without the checkout: build the wheel from the tracked files, install it
into a fresh venv and compile a shipped app for every target from a directory far from the
source tree (templates and apps come from the installed package data)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
    return out


def test_wheel_installs_and_compiles_from_a_fresh_venv(tmp_path) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True)
    if tracked.returncode:
        pytest.skip("not a git checkout")
    src = tmp_path / "src"
    for rel in tracked.stdout.decode().split("\0"):
        if rel and (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
          str(tmp_path / "dist"), str(src)])
    wheel = next((tmp_path / "dist").glob("camus_xdp-*.whl"))
    venv = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
          "--no-deps", "--no-index", str(wheel)])
    # the dependencies (click, PyYAML, ...) from this venv's site-packages, on PYTHONPATH so no
    # .pth file runs: the editable install of the checkout stays out of sight
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import camus.compiler, camus.data; print(camus.compiler.__file__); "
                  "print(camus.data.shipped_apps()['itch'][0])"], cwd=work, env=env).stdout.split()
    assert all(str(venv) in w for w in where), where
    spec, rules = where[1], where[1].replace("itch.p4", "rules.txt")
    for target in ("ir", "ebpf", "p4", "userspace"):
        out = work / target
        _run([str(venv / "bin" / "camus-xdp"), "compile", spec, rules, "--target", target, "-o", str(out)],
             cwd=work, env=env)
        assert (out / "pipeline.json").exists()
    assert "XDP_DROP" in (work / "ebpf" / "camus_xdp.c").read_text()
    assert "control" in (work / "p4" / "camus.p4").read_text()
    listed = _run([str(venv / "bin" / "camus-xdp"), "apps"], cwd=work, env=env).stdout
    assert "itch" in listed and str(venv) in listed
