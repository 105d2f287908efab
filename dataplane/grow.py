"""Growing an attachment's program when an update outgrows it, make before break.

A loaded program's maps and loop bounds are fixed (attach sizes them from its rules, with room
to spare): a rule set past them used to be refused until a detach and attach, a gap in
filtering. `update` now grows instead: it loads a program sized for the new rules next to the
old one, fills its maps (bank 0), copies what the old one was told since attach (ports, fan-out,
the overload and recording settings, state variables), adds its TC filters before the old ones
(its metadata carries another generation, so each TC filter takes the packets its own XDP
program classified and passes on the others), swaps the XDP program in one atomic step (the
interface's hook, or the dispatcher's slot when the interface serves several apps), waits out
packets in flight, then removes the old TC filters and pins. Counters carry over: the old
program's final counts become the state file's base.

Until the swap nothing the old program uses is touched: a failure there removes the new program
and the old one keeps serving. The swap itself is journaled in the state file; a crash after it
is finished by the next command (`recover_grow`).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import time
from dataclasses import fields, replace
from pathlib import Path

from camus.compiler.backends.ebpf.bitvector import sized_limits
from camus.compiler.backends.ebpf.program import EbpfLimits, max_bv_columns_for, max_bv_segs_for
from camus.compiler.backends.ebpf.tables import fitted_contents
from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.backends.emit import BackendError
from camus.compiler.compile import Compiled
from camus.compiler.incremental import takes_live_path

from . import fanout
from .counting import compiled_key, counted_rules, leaf_ports, rule_lines_of, rule_totals
from .dispatch import load_record
from .faults import GRACE_S, fault
from .installed import TABLE_CAPACITY, Installed, keys_of, pin_dir, save, side_dirs, staging_dir
from .bpfinfo import MapInfo, map_id, obj_info, pinned_id, prog_map_ids
from .netlink import add_tc, attach_xdp, del_tc_filter, tc_filters, xdp_prog_id
from .maps import CFG_BYPASS_PPS, CFG_MALFORMED, CFG_RECORD, CFG_REDIRECT, CFG_TC, MapSet
from .program import DataplaneError, XdpProgram
from .testrun import libbpf

COPIED_CFG = (CFG_MALFORMED, CFG_RECORD, CFG_REDIRECT, CFG_TC, CFG_BYPASS_PPS)   # what commands set
COPIED_ARRAYS = ("ports_cfg", "svars", "overload")          # written since attach, kept as they are


def copy_array(old: MapSet, new: MapSet, name: str, entries: int | None = None) -> None:
    """Entries 0..n-1 of array map `name`, byte for byte (per-CPU arrays: every CPU's value)."""
    info = obj_info(old.fds[name], MapInfo())
    per_cpu = info.type in (6,)                      # BPF_MAP_TYPE_PERCPU_ARRAY
    size = ((info.value_size + 7) // 8 * 8) * MapSet._ncpu() if per_cpu else info.value_size
    buf = ctypes.create_string_buffer(size)
    for i in range(min(info.max_entries, entries if entries is not None else info.max_entries)):
        if old.lookup(name, ctypes.c_uint32(i), buf):
            new.update(name, ctypes.c_uint32(i), buf)


def our_tc_filters(ifnames: list[str], ports_id: int) -> list[tuple[str, str, int]]:
    """(interface, direction, pref) of each camus TC filter whose program uses the map `ports_id`
    (a program's ports_cfg, which its TC programs in and out both read): one unit's filters
    among those of other apps sharing the interfaces."""
    return [(ifname, direction, pref) for ifname in ifnames for direction, pref, prog in tc_filters(ifname)
            if ports_id in prog_map_ids(prog)]


def _del_filters(found: list[tuple[str, str, int]]) -> None:
    for ifname, direction, pref in found:
        del_tc_filter(ifname, direction, pref)


def grown_limits(compiled: Compiled, inst: Installed) -> EbpfLimits:
    """Room for `compiled` as attach gives it, never less than the program had."""
    nf = len(compiled.spec.query_fields)
    want = sized_limits(compiled.pipeline, EbpfLimits(), nf, len(inst.port_bits) if inst.port_bits else None)
    have = inst.limits()
    got = replace(want, **{f.name: max(getattr(want, f.name), getattr(have, f.name)) for f in fields(EbpfLimits)
                           if isinstance(getattr(want, f.name), int) and not isinstance(getattr(want, f.name), bool)})
    # segments and port columns share the verifier's budget: the new rule set's needs first
    columns = min(got.bv_columns, max_bv_columns_for(nf, got.port_words)) if want.bv_columns else 0
    return replace(got, bv_columns=columns,
                   max_bv_segs=min(got.max_bv_segs, max_bv_segs_for(nf, columns, got.port_words)))


def tc_interfaces(inst: Installed) -> list[str]:
    """Where the unit has TC filters: the broker interface and its ports' interfaces."""
    from .ports import load_ports
    if not inst.ports:
        return []
    return sorted({inst.iface} | {s.iface for s in load_ports(inst.ports).values() if s.iface})


def attached_prog_id(inst: Installed) -> int:
    """The id of the program that classifies the unit's frames now: the interface's XDP
    program, or for one of several apps its slot in the pinned dispatcher."""
    if inst.app:
        slot = load_record(inst.iface)["apps"].index(inst.app)
        lib = libbpf()
        fd = lib.bpf_obj_get(str(pin_dir(inst.iface) / "dispatch_progs").encode())
        if fd < 0:
            return 0
        try:
            out = ctypes.c_uint32()
            ok = lib.bpf_map_lookup_elem(fd, ctypes.byref(ctypes.c_uint32(slot)), ctypes.byref(out)) == 0
            return out.value if ok else 0                 # a program array's lookup gives the id
        finally:
            os.close(fd)
    return xdp_prog_id(inst.iface)


def _swap_xdp(inst: Installed, prog: XdpProgram, app_id: int) -> None:
    """The new program takes the unit's frames in one step: the hook replaced (the kernel swaps
    the program atomically), or the dispatcher's slot rewritten."""
    if inst.app:
        lib = libbpf()
        fd = lib.bpf_obj_get(str(pin_dir(inst.iface) / "dispatch_progs").encode())
        if fd < 0:
            raise DataplaneError(f"cannot open the dispatcher of {inst.iface}")
        try:
            rc = lib.bpf_map_update_elem(fd, ctypes.byref(ctypes.c_uint32(app_id)),
                                         ctypes.byref(ctypes.c_uint32(prog.fn.fd)), 0)
            if rc != 0:
                raise DataplaneError(f"cannot point the dispatcher at the grown program: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)
        return
    try:
        attach_xdp(prog.fn.fd, inst.iface, inst.mode, replace=True)
    except DataplaneError as exc:
        raise DataplaneError(f"could not replace the XDP program on {inst.iface}: {exc}") from exc


def _finish(inst: Installed, staging: Path, old_ports: int) -> None:
    """After the swap: the old TC filters and pins go, the grown program's pins take their place."""
    _del_filters(our_tc_filters(sorted({i for i in inst.clsact or []} | {inst.iface} | set(_port_ifaces(inst))),
                                old_ports))
    old_pins = side_dirs(inst.unit)[1]
    shutil.rmtree(old_pins, ignore_errors=True)
    if pin_dir(inst.unit).exists():
        pin_dir(inst.unit).rename(old_pins)
    staging.rename(pin_dir(inst.unit))
    shutil.rmtree(old_pins, ignore_errors=True)


def _port_ifaces(inst: Installed) -> list[str]:
    try:
        return tc_interfaces(inst)
    except Exception:                       # the ports file is gone or changed: the broker's only
        return [inst.iface]


def recover_grow(inst: Installed) -> str:
    """Finish or undo a grow a crash interrupted: finished when the grown program classifies the
    frames (its pins and filters take over), else undone (they go, the old program serves)."""
    p = inst.pending
    if not p or "grow" not in p:
        return ""
    staging = Path(p["grow"])
    attached = attached_prog_id(inst)
    if staging.exists() and attached and attached == pinned_id(staging, "prog_xdp"):
        _finish(inst, staging, p["old_ports"])
        for key in ("bank", "root", "keys", "rules", "rule_lines", "counted", "leaf_rules", "bv_capacity",
                    "table_capacity", "generation"):
            setattr(inst, key, p[key])
        inst.rule_base, inst.stats_base = {}, {}
        inst.tables_key = p.get("tables_key", "")     # what the grown program's tables came from
        note = f"{inst.unit}: finished an interrupted grow (the grown program was attached)"
    else:
        if staging.exists():
            _del_filters(our_tc_filters(_port_ifaces(inst), pinned_id(staging, "ports_cfg")))
            shutil.rmtree(staging, ignore_errors=True)
        note = f"{inst.unit}: undid an interrupted grow (the old program kept serving)"
    inst.pending = None
    save(inst)
    return note


def grow(inst: Installed, compiled: Compiled, rules_path: str, bits: list[object] | None) -> MapContents:
    """Replace the unit's program by one sized for `compiled` (see the module docstring).
    Returns the new tables; `inst` is updated and saved. Raises DataplaneError, the old
    program serving, when nothing would hold the rules or a step before the swap fails."""
    try:
        limits, contents = fitted_contents(compiled.pipeline, compiled.spec, grown_limits(compiled, inst), bits)
    except BackendError as exc:
        raise DataplaneError(f"update rejected, the old tables keep serving: {exc}") from exc
    app_id = 0
    if inst.app:
        app_id = load_record(inst.iface)["apps"].index(inst.app)
    generation = (inst.generation + 1) & 0xFF
    staging = staging_dir(inst)
    shutil.rmtree(staging, ignore_errors=True)
    old = MapSet.from_pins(inst.pins)
    old_ports = map_id(old.fds["ports_cfg"])
    prog = XdpProgram.load(compiled.spec, limits, app_id, generation, with_tc=inst.ports is not None)
    swapped = False
    try:
        new = prog.maps
        prog.write(contents)
        for idx in COPIED_CFG:
            new.cfg(idx, old.cfg(idx))
        n_ports = len(bits or [])
        copy_array(old, new, "ports_cfg", n_ports)
        copy_array(old, new, "tx_ports", n_ports)
        copy_array(old, new, "svars")
        copy_array(old, new, "overload")
        fan_fd = prog.fd("camus_fan_out")
        if inst.fan_entries:
            was = old.structs.FanCfg()
            old.lookup("fan", ctypes.c_uint32(0), was)
            plan = fanout.FanPlan(tuple((int(b), int(i)) for b, i in inst.fan_entries), was.min_copies, (),
                                  inst.fan_min_group)
            fanout.install(new, fan_fd, plan)
            fanout.sync_groups(new, fan_fd, plan, fanout.group_sets(leaf_ports(contents), plan))
        # TC filters beside the old ones, where they are (each new one goes first in its chain)
        for ifname, direction, _ in our_tc_filters(_port_ifaces(inst), old_ports):
            egress = direction == "egress"
            name = "camus_tc_out" if egress else "camus_tc_in"
            add_tc(ifname, prog.fd(name), name, egress, [])
        new.pin(staging)
        lib = new.lib
        for name, fd in (("prog_xdp", prog.fn.fd), ("prog_msg", prog.fd("camus_msg")), ("prog_fan", fan_fd)):
            if lib.bpf_obj_pin(fd, str(staging / name).encode()) < 0:
                raise DataplaneError(f"could not pin {name} under {staging}")
        counted, leaf_rules = counted_rules(compiled, contents)
        lines = rule_lines_of(compiled)
        inst.pending = {"grow": str(staging), "old_ports": old_ports, "bank": 0, "root": contents.root,
                        "keys": keys_of(contents), "rules": str(Path(rules_path).resolve()), "rule_lines": lines,
                        "counted": counted, "leaf_rules": leaf_rules,
                        "bv_capacity": [limits.bv_words, limits.max_bv_bitmaps, limits.max_bv_segs, limits.bv_columns],
                        "table_capacity": {k: getattr(limits, k) for k in set(inst.table_capacity) | _grown(limits)},
                        "generation": generation, "tables_key": compiled_key(compiled)}
        save(inst)
        fault("grow:journaled")
        _swap_xdp(inst, prog, app_id)
        swapped = True
        fault("grow:swapped")
        time.sleep(GRACE_S)                   # packets the old program classified finish
        totals = rule_totals(old, inst)
        carried = {text: totals[i] + inst.rule_base.get(text, 0) for i, text in enumerate(inst.counted)}
        base = dict(inst.stats_base)
        for name, n in old.stats().items():
            base[name] = base.get(name, 0) + n
        for i, n in enumerate(old.port_stats(n_ports)):
            base[f"port#{i}"] = base.get(f"port#{i}", 0) + n
        old.close()
        _finish(inst, staging, old_ports)
    except BaseException as exc:
        if not swapped:                       # the old program never stopped: the new one goes
            _del_filters(our_tc_filters(_port_ifaces(inst), map_id(prog.maps.fds["ports_cfg"])))
            shutil.rmtree(staging, ignore_errors=True)
            if inst.pending and "grow" in inst.pending:
                inst.pending = None
                save(inst)
            if isinstance(exc, Exception) and not isinstance(exc, DataplaneError):
                raise DataplaneError(f"could not grow the program of {inst.unit} ({type(exc).__name__}: {exc}); "
                                     "the old one keeps serving") from exc
        raise
    finally:
        old.close()
        prog.close()
    p = inst.pending
    for key in ("bank", "root", "keys", "rules", "rule_lines", "counted", "leaf_rules", "bv_capacity",
                "table_capacity", "generation"):
        setattr(inst, key, p[key])
    inst.rule_base = {text: carried[text] for text in counted if text in carried}
    inst.stats_base = base
    inst.tables_key = compiled_key(compiled)
    inst.live_path = takes_live_path(compiled)
    inst.pending = None
    save(inst)
    return contents


def _grown(limits: EbpfLimits) -> set[str]:
    return {k for k in TABLE_CAPACITY if getattr(limits, k) != getattr(EbpfLimits(), k)}
