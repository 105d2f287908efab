"""The intent journal of an update: what a crash leaves in the state file's `pending`, finished
or undone by the next command so that what the state file says is what serves.

An update journals the new set (root, bank, keys, rules) before its first map write; a grow
journals its staging folder (dataplane/grow.py). The pinned maps are the truth: the live root
says whether the interrupted update got as far as its flip."""
from __future__ import annotations

from .grow import recover_grow
from .installed import Installed, contents_from_keys, forget_live_state, load_installed, save, unit_lock
from .maps import CFG_ROOT, MapSet


def finish_or_undo(inst: Installed, maps: MapSet) -> str:
    """Finish or undo an update a crash interrupted, from the journal and the live root:
    flipped -> the new set is live and the old one is removed; not flipped -> whatever was
    written of the new set is removed. Returns what it did ("" with no journal)."""
    p = inst.pending
    if not p:
        return ""
    live = maps.cfg(CFG_ROOT)
    if p.get("kind") == "delta":
        note = _finish_or_undo_delta(inst, maps, p, live == p["root"])
    elif live == p["root"]:
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


def _finish_or_undo_delta(inst: Installed, maps: MapSet, p: dict, flipped: bool) -> str:
    """A delta written into the live bank (live_state.py): flipped -> the states it retired are
    cleared and its record adopted; not flipped -> the states it wrote are cleared (no packet
    reached them; their ids are free in the saved layout, which still describes what serves)."""
    if not flipped:
        maps.remove(contents_from_keys(p["wrote"]))
        return f"{inst.iface}: undid an interrupted update (the old tables kept serving)"
    maps.remove(contents_from_keys(p["retired"]))
    forget_live_state(inst.unit)
    keys = inst.keys
    for name in ("desc", "leaf", "xslots"):
        keys[name] = sorted((set(keys[name]) - set(p["retired"][name])) | set(p["wrote"][name]))
    gone = {tuple(k) for k in p["retired"]["lpm"]}
    keys["lpm"] = sorted([list(k) for k in {tuple(k) for k in keys["lpm"]} - gone | {tuple(k) for k in p["wrote"]["lpm"]}])
    inst.root, inst.rules = p["root"], p["rules"]
    inst.rule_lines = sorted((set(inst.rule_lines) - set(p["removed_lines"])) | set(p["added_lines"]))
    inst.counted, inst.leaf_rules, inst.rule_base = p["counted"], p["leaf_rules"], p["rule_base"]
    inst.tables_key = p["tables_key"]
    return f"{inst.iface}: finished an interrupted update (its tables were live)"


def recover_unit(unit: str) -> str:
    """Finish or undo what a crashed update or grow left journaled on `unit` (`status` and
    `stats` call it). Returns what it did; "" when there was nothing to do, or another command
    is changing the unit right now (its journal is its own, not a crash's)."""
    if not load_installed(unit).pending:
        return ""
    with unit_lock(unit, wait=False) as held:
        if not held:
            return ""
        return settle(load_installed(unit))


def settle(inst: Installed) -> str:
    """Finish or undo what a crash left journaled on `inst` (the caller holds the unit's lock):
    a grow first (it may have swapped the pins), then an update. Returns what it did."""
    note = recover_grow(inst)
    if inst.pending:
        maps = MapSet.from_pins(inst.pins)
        try:
            note = finish_or_undo(inst, maps)
        finally:
            maps.close()
    return note
