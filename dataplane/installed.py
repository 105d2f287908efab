"""What an attachment leaves behind, and where: the state file and the pin folder.

An attachment *unit* is an interface (`eth0`: one spec serves it) or an application on an
interface that serves several specs (`eth0@dns`: `camus-xdp attach eth0 --app ...`). Each unit
has its maps and programs pinned under /sys/fs/bpf/camus/UNIT and a state file
/run/camus/UNIT.json saying what is installed. Every path is built from a checked name, so no
name can reach outside those folders.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.backends.ebpf.tables import DIAGRAM_MAPS

from .program import DataplaneError

PIN_ROOT = Path("/sys/fs/bpf/camus")
STATE_ROOT = Path("/run/camus")
APP_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
TABLE_CAPACITY = (*DIAGRAM_MAPS, "max_labels", "port_words")   # what attach may size past the defaults; kept for updates


@dataclass
class Installed:
    iface: str                       # the interface
    mode: str
    spec: str
    rules: str
    bank: int
    root: int
    rule_lines: list[str]
    keys: dict[str, list]            # what the live bank holds, for removal after an update
    ports: str | None = None         # the ports file (port bits are fixed at attach)
    clsact: list[str] | None = None  # interfaces where attach added the clsact qdisc
    counted: list[str] = field(default_factory=list)            # rule text of each counted rule
    leaf_rules: dict[str, list[int]] = field(default_factory=dict)  # live leaf state -> counted rules
    rule_base: dict[str, int] = field(default_factory=dict)     # counts carried over updates, by text
    count_rules: int = 0                                        # CompileOptions.count_rules at attach
    bv_capacity: list[int] = field(default_factory=list)        # bv_words, max_bv_bitmaps, max_bv_segs[, bv_columns]
    tables_key: str = ""             # what the live tables were compiled from (tables_key())
    port_bits: list | None = None    # the ports file's ports in bit order, fixed at attach: updates
                                     # need no interface lookup (an edge broker in another netns)
    # an update in flight (the intent journal, saved before its first map write): the new set's
    # root, bank, keys and rules; a crash leaves it here and the next command finishes or undoes it
    pending: dict | None = None
    app: str = ""                    # the application's name when the interface serves several
    table_capacity: dict[str, int] = field(default_factory=dict)  # diagram maps attach grew past the
                                                                   # defaults (EbpfLimits field -> size)
    fanout: str = ""                 # how copies are made (fanout.FanPlan.describe), for status
    fan_entries: list = field(default_factory=list)   # [port bit, ifindex] of each broadcast port
    fan_min_group: int = 1           # the fewest copies broadcast through a group (fanout.FanPlan)
    generation: int = 0              # programs grown for updates since attach, mod 256 (dataplane/grow.py)
    stats_base: dict[str, int] = field(default_factory=dict)   # the counts of programs grown out of
    rps: dict[str, str] = field(default_factory=dict)   # rx queue -> the RPS mask attach turned off
                                                        # (dataplane/netdev.py), written back at detach
    attached_at: float = 0.0         # when attach finished (seconds since the epoch; 0: before it was kept)
    live_path: bool = False          # the rules last written take the live path (incremental.takes_live_path):
                                     # an update without saved live parts builds them (live_state.py)

    @property
    def unit(self) -> str:
        """The name its pins and state file go by: `eth0`, or `eth0@dns` for one of several apps."""
        return unit_name(self.iface, self.app)

    def limits(self) -> EbpfLimits:
        """The limits the loaded program was built with (map capacities)."""
        if not self.bv_capacity:
            return EbpfLimits(**self.table_capacity)
        words, bitmaps, segs, columns = (list(self.bv_capacity) + [0])[:4]    # state before port columns: none
        return EbpfLimits(bv_words=words, max_bv_bitmaps=bitmaps, max_bv_segs=segs, bv_columns=columns,
                          **self.table_capacity)

    @property
    def pins(self) -> Path:
        return pin_dir(self.unit)


def valid_iface(iface: str) -> str:
    """The interface name, checked by the kernel's rules (dev_valid_name): 1-15 bytes, not '.'
    or '..', no '/', ':' or whitespace; and no '@', which separates an app from its interface."""
    if (not iface or len(iface.encode()) > 15 or iface in (".", "..")
            or any(c in iface for c in "/:@") or any(c.isspace() for c in iface) or "\0" in iface):
        raise DataplaneError(f"{iface!r} is not a valid interface name (1-15 characters, no '/', ':', '@' "
                             "or spaces)")
    return iface


def valid_app(app: str) -> str:
    if not APP_NAME.fullmatch(app):
        raise DataplaneError(f"{app!r} is not a valid app name (1-32 letters, digits, '_' or '-')")
    return app


def unit_name(iface: str, app: str = "") -> str:
    return f"{valid_iface(iface)}@{valid_app(app)}" if app else valid_iface(iface)


def valid_unit(unit: str) -> str:
    """`eth0` or `eth0@app`, both parts checked."""
    iface, _, app = unit.partition("@")
    return unit_name(iface, app) if "@" in unit else valid_iface(unit)


def pin_dir(unit: str) -> Path:
    """Where a unit's maps and programs are pinned (only ever below PIN_ROOT)."""
    return PIN_ROOT / valid_unit(unit)


def state_path(unit: str) -> Path:
    return STATE_ROOT / f"{valid_unit(unit)}.json"


def attachment_dir(unit: str) -> Path:
    """Files other tools keep for this attachment (the edge brokers' rules): removed with it,
    cleared when it is made again, so nothing of an earlier attachment comes back."""
    return STATE_ROOT / f"{valid_unit(unit)}.d"


LOCK_POLL_S = 0.05      # how often a command waiting for a unit looks at who holds it


def _lock_path(unit: str) -> Path:
    return STATE_ROOT / "locks" / valid_unit(unit)


def _lock_file(unit: str) -> int:
    folder = STATE_ROOT / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return os.open(_lock_path(unit), os.O_RDWR | os.O_CREAT, 0o600)


def remove_stale_lock(unit: str) -> bool:
    """Remove the unit's lock file if no process holds it (a holder killed with -9 leaves its
    file behind). True when removed. A process that opened the file before and locks it after
    finds it gone from the path and opens the path again (_acquire)."""
    path = _lock_path(unit)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False                               # held: a live command's
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def stale_lock_units() -> list[str]:
    """Units with a lock file and nothing else: no state file and no interface (an attachment
    cannot outlive its interface), the leftovers of killed commands and benches."""
    folder = STATE_ROOT / "locks"
    out = []
    for f in sorted(folder.iterdir()) if folder.is_dir() else []:
        iface = f.name.partition("@")[0]
        if not (STATE_ROOT / f"{f.name}.json").exists() and not (Path("/sys/class/net") / iface).exists():
            out.append(f.name)
    return out


def _acquire(unit: str, wait: bool) -> int | None:
    """The unit's lock file, opened and locked (None: `wait` is off and another process holds
    it). A holder removes the file as it lets go (nothing stays under the lock folder); one that
    opened the file before that and locked it after holds a file no longer at the path, so it
    opens the path again: two processes never hold two different files of one unit."""
    path = _lock_path(unit)
    while True:
        fd = _lock_file(unit)
        try:
            if not _take(fd, unit, wait):
                os.close(fd)
                return None
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
        except BaseException:
            os.close(fd)
            raise
        if current:
            return fd
        os.close(fd)


def _release(unit: str, fd: int) -> None:
    """Remove the lock file while still holding it, then let go (a waiter on it opens anew)."""
    try:
        os.unlink(_lock_path(unit))
    except FileNotFoundError:
        pass
    os.close(fd)


def _held_by(fd: int) -> str:
    """The note a long-lived holder wrote into the lock file ("" for a command: it writes none)."""
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _take(fd: int, unit: str, wait: bool) -> bool:
    """flock the unit's lock file: True once held; False when `wait` is off and anybody holds
    it; with `wait`, DataplaneError at once when a long-lived holder does (waiting would be for
    ever), else it waits for the command holding it."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                return False
            who = _held_by(fd)
            if who:
                raise DataplaneError(f"{unit} is held for live changes by {who}: its rules change through "
                                     "it (the controller's API), or stop it first") from None
            time.sleep(LOCK_POLL_S)
            continue
        if os.fstat(fd).st_size:                  # a killed holder's note: it holds nothing now
            os.ftruncate(fd, 0)
        return True


@contextmanager
def unit_lock(unit: str, wait: bool = True, held: UnitHold | None = None) -> Iterator[bool]:
    """Hold the unit's lock while its maps and state file change (update, recovery, detach):
    two commands at once would each take the other's journal for a crash's. Yields False when
    `wait` is off and another process holds it. The lock is the kernel's (flock): a killed
    holder releases it. A command waits for another command; a unit held for live changes
    (`hold_unit`: a host agent writing deltas) is refused at once, naming its holder: it keeps
    the unit for as long as it runs, and a whole write beside it would leave it writing deltas
    against tables that no longer serve. `held`: the caller's own hold on the unit (a host agent's
    whole update): nothing to take."""
    if held is not None and held.unit == unit and held.fd >= 0:
        yield True
        return
    fd = _acquire(unit, wait)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        _release(unit, fd)


@dataclass
class UnitHold:
    """A unit held for as long as a process that writes its maps outside commands runs (a host
    agent: its deltas and its own whole updates; a bench's live classifier); `who` is what
    refused commands are told."""
    unit: str
    who: str
    fd: int = -1

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)              # the note first: a waiter then sees a command
            _release(self.unit, self.fd)
            self.fd = -1


def lock_for_command(unit: str) -> UnitHold:
    """The unit's lock as a command takes it (other commands wait for it, none is refused), kept
    until release(): for a command that hands the unit to a child process to finish (attach's
    live state), so no other command slips in between."""
    fd = _acquire(unit, wait=True)
    assert fd is not None                        # waiting: a lock or an error
    return UnitHold(unit, "", fd)


def hold_unit(unit: str, who: str) -> UnitHold:
    """Take the unit's lock until `release()` (a killed holder releases it), after any command
    holding it; DataplaneError when another long-lived holder has it."""
    fd = _acquire(unit, wait=True)
    assert fd is not None                        # waiting: a lock or an error
    try:
        os.pwrite(fd, who.encode() + b"\n", 0)
    except BaseException:
        _release(unit, fd)
        raise
    return UnitHold(unit, who, fd)


def unit_holder(unit: str) -> str:
    """Who holds the unit for live changes now ("" when nobody does)."""
    try:
        fd = os.open(_lock_path(unit), os.O_RDONLY)
    except FileNotFoundError:
        return ""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _held_by(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)             # free: a note left by a killed holder means nothing
        return ""
    finally:
        os.close(fd)


def keys_of(c: MapContents) -> dict[str, list]:
    return {"desc": sorted(c.desc), "xslots": sorted(c.xslots), "leaf": sorted(c.leaf),
            "lpm": sorted(list(k) for k in c.lpm), "updates": sorted(c.updates),
            "labels": sorted([var, level.hex()] for var, level in c.labels),
            "label_bank": c.label_bank, "label_words": c.label_words,
            "ports": list(c.ports),            # leaf bit i -> port (verify reads leaves back with it)
            "port_words": c.port_words}


def contents_from_keys(keys: dict[str, list]) -> MapContents:
    c = MapContents(0)
    c.desc = {s: (0, 0, 0, 0, 0, 0, 0) for s in keys["desc"]}
    c.xslots = {i: (0, 0) for i in keys["xslots"]}
    c.leaf = {s: ((0,), 0, 0, 0) for s in keys["leaf"]}
    c.lpm = {tuple(k): 0 for k in keys["lpm"]}
    c.updates = {s: 0 for s in keys["updates"]}
    c.labels = {(var, bytes.fromhex(level)): 0 for var, level in keys.get("labels", [])}
    c.label_bank, c.label_words = keys.get("label_bank", 0), keys.get("label_words", 0)
    c.port_words = keys.get("port_words", c.port_words)
    return c


def live_state_path(unit: str) -> Path:
    """Where a command leaves its live classifier's parts for the next update (live_state.py)."""
    return attachment_dir(unit) / "live.pickle"


def live_log_path(unit: str) -> Path:
    """The deltas a command wrote after those parts were saved (live_state.py)."""
    return attachment_dir(unit) / "live.log"


def forget_live_state(unit: str) -> None:
    """Any write but a command's live path makes the saved live parts describe other tables:
    gone before that write's first map change (the next update then takes the whole path)."""
    live_state_path(unit).unlink(missing_ok=True)
    live_log_path(unit).unlink(missing_ok=True)


def load_installed(unit: str) -> Installed:
    path = state_path(unit)
    if not path.exists():
        iface, _, app = unit.partition("@")
        if app:
            raise DataplaneError(f"{iface} has no app {app!r} attached (no {path}); `camus-xdp status` lists them")
        if (STATE_ROOT / "dispatch" / f"{iface}.json").exists():
            raise DataplaneError(f"{iface} serves several apps: name one with --app (`camus-xdp status` lists them)")
        raise DataplaneError(f"camus-xdp is not attached to {unit} (no {path}); attach it first")
    return Installed(**json.loads(path.read_text()))


def save(inst: Installed) -> None:
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = state_path(inst.unit).with_suffix(".tmp")
    tmp.write_text(json.dumps(inst.__dict__))
    tmp.replace(state_path(inst.unit))


def installed() -> list[Installed]:
    if not STATE_ROOT.exists():
        return []
    return [Installed(**json.loads(p.read_text())) for p in sorted(STATE_ROOT.glob("*.json"))]


def staging_dir(inst: Installed) -> Path:
    """Where the grown program is pinned until it takes over (beside the unit's pins)."""
    return side_dirs(inst.unit)[0]


def side_dirs(unit: str) -> list[Path]:
    """The pin folders a grow keeps beside the unit's for a moment (a crash may leave them)."""
    return [pin_dir(unit).with_name(unit + suffix) for suffix in ("~grow", "~old")]   # (bpffs: no dots)

