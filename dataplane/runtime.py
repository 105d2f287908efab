"""Attach, update and detach the classifier on an interface; the state that outlives the CLI.

An attached interface (or app, `eth0@dns`, when it serves several: dataplane/apps.py) has its
maps and programs pinned under /sys/fs/bpf/camus/UNIT (so the tail-call table survives the
process that loaded it, and `update`/`stats` reopen the maps) and a state file
/run/camus/UNIT.json saying what is installed (dataplane/installed.py). Updates write the new table set
into the unused bank of every map, flip the root state (one atomic array write: a packet sees
the old tables or the new ones, never a mix), wait out in-flight packets, then remove the old
set. Anything that fails before the flip leaves the old tables serving untouched.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from camus.compiler.backends.ebpf.bitvector import sized_limits
from camus.compiler.backends.ebpf.program import EbpfLimits
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.ebpf.tables import fitted_contents, map_contents
from camus.compiler.backends.ebpf.contents import CapacityError, MapContents
from camus.compiler.compile import Compiled
from camus.compiler.structure.bv_layout import preferred_ports

from . import fanout, netdev
from .dispatch import detach_apps, dispatch_record_path, remove_leftover_apps
from .counting import counted_rules, leaf_ports, rule_lines_of, rule_totals, tables_key
from .faults import GRACE_S, fault
from .grow import grow, recover_grow
from .netlink import (XDP_FLAGS, add_tc, attach_xdp, del_clsact, ifindex, interface_exists, remove_ours_by_name,
                      remove_xdp)
from .teardown import remove_unit
from .maps import CFG_BYPASS_PPS, CFG_REDIRECT, CFG_ROOT, CFG_TC, MapSet
from .installed import (TABLE_CAPACITY, Installed, contents_from_keys, keys_of, save, state_path,
                        attachment_dir, load_installed, pin_dir, unit_lock, unit_name, valid_iface)
from .program import DataplaneError, XdpProgram, require_root

log = logging.getLogger("camus.dataplane")


def _ensure_bpffs() -> None:
    """Pins need the BPF filesystem at /sys/fs/bpf; mount it when the system has not."""
    mounts = Path("/proc/mounts").read_text()
    if any(line.split()[1:3] == ["/sys/fs/bpf", "bpf"] for line in mounts.splitlines()):
        return
    import subprocess
    done = subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], capture_output=True, text=True)
    if done.returncode != 0:
        raise DataplaneError(f"cannot mount the BPF filesystem at /sys/fs/bpf: {done.stderr.strip()}")


def port_specs(ports_path: str | None) -> tuple[list[object] | None, dict]:
    if ports_path is None:
        return None, {}
    from .ports import PortsError, load_ports
    try:
        specs = load_ports(ports_path)
    except PortsError as exc:
        raise DataplaneError(str(exc)) from exc
    return list(specs), specs


def check_free(iface: str, app: str = "") -> None:
    """Whether IFACE can take camus-xdp, found in milliseconds before anything is compiled or
    built: root, the interface, no camus-xdp there already, and no other XDP program (the kernel
    refuses a second one, native or generic, only once the program is built: 12 s later, with
    `Device or resource busy`)."""
    from .bpfinfo import prog_name
    from .netlink import xdp_prog_id
    require_root()
    ifindex(iface)
    unit = unit_name(iface, app)
    if state_path(unit).exists() or pin_dir(unit).exists():
        raise DataplaneError(f"{unit} already has camus-xdp attached: use `update` or `detach`")
    if app:
        return                          # an app's unit: the dispatcher's attach checks the interface
    if dispatch_record_path(iface).exists():
        raise DataplaneError(f"{iface} already has camus-xdp attached (several apps): `detach` it first")
    found = xdp_prog_id(iface)
    if found:
        name = prog_name(found) or "?"
        if name.startswith("camus"):
            raise DataplaneError(f"{iface} runs a camus-xdp program (id {found}, {name}) with no record of it (an "
                                 f"earlier run was killed?): `camus-xdp detach {iface}` removes it")
        raise DataplaneError(f"{iface} already runs an XDP program: {name} (id {found}; `bpftool prog show id "
                             f"{found}` says more). An interface holds one XDP program, native or generic: remove "
                             f"it first (`ip link set dev {iface} xdp off`, or `xdp-loader unload {iface} --all` if "
                             f"xdp-loader loaded it), or attach camus-xdp to another interface")


def attach(iface: str, compiled: Compiled, spec_path: str, rules_path: str, mode: str = "native",
           limits: EbpfLimits | None = None, ports_path: str | None = None,
           xdp_redirect: bool = False, app: str = "", app_id: int = 0, fanout_mode: str = "auto") -> Installed:
    """Load, fill and attach the classifier. With `app`, it is one of several on the interface
    (dataplane/apps.py): loaded and pinned as unit IFACE@APP with its own maps, counters and TC
    filters, not attached itself (the dispatcher tail-calls it); `app_id` keeps its TC copies
    apart from the other apps'. `fanout_mode`: how copies are made (dataplane/fanout.py)."""
    check_free(iface, app)
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
            limits = sized_limits(compiled.pipeline, EbpfLimits(), len(compiled.spec.query_fields))
            limits, contents = fitted_contents(compiled.pipeline, compiled.spec, limits, bits)
        else:
            contents = map_contents(compiled.pipeline, compiled.spec, limits, bits, bank=0)
    except BackendError as exc:
        raise DataplaneError(f"{unit}: {exc}" if app else str(exc)) from exc
    _ensure_bpffs()
    prog = XdpProgram.load(compiled.spec, limits, app_id)
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
            add_tc(iface, prog.bpf.funcs[b"camus_tc_in"].fd, "camus_tc_in", False, clsact)
            for out in sorted({s.iface for s in specs.values() if s.iface}):
                add_tc(out, prog.bpf.funcs[b"camus_tc_out"].fd, "camus_tc_out", True, clsact)
            fan_fd = prog.bpf.funcs[b"camus_fan_out"].fd
            fanout.install(prog.maps, fan_fd, fan)
            if fan.ports:
                fanout.sync_groups(prog.maps, fan_fd, fan, fanout.group_sets(leaf_ports(contents), fan))
        fault("attach:tc")
        if not app:
            attach_xdp(prog.bpf, prog.fn, iface, mode)
            attached = True
        fault("attach:xdp")
        maps = prog.maps
        maps.pin(pin_dir(unit))
        lib = maps.lib
        funcs = prog.bpf.funcs
        for name, fd in (("prog_xdp", prog.fn.fd), ("prog_msg", funcs[b"camus_msg"].fd),
                         ("prog_fan", funcs[b"camus_fan_out"].fd)):
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
                         tables_key(compiled.options, lines),
                         list(bits) if bits is not None else None, app=app,
                         table_capacity={k: getattr(limits, k) for k in TABLE_CAPACITY
                                         if getattr(limits, k) != getattr(EbpfLimits(), k)},
                         fanout=fan.describe(list(bits)) if specs and bits else "",
                         fan_entries=[list(e) for e in fan.ports], fan_min_group=fan.min_group,
                         rps=rps_off, attached_at=round(time.time(), 1))
        fault("attach:pinned")
        save(inst)
        return inst
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


def detach(iface: str) -> str:
    """Remove everything attach installed; returns a note when there was less to remove."""
    require_root()
    if "@" in iface:
        raise DataplaneError(f"apps are detached with their interface: `camus-xdp detach {iface.partition('@')[0]}`; "
                             "to stop one app delivering, `update` it with an empty rules file")
    with unit_lock(valid_iface(iface)):
        return _detach(iface)


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


@dataclass
class UpdateReport:
    added: list[str]
    removed: list[str]
    old_entries: int
    new_entries: int
    seconds: float
    written: bool = True             # False: the same tables were live, nothing was written
    grown: bool = False              # the rules outgrew the program: a larger one replaced it (grow.py)


def recover(inst: Installed, maps: MapSet) -> str:
    """Finish or undo an update a crash interrupted, from the journal and the live root (the
    pinned maps are the truth): flipped -> the new set is live and the old one is removed;
    not flipped -> whatever was written of the new set is removed. Returns what it did."""
    p = inst.pending
    if not p:
        return ""
    live = maps.cfg(CFG_ROOT)
    if live == p["root"]:
        maps.remove(contents_from_keys(inst.keys))
        inst.bank, inst.root, inst.keys = p["bank"], p["root"], p["keys"]
        inst.rules, inst.rule_lines = p["rules"], p["rule_lines"]
        inst.counted, inst.leaf_rules, inst.rule_base = p["counted"], p["leaf_rules"], {}
        # the key says what the live tables were compiled from: without it (a journal written
        # before keys were journaled) no later update may take the live tables as unchanged
        inst.tables_key = p.get("tables_key", "")
        note = f"{inst.iface}: finished an interrupted update (its tables were live)"
    else:
        maps.remove(contents_from_keys(p["keys"]))
        note = f"{inst.iface}: undid an interrupted update (the old tables kept serving)"
    inst.pending = None
    save(inst)
    return note


def _sync_fan_groups(inst: Installed, maps: MapSet, contents: MapContents) -> None:
    """The new rule set's port sets get their broadcast groups; the old ones' go (fanout.py)."""
    if not inst.fan_entries:
        return
    fd = maps.lib.bpf_obj_get(str(inst.pins / "prog_fan").encode())
    if fd < 0:
        return                                # attached before groups existed: the devmap of all serves
    try:
        plan = fanout.FanPlan(tuple((int(b), int(i)) for b, i in inst.fan_entries), 0, (), inst.fan_min_group)
        fanout.sync_groups(maps, fd, plan, fanout.group_sets(leaf_ports(contents), plan))
    except OSError as exc:
        # Groups only save copies: without one a packet goes by the devmap of all or by TC. An
        # update from another network namespace (an edge broker's) cannot name the interfaces.
        log.warning("%s: broadcast groups not updated (%s); packets without one go by TC", inst.unit, exc)
    finally:
        os.close(fd)


def recover_unit(unit: str) -> str:
    """Finish or undo what a crashed update or grow left journaled on `unit`, so what the state
    file says is what serves (`status` and `stats` call it). Returns what it did; "" when there
    was nothing to do, or another command is changing the unit right now (its journal is its
    own, not a crash's)."""
    if not load_installed(unit).pending:
        return ""
    with unit_lock(unit, wait=False) as held:
        if not held:
            return ""
        inst = load_installed(unit)
        note = recover_grow(inst)
        if inst.pending:
            maps = MapSet.from_pins(inst.pins)
            try:
                note = recover(inst, maps)
            finally:
                maps.close()
        return note


def live_root(unit: str) -> int:
    """The root state the unit's maps serve now (the truth `status` checks the state file by)."""
    maps = MapSet.from_pins(load_installed(unit).pins)
    try:
        return maps.cfg(CFG_ROOT)
    finally:
        maps.close()


def update(iface: str, compiled: Compiled, rules_path: str, limits: EbpfLimits | None = None) -> UpdateReport:
    """Swap the rules of an attached interface atomically (see the module docstring). The
    intent is journaled in the state file before the first write, so a crash at any point
    leaves something `recover` can finish or undo. One update of a unit at a time."""
    require_root()
    load_installed(iface)                     # a clear error before any lock file is made
    with unit_lock(iface):
        return _update(iface, compiled, rules_path, limits)


def _update(iface: str, compiled: Compiled, rules_path: str, limits: EbpfLimits | None) -> UpdateReport:
    inst = load_installed(iface)
    t0 = time.perf_counter()
    bits = inst.port_bits if inst.port_bits is not None else port_specs(inst.ports)[0]
    recover_grow(inst)
    maps = MapSet.from_pins(inst.pins)
    try:
        recover(inst, maps)
        lines = rule_lines_of(compiled)
        key = tables_key(compiled.options, lines)
        # a refresh writes nothing, but only when the maps serve what the state file records:
        # another writer (the agent's live deltas, saved now and then) may have moved the root
        if key == inst.tables_key and inst.pending is None and maps.cfg(CFG_ROOT) == inst.root:
            inst.rules = str(Path(rules_path).resolve())
            save(inst)
            n = len(inst.keys["desc"])
            return UpdateReport([], [], n, n, time.perf_counter() - t0, written=False)
        new_bank = 1 - inst.bank
        try:     # capacity and port checks: before anything live is touched
            contents = map_contents(compiled.pipeline, compiled.spec, limits or inst.limits(), bits, bank=new_bank)
        except CapacityError as exc:
            if limits is not None:
                raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
            log.info("%s: the rules outgrow the program (%s); growing it", inst.unit, exc)
            maps.close()
            old_lines, old_n = inst.rule_lines, len(inst.keys["desc"])
            contents = grow(inst, compiled, rules_path, bits)
            return UpdateReport(sorted(set(inst.rule_lines) - set(old_lines)),
                                sorted(set(old_lines) - set(inst.rule_lines)), old_n, len(contents.desc),
                                time.perf_counter() - t0, grown=True)
        except BackendError as exc:
            raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
        counted, leaf_rules = counted_rules(compiled, contents)
        inst.pending = {"bank": new_bank, "root": contents.root, "keys": keys_of(contents),
                        "rules": str(Path(rules_path).resolve()), "rule_lines": lines,
                        "counted": counted, "leaf_rules": leaf_rules, "tables_key": key}
        save(inst)
        fault("update:journaled")
        maps.clear_leaf_hits(sorted(contents.leaf))
        maps.write(contents)                   # ends with the root flip
        fault("update:flipped")
        time.sleep(GRACE_S)
        old = rule_totals(maps, inst)         # the old tables are quiet now: their final counts
        carried = {text: old[i] + inst.rule_base.get(text, 0) for i, text in enumerate(inst.counted)}
        maps.remove(contents_from_keys(inst.keys))
        _sync_fan_groups(inst, maps, contents)
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


def stats(iface: str) -> dict[str, int]:
    """Counters of the classifier, plus `port <name>` = copies sent to each forwarding port."""
    inst = load_installed(iface)
    maps = MapSet.from_pins(inst.pins)
    try:
        base = inst.stats_base                       # counts of the programs grown out of
        out = {name: n + base.get(name, 0) for name, n in maps.stats().items()}
        bits = inst.port_bits if inst.port_bits is not None else port_specs(inst.ports)[0]
        if bits:
            for i, (port, n) in enumerate(zip(bits, maps.port_stats(len(bits)))):
                out[f"port {port}"] = n + base.get(f"port#{i}", 0)
        return out
    finally:
        maps.close()


def set_bypass_pps(iface: str, pps: int) -> None:
    """Overload bypass (bpf/camus_xdp.c over_budget): above `pps` packets/s per CPU, 0 = never."""
    maps = MapSet.from_pins(load_installed(iface).pins)
    try:
        maps.cfg(CFG_BYPASS_PPS, pps)
    finally:
        maps.close()
