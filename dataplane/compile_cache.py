"""Rule sets compiled for an attach, kept for the next attach of the same files.

Attaching 100K rules spends 2 s compiling them (parse, lowering, diagram, slicing); attaching the
same spec and rules again (after a detach, a reboot of the data plane, a maintenance window)
need not. The compile is kept as a pickle under /var/cache/camus-xdp/compiled (beside the
program cache, root's alone), keyed by the spec's and the rules' bytes, the compile options
and the compiler's code (live_state.code_stamp: each source file's size and time). Loading it
takes a fifth of the compile's time at 100K: the rules' syntax trees (half the pickle, three
quarters of its load) are not kept, only where each rule starts (`RuleAt`): what attach reads of
them (each rule's text, the counted ones); the child that builds the live state, which needs the
trees, parses the file again (`with_rules`). It is written by attach's child process after the
command returns (the live state first), so no attach waits for it; the newest KEEP stay.
"""
from __future__ import annotations

import gc
import hashlib
import logging
import os
import pickle
import sys
import tempfile
from array import array
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from camus.compiler.language.rules_parser import rule_source

from .program_cache import cache_root, safe_dir

log = logging.getLogger(__name__)

FORMAT = 2
KEEP = 4                       # rule sets kept (100K ITCH rules: 27 MB each)


@dataclass(frozen=True, slots=True)
class RuleAt:
    """A kept compile's rule: where it starts in the source and its number (no syntax tree)."""
    offset: int
    index: int


def with_rules(c: Any) -> Any:
    """`c` with its rules' syntax trees: parsed again from its source when it came from the cache."""
    if not c.rules or not isinstance(c.rules[0], RuleAt):
        return c
    from camus.compiler.language.rules_parser import parse_rules
    rules, _ = parse_rules(c.source.text, c.source.name)
    if [r.offset for r in rules] != [r.offset for r in c.rules]:
        raise ValueError(f"{c.source.name} parses otherwise than when it was compiled")
    return replace(c, rules=rules)


def _root() -> Path | None:
    programs = cache_root()
    return None if programs is None else programs.parent / "compiled"


def compile_key(spec_path: str, rules_path: str, count_rules: int) -> str | None:
    """The key of a compile of these files (None: a file cannot be read; the compile says why)."""
    from .live_state import code_stamp
    h = hashlib.sha256(f"{FORMAT} {count_rules} {sys.version} {code_stamp()}".encode())
    try:
        for path in (spec_path, rules_path):
            h.update(b"\0" + Path(path).read_bytes())
    except OSError:
        return None
    return h.hexdigest()[:32]


def load(key: str | None, rules_path: str = "") -> Any:
    """The compile kept under `key`, or None; `rules_path` names its source now (the same bytes
    may have been attached from another file)."""
    root = _root()
    if key is None or root is None:
        return None
    path = root / f"{key}.pickle"
    try:
        if not safe_dir(root):
            return None
        data = path.read_bytes()
        enabled = gc.isenabled()
        gc.disable()                 # 100K rules' objects: the collector would walk them all
        try:
            form, lean, offsets = pickle.loads(data)
            if form != FORMAT:
                raise ValueError(f"format {form}")
            found = replace(lean, rules=[RuleAt(o, i) for i, o in enumerate(offsets)],
                            source=rule_source(lean.source.text, rules_path or lean.source.name))
        finally:
            if enabled:
                gc.enable()
        os.utime(path)
        return found
    except FileNotFoundError:
        return None
    except Exception as exc:         # a damaged or stale entry: removed, compiled again
        log.info("compile cache entry %s unusable (%s): removed", path, exc)
        path.unlink(missing_ok=True)
        return None


def keep(key: str | None, compiled: Any) -> None:
    """Keep a compile (atomically); the oldest past KEEP go."""
    root = _root()
    if key is None or root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not safe_dir(root) or (root / f"{key}.pickle").exists():
            return
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".entry-")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((FORMAT, replace(compiled, rules=[]), array("q", [r.offset for r in compiled.rules])),
                            f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, root / f"{key}.pickle")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        entries = sorted(root.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, RecursionError) as exc:
        log.info("compile cache: could not keep the compile (%s)", exc)
