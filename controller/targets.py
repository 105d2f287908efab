"""Where a device's tables go: an XDP host's agent (HTTP, token), or a P4 switch's directory of
the P4 back end's files (program, simple_switch_CLI, P4Runtime JSON, bfrt_python, P4Info),
replaced atomically."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from camus.compiler.backends.base import TargetOptions
from camus.compiler.backends.registry import backend

from .devices import DeviceTables


class PushError(RuntimeError):
    pass


@dataclass(frozen=True)
class Held:
    """What a device holds now, as far as its target can tell: digest and rule count."""
    digest: str
    rules: int


@dataclass
class AgentTarget:
    """POST the device's rules to its host agent, which compiles and swaps them atomically."""
    url: str
    token: str
    timeout: float = 10.0

    def current(self, device: str) -> Held | None:
        """The agent's tables now (None when it cannot be asked)."""
        req = urllib.request.Request(self.url.rstrip("/") + "/v1/status",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = json.loads(resp.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return Held(str(doc.get("digest", "")), int(doc.get("rules", 0)))

    def push(self, device: str, tables: DeviceTables) -> str:
        body = json.dumps({"device": device, "rules": tables.rules, "digest": tables.digest}).encode()
        req = urllib.request.Request(self.url.rstrip("/") + "/v1/tables", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                answer = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise PushError(f"agent {self.url} refused: {exc.code} {exc.read()[:300].decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PushError(f"agent {self.url} unreachable: {exc}") from None
        if answer.get("digest") != tables.digest:
            raise PushError(f"agent {self.url} applied {answer.get('digest')!r}, not {tables.digest!r}")
        return answer.get("summary", "")


@dataclass
class SwitchDirTarget:
    """Write the switch's program and entries into a new version directory and point the symlink
    DIR/<device> at it in one rename: a reader sees the old set or the new set, never a mix."""
    root: Path
    arch: str = "v1model"

    def current(self, device: str) -> Held | None:
        d = self.root / device
        try:
            rules = (d / "rules.txt").read_text()
            return Held((d / "digest").read_text().strip(), sum(1 for x in rules.splitlines() if x.strip()))
        except OSError:
            return None

    def push(self, device: str, tables: DeviceTables) -> str:
        # the same files as `compile --target p4 -o DIR`; over the switch budget nothing is written
        art = backend("p4").build(tables.compiled, TargetOptions(arch=self.arch))
        files = {**art.files, "rules.txt": tables.rules, "digest": tables.digest + "\n"}
        self.root.mkdir(parents=True, exist_ok=True)
        version = Path(tempfile.mkdtemp(prefix=f".{device}-{tables.digest}-", dir=self.root))
        for name, text in files.items():
            (version / name).write_text(text)
        link = self.root / f".{device}.link"
        link.unlink(missing_ok=True)
        os.symlink(version.name, link)
        os.replace(link, self.root / device)            # DIR/<device> -> the new version, atomically
        for old in self.root.glob(f".{device}-*"):
            if old != version and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        return art.summary.splitlines()[0] if art.summary else "written"
