"""The compile cache (dataplane/compile_cache.py): a compile kept for the next attach of the same
files is found by their bytes and options, loads to the same tables, and is never used from a
damaged file or a folder others can write."""
from __future__ import annotations

import os

from camus.compiler.compile import CompileOptions, compile_files
from camus.dataplane import compile_cache, counting
from tests.conftest import APPS

SPEC = str(APPS / "itch" / "itch.p4")
RULES = APPS / "itch" / "rules.txt"


def test_a_kept_compile_is_found_by_the_files_and_options(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CAMUS_XDP_CACHE", str(tmp_path / "cache" / "programs"))
    rules = tmp_path / "rules.txt"
    rules.write_text(RULES.read_text())
    key = compile_cache.compile_key(SPEC, str(rules), 64)
    assert key and compile_cache.load(key) is None
    c = compile_files(SPEC, str(rules), CompileOptions(count_rules=64))
    compile_cache.keep(key, c)
    folder = tmp_path / "cache" / "compiled"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    again = compile_cache.load(key, str(tmp_path / "same.txt"))
    assert again.source.name == str(tmp_path / "same.txt") and again.source.text == c.source.text
    assert again.pipeline.to_json() == c.pipeline.to_json()
    assert [(r.offset, r.index) for r in again.rules] == [(r.offset, r.index) for r in c.rules]
    assert counting.rule_texts(again) == counting.rule_texts(c) and counting.compiled_key(again) == counting.compiled_key(c)
    full = compile_cache.with_rules(again)             # the syntax trees, parsed again for the live state
    assert [r.filter for r in full.rules] == [r.filter for r in c.rules]
    assert compile_cache.compile_key(SPEC, str(rules), 0) != key              # other options
    rules.write_text(RULES.read_text() + "stock == ZZZ : fwd(9)\n")
    assert compile_cache.compile_key(SPEC, str(rules), 64) != key             # other rules
    assert compile_cache.compile_key(SPEC, str(tmp_path / "gone.txt"), 64) is None
    (entry,) = folder.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:100])                                # damaged: removed
    assert compile_cache.load(key) is None and not entry.exists()
    compile_cache.keep(key, c)
    os.chmod(folder, 0o777)                                                    # others could plant code
    try:
        assert compile_cache.load(key) is None
    finally:
        os.chmod(folder, 0o700)
    monkeypatch.setenv("CAMUS_XDP_CACHE", "off")
    assert compile_cache.load(key) is None
