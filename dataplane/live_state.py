"""`camus-xdp update` as a delta: the live classifier a command leaves behind for the next one.

A host agent keeps its live classifier (dataplane/live.py) in memory, so a changed subscription
costs it milliseconds. A command has no memory: to change one rule of 100K it would build the
decision diagram of all of them again (seconds). So every command that writes an attachment's
tables through the live path (`attach`, `update`) leaves the classifier's parts (incremental
compiler, live tables, bank layout) in the unit's folder, with what they were built from (this
code, the spec, the options) and what they serve (bank, root, tables key). The next `update`
loads them, checks all of that against the state file and the live root, and applies the rules
file's changed lines as a delta through the agent's own path: the delta is journaled in the
state file before its first map write (journal.py finishes or undoes it after a crash), the root
moves in one write, and the states no packet reaches any more are cleared after the grace
period.

Each delta is logged after the saved parts (`live.log`) rather than saving them again: a fresh
save of 100K rules' state costs 0.3 s, replaying a logged delta about 9 ms, so the parts are
saved afresh only once the log takes REPLAY_BUDGET_S to replay (or holds LOG_MAX deltas).

The saved parts are a cache, never the truth: whatever does not check out (another writer moved
the root, the spec or the code changed, a log that does not replay to what serves) takes the
whole path, which saves them again. A file with one rule per line (the common case, and what
configuration tools write) is diffed by its lines without parsing it; other files are parsed
first. The files are root's, in root's folder, like the state file: nothing else writes them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from camus.compiler.backends.ebpf.delta import CALLS, EbpfLayout, Held, MapDelta
from camus.compiler.compile import CompileOptions, Compiled, no_cyclic_gc
from camus.compiler.incremental import IncrementalCompiler, NotLive, live_items, split_line
from camus.compiler.language.errors import CompileError, CompileErrors, read_source
from camus.compiler.language.rules_ast import Rule
from camus.compiler.language.rules_parser import SourceText, strip_comment
from camus.compiler.language.spec_parser import load_spec
from camus.compiler.structure.live_tables import LiveTables

from .attachment import UpdateReport, sync_fan_groups
from .faults import GRACE_S, fault
from .installed import (Installed, UnitHold, forget_live_state, live_log_path, live_state_path, load_installed,
                        save, unit_lock)
from .journal import settle
from .live import LiveClassifier, held_keys, map_keys, sorted_has
from .maps import CFG_ROOT, MapSet
from .program import DataplaneError, require_root

log = logging.getLogger("camus.dataplane")

FORMAT = 1
PARTS = ("compiler", "tables", "layout", "ports", "fixed_ports", "widths", "limits", "generation",
         "counting", "counted_at")
_CODE = Path(__file__).resolve().parent.parent / "compiler"


def line_texts(text: str) -> list[str]:
    """The rule text of each rule line of a file that has one rule per line (blank lines and
    comment lines skipped): what counting.texts_of gives for such a file, without parsing it."""
    if "#" not in text:                  # no comment anywhere: 100K lines in a third of the time
        return [t for raw in text.splitlines() if (t := raw.strip().rstrip("; \t"))]
    return [t for raw in text.splitlines() if (t := strip_comment(raw).rstrip("; \t"))]


_stamp: str | None = None


def code_stamp() -> str:
    """The compiler's code: saved parts are objects of its classes, and meant for its node ids.
    Each source file by its size and modification time (reading them all cost 20 ms an update)."""
    global _stamp
    if _stamp is None:
        h = hashlib.sha256(str(FORMAT).encode())
        for f in [*sorted(_CODE.rglob("*.py")), Path(__file__).with_name("live.py")]:
            st = f.stat()
            h.update(f"{f.relative_to(_CODE.parent)} {st.st_size} {st.st_mtime_ns}\n".encode())
        _stamp = h.hexdigest()
    return _stamp


def _spec_sha(spec_path: str) -> str:
    try:
        return hashlib.sha256(Path(spec_path).read_bytes()).hexdigest()
    except OSError:
        return ""


class BadRules(Exception):
    """A changed rule does not compile: the whole compile reports it, with its position in the file."""


@dataclass
class Saved:
    stamp: str
    spec_sha: str
    options: CompileOptions
    bank: int
    root: int
    tables_key: str
    per_line: bool             # the rules file had one rule per line: the next one may be diffed by lines
    parts: dict[str, Any]


LOG_MAX = 64            # deltas logged after the saved parts before they are saved afresh,
REPLAY_BUDGET_S = 0.1   # or sooner, once replaying them takes longer than this (each delta of
                        # 100K ITCH rules: ~9 ms; saving the parts: ~0.3 s)


def save_parts(lc: LiveClassifier, per_line: bool) -> None:
    """Leave `lc`'s parts for the next command (after the state file is saved: they must agree),
    and start an empty log of the deltas after them."""
    inst = lc.inst
    assert lc.layout is not None
    saved = Saved(code_stamp(), _spec_sha(inst.spec), lc.compiler.options, inst.bank, inst.root,
                  inst.tables_key, per_line, {name: getattr(lc, name) for name in PARTS})
    path = live_state_path(inst.unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    live_log_path(inst.unit).unlink(missing_ok=True)     # (first: a log never outlives its parts)
    tmp = path.with_suffix(".tmp")
    with no_cyclic_gc():
        tmp.write_bytes(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(path)


def log_delta(lc: LiveClassifier, added: list[str], removed: list[str], per_line: bool) -> None:
    """A delta the saved parts do not hold yet, logged after them: pickling 100K rules' diagram
    again costs more than the rest of an update, replaying a few logged deltas next time costs
    milliseconds. What the delta led to (root, tables key) is logged with it: the replay must
    arrive exactly there, or the parts are not used."""
    inst = lc.inst
    record = {"added": added, "removed": removed, "root": inst.root, "bank": inst.bank,
              "tables_key": inst.tables_key, "per_line": per_line}
    with open(live_log_path(inst.unit), "a") as f:
        f.write(json.dumps(record) + "\n")


def _logged(unit: str) -> list[dict] | None:
    """The deltas logged after the saved parts (None: a torn or unreadable log)."""
    try:
        text = live_log_path(unit).read_text()
    except FileNotFoundError:
        return []
    try:
        return [json.loads(line) for line in text.splitlines()]
    except ValueError:
        return None


def _resume(inst: Installed, maps: MapSet) -> tuple[LiveClassifier, bool, bool] | None:
    """A live classifier for `inst` from the saved parts and the deltas logged after them, with
    whether the last rules file had one rule per line and whether the log may grow (LOG_MAX,
    REPLAY_BUDGET_S); None unless they are this code's, for this spec and options, and lead
    exactly to what serves."""
    try:
        with no_cyclic_gc():
            saved = pickle.loads(live_state_path(inst.unit).read_bytes())
    except FileNotFoundError:
        return None
    except Exception as exc:            # an older layout of the classes, a truncated file: rebuilt
        log.info("%s: saved live state unusable (%s); the whole path runs", inst.unit, exc)
        return None
    if not (isinstance(saved, Saved) and saved.stamp == code_stamp() and saved.spec_sha == _spec_sha(inst.spec)
            and saved.options == CompileOptions(count_rules=inst.count_rules)):
        return None
    logged = _logged(inst.unit)
    if logged is None:
        return None
    lc = LiveClassifier.for_command(inst)
    lc.__dict__.update(saved.parts)
    at, per_line = (saved.bank, saved.root, saved.tables_key), saved.per_line
    t0 = time.perf_counter()
    try:
        with no_cyclic_gc():
            for record in logged:
                if lc.replay(record["added"], record["removed"]) != record["root"]:
                    return None
                at, per_line = (record["bank"], record["root"], record["tables_key"]), record["per_line"]
    except Exception as exc:            # a log these parts cannot replay: not theirs
        log.info("%s: the logged deltas do not replay (%s); the whole path runs", inst.unit, exc)
        return None
    if at != (inst.bank, inst.root, inst.tables_key) or maps.cfg(CFG_ROOT) != inst.root:
        return None
    lc.maps, lc.base, lc._saved = maps, dict(inst.rule_base), time.monotonic()
    return lc, per_line, len(logged) < LOG_MAX and time.perf_counter() - t0 < REPLAY_BUDGET_S


def _read(rules_path: str) -> str | None:
    try:
        return read_source(rules_path, "rules")
    except (CompileError, CompileErrors):
        return None                     # the whole path says why, with the position


def update(unit: str, rules_path: str, texts: list[str] | None = None, per_line: bool = True) -> UpdateReport | None:
    """Apply the rules file as a delta to what the last command left live; None when this path
    does not serve it (no saved parts that check out, a line that does not compile alone, no
    room in the live bank): the whole path then runs, and reports errors with their positions.
    `texts`: the file's rule texts in file order when the caller parsed it (`per_line`: whether
    it has one rule per line); without them the file is read and split by lines, which needs
    the last file to have had one rule per line too."""
    require_root()
    if not live_state_path(unit).exists():
        return None
    t0 = time.perf_counter()
    given = texts is not None
    with unit_lock(unit):
        inst = load_installed(unit)
        settle(inst)
        maps = MapSet.from_pins(inst.pins)
        try:
            resumed = _resume(inst, maps)
            if resumed is None:
                return None
            lc, last_per_line, may_log = resumed
            if texts is None:
                if not last_per_line:
                    return None
                text = _read(rules_path)
                if text is None:
                    return None
                texts = line_texts(text)
            if not texts:
                return None                      # an empty set: the whole path refuses it unless asked
            return _apply(lc, rules_path, live_items(texts, inst.count_rules), per_line, t0, given, may_log)
        finally:
            maps.close()


def _apply(lc: LiveClassifier, rules_path: str, items: set[str], per_line: bool, t0: float,
           parsed: bool, may_log: bool) -> UpdateReport | None:
    """The delta from the live lines to `items`. A line that does not compile raises BadRules when
    the texts came from a parse (a real error), and gives None when they came from splitting the
    file by lines (perhaps a piece of a rule written over several: the caller parses the file)."""
    inst = lc.inst
    old = set(lc.compiler.live_slots)
    old_lines, old_n = inst.rule_lines, len(inst.keys["desc"])
    rules = str(Path(rules_path).resolve())
    if items == old:
        inst.rules = rules
        save(inst)
        return UpdateReport([], [], old_n, old_n, time.perf_counter() - t0, False, path="delta")
    added, removed = sorted(items - old), sorted(old - items)
    # inst.rules names what serves: the new file only once its tables are live (_finish, or the
    # journal's record when a crash is finished); a killed write is undone with the old name kept
    journal = lc.journal = Journal(lc, rules, added, removed)
    try:
        report = lc.apply(added, removed)     # a line that does not compile alone, no room: nothing written
    except (CompileError, CompileErrors) as exc:
        if parsed:
            raise BadRules(str(exc)) from exc
        return None
    except (KeyError, NotLive, DataplaneError) as exc:
        log.info("%s: the change does not take the live path (%s)", inst.unit, exc)
        return None
    fault("update:flipped")
    _finish(lc, rules, per_line, journal.lines,
            log=(added, removed) if not report.whole and may_log else None)
    new_lines = lc.inst.rule_lines
    return UpdateReport(sorted({t for t, _ in map(split_line, added) if not sorted_has(old_lines, t)}),
                        sorted({t for t, _ in map(split_line, removed) if not sorted_has(new_lines, t)}),
                        old_n, len(inst.keys["desc"]), time.perf_counter() - t0, True, path="delta")


def _finish(lc: LiveClassifier, rules: str, per_line: bool, lines: list[str] | None,
            log: tuple[list[str], list[str]] | None = None) -> None:
    """After the flip: the retired states cleared once in-flight packets are done, the state file
    saved (the journal closed; `lines`: the rule lines the journal found), the broadcast groups
    and the saved parts brought along (`log`: the delta's added and removed lines, logged after
    the saved parts instead of saving them afresh)."""
    assert lc.layout is not None
    time.sleep(GRACE_S)
    lc.retire(lc.layout.reclaim(everything=True))
    lc.inst.rules = rules
    lc.save(lines)
    fault("update:cleaned")
    if lc.inst.fan_entries:
        port_sets = {h.ports for h in lc.layout.holding() if not h.tests}
        sync_fan_groups(lc.inst, lc.maps, [tuple(p for p in ports if p is not CALLS) for ports in port_sets])
    if log is not None:
        log_delta(lc, *log, per_line)
    else:
        save_parts(lc, per_line)


class Journal:
    """The intent journal of this command's write (journal.finish_or_undo reads it): a whole set
    in the other bank as `update` journals one; a delta as what it writes, what it retires and
    how the rule lines change. `lines`: the rule lines after the write, once it is journaled."""

    def __init__(self, lc: LiveClassifier, rules: str, added: list[str], removed: list[str]) -> None:
        self.lc, self.rules, self.added, self.removed = lc, rules, added, removed
        self.lines: list[str] | None = None

    def __call__(self, md: MapDelta, layout: EbpfLayout, tables: LiveTables, whole: bool) -> None:
        lc, rules, added, removed = self.lc, self.rules, self.added, self.removed
        inst = lc.inst
        lines = self.lines = (lc.rule_lines() if whole else
                              lc.rule_lines_after(inst.rule_lines, self.added, self.removed))
        counted, leaf_rules, base, key = lc.record(tables, layout, lines)
        if whole:
            forget_live_state(inst.unit)      # what was saved describes the set this write replaces
            inst.pending = {"bank": layout.bank, "root": md.root, "keys": held_keys(layout.holding(), layout.bank),
                            "rules": rules, "rule_lines": lines, "counted": counted, "leaf_rules": leaf_rules,
                            "tables_key": key}
        else:
            retired: list[Held] = [h for _, hs in layout.quarantine for h in hs]
            before, after = set(inst.rule_lines), set(lines)
            now = {split_line(ln)[0] for ln in added} | {split_line(ln)[0] for ln in removed}
            wrote = map_keys(md.desc, md.leaf, md.xslots, md.lpm, layout.bank)
            inst.pending = {"kind": "delta", "bank": layout.bank, "root": md.root, "wrote": wrote,
                            "retired": held_keys(retired, layout.bank), "rules": rules,
                            "added_lines": sorted(t for t in now if t in after and t not in before),
                            "removed_lines": sorted(t for t in now if t in before and t not in after),
                            "counted": counted, "leaf_rules": leaf_rules, "rule_base": base, "tables_key": key}
        save(inst)
        fault("update:journaled")


def rebuild(unit: str, rules_path: str, texts: list[str], per_line: bool, progress: Any = None,
            parsed: tuple[list[Rule], SourceText] | None = None, compiled: Compiled | None = None,
            hold: UnitHold | None = None) -> UpdateReport | None:
    """Write the rules as a whole set into the other bank through the live path (what `attach`
    and an update without usable saved parts do), and save the parts for the next update. None
    when the rules do not take the live path (the bit-vector stage serves them, state functions,
    topic fields) or do not fit: the whole path then runs. `parsed`: the file's parse, whose rules
    are then not parsed again line by line; `compiled`: its whole compile (not lowered again);
    `hold`: the unit's lock, taken by the caller (attach's child finishing its live state)."""
    require_root()
    load_installed(unit)
    t0 = time.perf_counter()
    with unit_lock(unit, held=hold):
        inst = load_installed(unit)
        settle(inst)
        old_lines, old_n = set(inst.rule_lines), len(inst.keys["desc"])
        rules = str(Path(rules_path).resolve())
        items = live_items(texts, inst.count_rules)
        if progress is not None and len(items) > 20_000:
            progress(f"{unit}: building the live diagram of {len(items)} rules (the next updates are deltas)")
        lc = LiveClassifier.for_command(inst)
        journal = lc.journal = Journal(lc, rules, sorted(items), [])      # inst.rules: set once live (_finish)
        seeded = None
        if parsed is not None or compiled is not None:
            seeded = IncrementalCompiler(load_spec(inst.spec), CompileOptions(count_rules=inst.count_rules))
            if compiled is not None:
                seeded.seed_compiled(texts, compiled)
            elif parsed is not None:
                seeded.seed_rules(texts, parsed[0], parsed[1])
        try:
            lc._take_over(None, seeded, items)
        except DataplaneError as exc:       # nothing written: the whole path serves these rules
            log.info("%s: %s", unit, exc)
            # not for this path (the bit-vector stage, no room in this program's banks): not again
            # until a whole write says otherwise (a grow); a rule with an error is the file's fault
            if not isinstance(exc.__cause__, (CompileError, CompileErrors)):
                inst = load_installed(unit)
                inst.live_path = False
                save(inst)
            return None
        try:
            lc.inst.live_path = True
            fault("update:flipped")
            _finish(lc, rules, per_line, journal.lines)
        finally:
            lc.maps.close()
    inst = lc.inst                     # (the take-over read the state file afresh)
    lines = set(inst.rule_lines)
    return UpdateReport(sorted(lines - old_lines), sorted(old_lines - lines), old_n, len(inst.keys["desc"]),
                        time.perf_counter() - t0, True, path="live")
