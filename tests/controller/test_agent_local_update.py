"""`camus-xdp update` while a host agent holds the interface (root, veth): the rules file is handed
to the agent over its Unix socket, which applies the changed lines as a delta from the tables it
keeps in memory; the kernel serves them, `status` names the file, a bad rule is refused with its
position and changes nothing."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from camus.bench.p4rt_bench import free_port
from camus.compiler.language.spec_parser import load_spec
from camus.lab.namespaces import processes
from camus.lab.pinned_run import port_bits_of
from tests.conftest import APPS, veth_pair

pytestmark = [pytest.mark.netns, pytest.mark.bpf]
SPEC_PATH = APPS / "itch" / "itch.p4"
IF_A, IF_B = "cxla", "cxlb"
SOCKET = Path("/run/camus") / f"{IF_A}.agent"


def _until(what: str, ok, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def _status(exe: str) -> dict:
    out = subprocess.run([exe, "status", "--json"], capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(out.stdout)
    units = doc["units"] if isinstance(doc, dict) and "units" in doc else doc
    return next(u for u in units if u["unit"] == IF_A)


def test_update_hands_the_file_to_the_agent_holding_the_interface(tmp_path: Path) -> None:
    spec = load_spec(SPEC_PATH)
    exe = str(Path(sys.executable).parent / "camus-xdp")
    rules = [f"stock == S{i:04d} and price > {i % 90 + 1} : fwd({i % 8 + 1})" for i in range(2000)]
    path = tmp_path / "rules.txt"
    path.write_text("\n".join(rules) + "\n")
    (tmp_path / "agent.token").write_text("tok\n")
    with veth_pair(IF_A, IF_B):
        subprocess.run([exe, "attach", IF_A, "--spec", str(SPEC_PATH), "--rules", str(path), "--mode", "generic"],
                       check=True, capture_output=True, timeout=600)
        try:
            with processes() as procs:
                procs.append(subprocess.Popen([exe, "agent", IF_A, "--spec", str(SPEC_PATH),
                                               "--listen", f"127.0.0.1:{free_port()}",
                                               "--token-file", str(tmp_path / "agent.token")],
                                              stderr=subprocess.DEVNULL))
                _until("the agent's socket", SOCKET.is_socket)
                old, rules[5] = rules[5], "stock == NEWSYM and price > 7 : fwd(3)"
                path.write_text("\n".join(rules) + "\n")
                run = subprocess.run([exe, "update", IF_A, "--rules", str(path), "--json"], capture_output=True,
                                     text=True, timeout=600)
                assert run.returncode == 0, run.stderr
                doc = json.loads(run.stdout)
                assert doc["agent"] and doc["path"] == "delta" and doc["written"]
                assert doc["added"] == [rules[5]] and doc["removed"] == [old]
                new_bits, old_bits = port_bits_of(IF_A, spec, ["stock=NEWSYM price=8", "stock=S0005 price=99"])
                assert new_bits and not old_bits           # the kernel serves the file
                _until("status naming the file", lambda: _status(exe)["rules_file"] == str(path)
                       and _status(exe)["rules"] == len(rules))
                # a bad rule: refused with its position, nothing changes
                path.write_text("\n".join(rules) + "\nstock == : fwd(1)\n")
                bad = subprocess.run([exe, "update", IF_A, "--rules", str(path)], capture_output=True, text=True,
                                     timeout=600)
                assert bad.returncode == 1 and f"{path}:2001:" in bad.stderr, bad.stderr
                assert port_bits_of(IF_A, spec, ["stock=NEWSYM price=8"])[0]
                # the file again: nothing to write
                path.write_text("\n".join(rules) + "\n")
                same = subprocess.run([exe, "update", IF_A, "--rules", str(path)], capture_output=True, text=True,
                                      timeout=600)
                assert same.returncode == 0 and "unchanged" in same.stdout, same.stdout + same.stderr
            assert not SOCKET.exists()                     # the agent removed its socket on the way out
            # no agent: the command does the update itself
            rules[6] = "stock == SOLO and price > 1 : fwd(2)"
            path.write_text("\n".join(rules) + "\n")
            alone = subprocess.run([exe, "update", IF_A, "--rules", str(path), "--json"], capture_output=True,
                                   text=True, timeout=600)
            assert alone.returncode == 0 and not json.loads(alone.stdout)["agent"], alone.stderr
        finally:
            subprocess.run([exe, "detach", IF_A], capture_output=True, timeout=300)
