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
import pickle
import sys
from array import array
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from camus.compiler.language.rules_parser import rule_source

from .cache_dir import CacheDir

log = logging.getLogger(__name__)

FORMAT = 2
KEEP = 4                       # rule sets kept (100K ITCH rules: 27 MB each)
STORE = CacheDir("compiled", ".pickle", KEEP)


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
    data = None if key is None else STORE.read(key)
    if data is None:
        return None
    enabled = gc.isenabled()
    gc.disable()                     # 100K rules' objects: the collector would walk them all
    try:
        form, lean, offsets = pickle.loads(data)
        if form != FORMAT:
            raise ValueError(f"format {form}")
        return replace(lean, rules=[RuleAt(o, i) for i, o in enumerate(offsets)],
                       source=rule_source(lean.source.text, rules_path or lean.source.name))
    except Exception:                # a damaged or stale entry: removed, compiled again
        if key is not None:
            STORE.drop(key)
        return None
    finally:
        if enabled:
            gc.enable()


def keep(key: str | None, compiled: Any) -> None:
    """Keep a compile (once: the same key is the same compile)."""
    if key is None or STORE.has(key):
        return
    try:
        data = pickle.dumps((FORMAT, replace(compiled, rules=[]), array("q", [r.offset for r in compiled.rules])),
                            protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, RecursionError) as exc:
        log.info("compile cache: could not keep the compile (%s)", exc)
        return
    STORE.write(key, data)
