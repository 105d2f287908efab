"""One attachment of camus-xdp: an interface (or one app on an interface serving several) with
its state file, update journal, pinned maps and programs, owned by one object.

`Attachment.attach` loads, fills and attaches the classifier; `update` swaps the rules (and
`grow`s the program when they outgrow it); `recover` finishes or undoes what a crash left
journaled; `detach` removes everything; `stats`, `live_root` and `set_bypass_pps` read and set
the live maps. Every method reads the state file afresh: it is shared with other processes
(the agent's live deltas, a second `camus-xdp` command), which change the unit under its lock.

An attached unit has its maps and programs pinned under /sys/fs/bpf/camus/UNIT (so the tail-call
table survives the process that loaded it, and later commands reopen the maps) and a state file
/run/camus/UNIT.json saying what is installed (dataplane/installed.py). Updates write the new
table set into the unused bank of every map, flip the root state (one atomic array write: a
packet sees the old tables or the new ones, never a mix), wait out in-flight packets, then
remove the old set. Anything that fails before the flip leaves the old tables serving untouched.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from camus.compiler.backends.ebpf.bitvector import sized_limits
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.ebpf.tables import fitted_contents, map_contents
from camus.compiler.backends.ebpf.contents import CapacityError
from camus.compiler.compiled import Compiled
from camus.compiler.incremental import takes_live_path
from camus.compiler.structure.bv_layout import preferred_ports

from . import fanout, netdev
from .counting import compiled_key, counted_rules, leaf_ports, rule_lines_of, rule_totals
from .dispatch import detach_apps, dispatch_record_path, remove_leftover_apps
from .faults import GRACE_S, fault
from .grow import grow
from .installed import (TABLE_CAPACITY, Installed, UnitHold, attachment_dir, contents_from_keys, forget_live_state,
                        keys_of, load_installed, pin_dir, save, state_path, unit_lock, unit_name, valid_iface)
from .journal import recover_unit, settle
from .maps import CFG_BYPASS_PPS, CFG_REDIRECT, CFG_ROOT, CFG_TC, MapSet
from .netlink import XDP_FLAGS, add_tc, attach_xdp, del_clsact, interface_exists, remove_ours_by_name, remove_xdp
from .preflight import check_free, ensure_bpffs, port_specs
from .program import DataplaneError, XdpProgram, require_root
from .teardown import remove_unit

log = logging.getLogger("camus.dataplane")

Progress = Callable[[str], None]      # told each step that takes seconds (the CLI prints it on stderr)


def silent(_step: str) -> None:
    pass


@dataclass
class UpdateReport:
    added: list[str]
    removed: list[str]
    old_entries: int
    new_entries: int
    seconds: float
    written: bool = True             # False: the same tables were live, nothing was written
    grown: bool = False              # the rules outgrew the program: a larger one replaced it (grow.py)
    # how the tables were written: "delta" (the changed states, in the live bank: live_state.py),
    # "live" (a whole set through the live path, leaving its state for the next delta), "compile"
    # (a whole compile into the other bank)
    path: str = "compile"


def _holds(inst: Installed, maps: MapSet, key: str) -> bool:
    """Whether the live tables are the ones rules with tables key `key` compile to. A refresh
    writes nothing, but only when the maps serve what the state file records: another writer
    (the agent's live deltas, saved now and then) may have moved the root."""
    return key == inst.tables_key and inst.pending is None and maps.cfg(CFG_ROOT) == inst.root


def _refreshed(inst: Installed, rules_path: str, t0: float) -> "UpdateReport":
    """An update that found its rules live: the rules file recorded, nothing written."""
    inst.rules = str(Path(rules_path).resolve())
    save(inst)
    n = len(inst.keys["desc"])
    return UpdateReport([], [], n, n, time.perf_counter() - t0, written=False)


class Attachment:
    """The unit `eth0` (or `eth0@app`). Constructing one touches nothing: the methods say
    whether it is attached (DataplaneError when not)."""

    def __init__(self, unit: str) -> None:
        self.unit = unit

    def __repr__(self) -> str:
        return f"Attachment({self.unit!r})"

    @property
    def installed(self) -> Installed:
        """What the state file says is installed (read afresh)."""
        return load_installed(self.unit)

    def _bits(self, inst: Installed) -> list[object] | None:
        return inst.port_bits if inst.port_bits is not None else port_specs(inst.ports)[0]

    @classmethod
    def attach(cls, iface: str, compiled: Compiled, spec_path: str, rules_path: str, mode: str = "native",
               limits: EbpfLimits | None = None, ports_path: str | None = None,
               xdp_redirect: bool = False, app: str = "", app_id: int = 0,
               fanout_mode: str = "auto", progress: Progress = silent) -> Attachment:
        """Load, fill and attach the classifier; nothing is left installed when a step fails.
        With `app`, it is one of several on the interface (dataplane/apps.py): loaded and pinned
        as unit IFACE@APP with its own maps, counters and TC filters, not attached itself (the
        dispatcher tail-calls it); `app_id` keeps its TC copies apart from the other apps'.
        `fanout_mode`: how copies are made (dataplane/fanout.py). `progress` hears of the
        program's build (BCC: seconds, more under load) before it starts and when it is done."""
        check_free(iface, app, mode)
        unit = unit_name(iface, app)
        shutil.rmtree(attachment_dir(unit), ignore_errors=True)
        bits, specs = port_specs(ports_path)
        if bits is not None:        # port bits are ours to number (fixed from here on): the stage's port columns first
            bits = preferred_ports(compiled.pipeline.bitvector, bits)
        # generic XDP hands a broadcast's copies to the egress program as skbs without the metadata
        # naming the packet's ring slot: copies by TC there
        fan = (fanout.plan(list(bits), specs, fanout_mode if mode == "native" else "tc") if specs and bits
               else fanout.FanPlan((), 0))
        try:
            if limits is None:     # map capacity from the rule set, with headroom for updates
                limits = sized_limits(compiled.pipeline, EbpfLimits(), len(compiled.spec.query_fields),
                                      len(bits) if bits is not None else None)
                limits, contents = fitted_contents(compiled.pipeline, compiled.spec, limits, bits)
            else:
                contents = map_contents(compiled.pipeline, compiled.spec, limits, bits, bank=0)
        except BackendError as exc:
            raise DataplaneError(f"{unit}: {exc}" if app else str(exc)) from exc
        ensure_bpffs()
        t_build = time.perf_counter()
        prog = XdpProgram.load(compiled.spec, limits, app_id, with_tc=bool(specs),
                               progress=lambda m: progress(f"{unit}: {m}"))
        how = "loaded from the program cache" if prog.cached else "built and loaded"
        progress(f"{unit}: {how} in {time.perf_counter() - t_build:.1f} s; filling the maps and attaching")
        attached = False
        clsact: list[str] = []
        rps_off: dict[str, str] = {}
        try:
            prog.write(contents)
            if specs:
                prog.maps.write_ports(bits, specs)       # type: ignore[arg-type]
                prog.maps.cfg(CFG_REDIRECT, int(xdp_redirect))
                prog.maps.cfg(CFG_TC, 1)
                rps_off = netdev.disable_rps(iface)      # TC must run where XDP classified (netdev.py)
                add_tc(iface, prog.fd("camus_tc_in"), "camus_tc_in", False, clsact)
                for out in sorted({s.iface for s in specs.values() if s.iface}):
                    add_tc(out, prog.fd("camus_tc_out"), "camus_tc_out", True, clsact)
                fan_fd = prog.fd("camus_fan_out")
                fanout.install(prog.maps, fan_fd, fan)
                if fan.ports:
                    fanout.sync_groups(prog.maps, fan_fd, fan, fanout.group_sets(leaf_ports(contents), fan))
            fault("attach:tc")
            if not app:
                attach_xdp(prog.fn.fd, iface, mode)
                attached = True
            fault("attach:xdp")
            maps = prog.maps
            maps.pin(pin_dir(unit))
            lib = maps.lib
            for name, fd in (("prog_xdp", prog.fn.fd), ("prog_msg", prog.fd("camus_msg")),
                             ("prog_fan", prog.fd("camus_fan_out"))):
                if lib.bpf_obj_pin(fd, str(pin_dir(unit) / name).encode()) < 0:
                    raise DataplaneError(f"could not pin {name} under {pin_dir(unit)}")
            maps.clear_leaf_hits(sorted(contents.leaf))
            counted, leaf_rules = counted_rules(compiled, contents)
            lines = rule_lines_of(compiled)
            inst = Installed(iface, mode, str(Path(spec_path).resolve()), str(Path(rules_path).resolve()),
                             0, contents.root, lines, keys_of(contents),
                             str(Path(ports_path).resolve()) if ports_path else None, clsact, counted, leaf_rules,
                             {}, compiled.options.count_rules,
                             [limits.bv_words, limits.max_bv_bitmaps, limits.max_bv_segs, limits.bv_columns],
                             compiled_key(compiled),
                             list(bits) if bits is not None else None, app=app,
                             table_capacity={k: getattr(limits, k) for k in TABLE_CAPACITY
                                             if getattr(limits, k) != getattr(EbpfLimits(), k)},
                             fanout=fan.describe(list(bits)) if specs and bits else "",
                             fan_entries=[list(e) for e in fan.ports], fan_min_group=fan.min_group,
                             rps=rps_off, attached_at=round(time.time(), 1), live_path=takes_live_path(compiled))
            fault("attach:pinned")
            save(inst)
            return cls(unit)
        except BaseException as exc:
            if attached:                                  # nothing half-installed after a failure
                remove_xdp(iface, mode)
            del_clsact(clsact)
            netdev.restore_rps(iface, rps_off)
            shutil.rmtree(pin_dir(unit), ignore_errors=True)
            state_path(unit).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise DataplaneError(f"attach failed, nothing was left installed: {exc}") from exc
            raise
        finally:
            prog.close()                                  # pins and the attachment keep it alive


    def detach(self) -> str:
        """Remove everything attach installed (an interface's apps with it); returns a note when
        there was less to remove (a crash's leftovers, an interface that went away)."""
        require_root()
        if "@" in self.unit:
            raise DataplaneError(f"apps are detached with their interface: `camus-xdp detach "
                                 f"{self.unit.partition('@')[0]}`; to stop one app delivering, `update` it with "
                                 "an empty rules file")
        with unit_lock(valid_iface(self.unit)):
            return self._detach(self.unit)

    @staticmethod
    def _detach(iface: str) -> str:
        if dispatch_record_path(iface).exists():
            return detach_apps(iface)
        if not state_path(iface).exists() and not pin_dir(iface).exists():
            # A crash between attaching XDP and pinning: nothing recorded, but our program (and
            # TC filters) may be on the interface. Found by program name, removed; nothing else.
            removed = remove_ours_by_name(iface) if interface_exists(iface) else []
            if remove_leftover_apps(iface):
                removed.append("apps of an interrupted attach")
            if removed:
                return f"{iface}: no state file or pins; removed camus-xdp's {', '.join(removed)} found on it"
            raise DataplaneError(f"camus-xdp is not attached to {iface}")
        if not state_path(iface).exists() and pin_dir(iface).exists():
            # Pins without a state file (/run was cleared, or a crash before it was written):
            # remove what is left, whatever the mode, our TC filters included.
            if interface_exists(iface):
                for mode in XDP_FLAGS:
                    try:
                        remove_xdp(iface, mode)
                    except Exception:
                        pass
                remove_ours_by_name(iface)
            remove_leftover_apps(iface)
            shutil.rmtree(pin_dir(iface), ignore_errors=True)
            shutil.rmtree(attachment_dir(iface), ignore_errors=True)
            return f"{iface}: no state file; removed the leftover pins and XDP program"
        inst = load_installed(iface)
        note = ""
        if interface_exists(iface):
            try:
                remove_xdp(iface, inst.mode)
            except Exception as exc:
                raise DataplaneError(f"could not remove XDP from {iface}: {exc}") from exc
        else:     # the attachment went with the interface; what is left is ours to clean up
            note = f"{iface} no longer exists; removed its pinned maps and state"
        fault("detach:xdp")
        remove_unit(inst)
        return note


    def recover(self) -> str:
        """Finish or undo what a crashed update or grow left journaled (dataplane/journal.py)."""
        return recover_unit(self.unit)

    def live_root(self) -> int:
        """The root state the unit's maps serve now (the truth `status` checks the state file by)."""
        maps = MapSet.from_pins(self.installed.pins)
        try:
            return maps.cfg(CFG_ROOT)
        finally:
            maps.close()

    def update(self, compiled: Compiled, rules_path: str, limits: EbpfLimits | None = None,
               progress: Progress = silent, hold: UnitHold | None = None) -> UpdateReport:
        """Swap the rules atomically (see the module docstring), growing the program when they
        outgrow it and `limits` is not given. The intent is journaled in the state file before
        the first write, so a crash at any point leaves something `recover` can finish or undo.
        One update of a unit at a time (`hold`: the caller holds the unit for as long as it runs,
        a host agent)."""
        require_root()
        load_installed(self.unit)                 # a clear error before any lock file is made
        with unit_lock(self.unit, held=hold):
            return self._update(compiled, rules_path, limits, progress)

    def already_live(self, key: str, rules_path: str) -> UpdateReport | None:
        """The update to rules whose tables key (counting.parsed_key) is `key`, when the live tables
        hold them already: nothing to write, so it is done (the rules file recorded) without
        compiling them; None when they must be compiled and `update` run. Commands wait for each
        other (and a held unit is refused) as for `update`."""
        require_root()
        load_installed(self.unit)
        with unit_lock(self.unit):
            inst = load_installed(self.unit)
            t0 = time.perf_counter()
            settle(inst)
            maps = MapSet.from_pins(inst.pins)
            try:
                if not _holds(inst, maps, key):
                    return None
            finally:
                maps.close()
            return _refreshed(inst, rules_path, t0)

    def grow(self, compiled: Compiled, rules_path: str, progress: Progress = silent) -> UpdateReport:
        """Replace the program by one sized for `compiled` and serve its rules, make before break
        (dataplane/grow.py); `update` does this itself when the rules outgrow the program."""
        require_root()
        load_installed(self.unit)
        with unit_lock(self.unit):
            inst = load_installed(self.unit)
            settle(inst)
            return self._grow(inst, compiled, rules_path, time.perf_counter(), progress)

    def _grow(self, inst: Installed, compiled: Compiled, rules_path: str, t0: float,
              progress: Progress) -> UpdateReport:
        old_lines, old_n = inst.rule_lines, len(inst.keys["desc"])
        progress(f"{self.unit}: building a larger XDP program for these rules, beside the serving one "
                 "(BCC compiles it: seconds)")
        forget_live_state(inst.unit)
        contents = grow(inst, compiled, rules_path, self._bits(inst))
        return UpdateReport(sorted(set(inst.rule_lines) - set(old_lines)), sorted(set(old_lines) - set(inst.rule_lines)),
                            old_n, len(contents.desc), time.perf_counter() - t0, grown=True)

    def _update(self, compiled: Compiled, rules_path: str, limits: EbpfLimits | None,
                progress: Progress) -> UpdateReport:
        inst = load_installed(self.unit)
        t0 = time.perf_counter()
        bits = self._bits(inst)
        settle(inst)
        maps = MapSet.from_pins(inst.pins)
        try:
            lines = rule_lines_of(compiled)
            key = compiled_key(compiled)
            if _holds(inst, maps, key):
                return _refreshed(inst, rules_path, t0)
            new_bank = 1 - inst.bank
            try:     # capacity and port checks: before anything live is touched
                contents = map_contents(compiled.pipeline, compiled.spec, limits or inst.limits(), bits, bank=new_bank)
            except CapacityError as exc:
                if limits is not None:
                    raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
                log.info("%s: the rules outgrow the program (%s); growing it", inst.unit, exc)
                maps.close()
                return self._grow(inst, compiled, rules_path, t0, progress)
            except BackendError as exc:
                raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
            counted, leaf_rules = counted_rules(compiled, contents)
            inst.live_path = takes_live_path(compiled)
            inst.pending = {"bank": new_bank, "root": contents.root, "keys": keys_of(contents),
                            "rules": str(Path(rules_path).resolve()), "rule_lines": lines,
                            "counted": counted, "leaf_rules": leaf_rules, "tables_key": key}
            forget_live_state(inst.unit)          # what a command's live path saved describes the old set
            save(inst)
            fault("update:journaled")
            maps.clear_leaf_hits(sorted(contents.leaf))
            maps.write(contents)                   # ends with the root flip
            fault("update:flipped")
            time.sleep(GRACE_S)
            old = rule_totals(maps, inst)         # the old tables are quiet now: their final counts
            carried = {text: old[i] + inst.rule_base.get(text, 0) for i, text in enumerate(inst.counted)}
            maps.remove(contents_from_keys(inst.keys))
            sync_fan_groups(inst, maps, leaf_ports(contents))
            fault("update:cleaned")
        finally:
            maps.close()
        inst.counted, inst.leaf_rules = counted, leaf_rules
        inst.rule_base = {text: carried[text] for text in counted if text in carried}
        report = UpdateReport(sorted(set(lines) - set(inst.rule_lines)), sorted(set(inst.rule_lines) - set(lines)),
                              len(inst.keys["desc"]), len(contents.desc), time.perf_counter() - t0)
        inst.bank, inst.root, inst.keys, inst.rule_lines = new_bank, contents.root, keys_of(contents), lines
        inst.tables_key = key
        inst.rules = str(Path(rules_path).resolve())
        inst.pending = None
        save(inst)
        return report


    def stats(self) -> dict[str, int]:
        """Counters of the classifier, plus `port <name>` = copies sent to each forwarding port."""
        inst = load_installed(self.unit)
        maps = MapSet.from_pins(inst.pins)
        try:
            base = inst.stats_base                       # counts of the programs grown out of
            out = {name: n + base.get(name, 0) for name, n in maps.stats().items()}
            bits = self._bits(inst)
            if bits:
                for i, (port, n) in enumerate(zip(bits, maps.port_stats(len(bits)))):
                    out[f"port {port}"] = n + base.get(f"port#{i}", 0)
            return out
        finally:
            maps.close()


    def set_bypass_pps(self, pps: int) -> None:
        """Overload bypass (bpf/camus_xdp.c over_budget): above `pps` packets/s per CPU, 0 = never."""
        maps = MapSet.from_pins(self.installed.pins)
        try:
            maps.cfg(CFG_BYPASS_PPS, pps)
        finally:
            maps.close()


def sync_fan_groups(inst: Installed, maps: MapSet, port_sets: list[tuple[int, ...]]) -> None:
    """The new rule set's port sets get their broadcast groups; the old ones' go (fanout.py)."""
    if not inst.fan_entries:
        return
    fd = maps.lib.bpf_obj_get(str(inst.pins / "prog_fan").encode())
    if fd < 0:
        return                                # attached before groups existed: the devmap of all serves
    try:
        plan = fanout.FanPlan(tuple((int(b), int(i)) for b, i in inst.fan_entries), 0, (), inst.fan_min_group)
        fanout.sync_groups(maps, fd, plan, fanout.group_sets(port_sets, plan))
    except OSError as exc:
        # Groups only save copies: without one a packet goes by the devmap of all or by TC. An
        # update from another network namespace (an edge broker's) cannot name the interfaces.
        log.warning("%s: broadcast groups not updated (%s); packets without one go by TC", inst.unit, exc)
    finally:
        os.close(fd)
