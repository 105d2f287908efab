"""Builds the benchmark's C programs (bench/c/*.c) with gcc -O2 on first use, into a cache
next to the venv; rebuilt when the source is newer."""
from __future__ import annotations

import subprocess
from pathlib import Path

SRC = Path(__file__).resolve().parent / "c"
BUILD = Path(__file__).resolve().parent.parent / ".venv" / "camus-bench-bin"


def binary(name: str) -> Path:
    """Path of the built program `name` (send, recv or broker)."""
    src = SRC / f"{name}.c"
    out = BUILD / f"camus_{name}"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        BUILD.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-o", str(out), str(src)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"building {src.name} failed:\n{r.stderr}")
    return out
