"""The program cache (dataplane/program_cache.py): a program built once is loaded again without
BCC, and classifies exactly as the program BCC built; a damaged or foreign entry is never
loaded as it is."""
from __future__ import annotations

import base64
import json
import os
import random
import stat

import pytest

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.tables import map_contents
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import compile_files
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import program as program_mod
from camus.dataplane.program import XdpProgram
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
LIMITS = EbpfLimits(max_msgs=12, max_states=1 << 12, max_exact=1 << 12, max_bounds=1 << 12,
                    max_lpm=1 << 10, max_updates=64)
SPEC = APPS / "itch" / "itch.p4"
RULES = APPS / "itch" / "rules.txt"


def _packets(spec, n: int = 60) -> list[bytes]:
    rng = random.Random(5)
    stocks = ["GOOGL", "MSFT", "AAPL", "IBM", "ZZZZ"]
    out = []
    for _ in range(n):
        msgs = [message_from_text(spec, f"stock={rng.choice(stocks)} price={rng.randrange(0, 400)}")
                for _ in range(rng.randint(1, 4))]
        out.append(build_packet(spec, msgs))
    return out


def _classified(prog: XdpProgram, spec, contents) -> list[object]:
    prog.write(contents)
    return [prog.classify(p) for p in _packets(spec)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    where = tmp_path / "programs"
    monkeypatch.setenv("CAMUS_XDP_CACHE", str(where))
    return where


def _no_bcc(monkeypatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("BCC was asked to build a cached program")
    monkeypatch.setattr(program_mod, "_bcc_build", refuse)


def test_a_kept_program_loads_without_bcc_and_classifies_the_same(cache, monkeypatch) -> None:
    spec = load_spec(SPEC)
    c = compile_files(str(SPEC), str(RULES))
    contents = map_contents(c.pipeline, spec, LIMITS)
    built = XdpProgram.load(spec, LIMITS)
    try:
        assert not built.cached
        want = _classified(built, spec, contents)
    finally:
        built.close()
    entries = list(cache.glob("*.json"))
    assert len(entries) == 1
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and stat.S_IMODE(entries[0].stat().st_mode) == 0o600
    _no_bcc(monkeypatch)
    again = XdpProgram.load(spec, LIMITS)
    try:
        assert again.cached
        assert _classified(again, spec, contents) == want
        assert any(r.messages for r in want)          # the packets did reach subscribers
    finally:
        again.close()
    # another program (other limits, another app id) is another entry; the first stays
    monkeypatch.undo()
    monkeypatch.setenv("CAMUS_XDP_CACHE", str(cache))
    XdpProgram.load(spec, LIMITS, app_id=3, with_tc=False).close()
    assert len(list(cache.glob("*.json"))) == 2


def test_a_damaged_entry_is_built_again_and_a_shared_folder_is_not_used(cache) -> None:
    spec = load_spec(SPEC)
    XdpProgram.load(spec, LIMITS).close()
    (entry,) = cache.glob("*.json")
    doc = json.loads(entry.read_text())
    code = bytearray(base64.b64decode(doc["programs"][0]["insns"]))
    code[-8] = 0xFF                                     # the last instruction (exit) made invalid
    doc["programs"][0]["insns"] = base64.b64encode(bytes(code)).decode()
    entry.write_text(json.dumps(doc))
    prog = XdpProgram.load(spec, LIMITS)                # refused by the kernel: built again
    try:
        assert not prog.cached
    finally:
        prog.close()
    assert json.loads(entry.read_text())["programs"][0]["insns"] != doc["programs"][0]["insns"]
    entry.write_text("{not json")                       # unreadable: removed, built again
    prog = XdpProgram.load(spec, LIMITS)
    prog.close()
    assert not prog.cached and json.loads(entry.read_text())["format"] == 1
    os.chmod(cache, 0o777)                              # others could write kernel code here: ignored
    try:
        prog = XdpProgram.load(spec, LIMITS)
        prog.close()
        assert not prog.cached
    finally:
        os.chmod(cache, 0o700)


def test_off_means_no_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CAMUS_XDP_CACHE", "off")
    spec = load_spec(SPEC)
    for _ in range(2):
        prog = XdpProgram.load(spec, LIMITS, with_tc=False)
        try:
            assert not prog.cached and prog.fd("camus_msg") > 0
            with pytest.raises(KeyError):
                prog.fd("camus_tc_in")                # not loaded without subscriber ports
        finally:
            prog.close()
    assert not list(tmp_path.iterdir())
