"""Exact-table slots packed as bytes for a delta's batch write (dataplane/live.py: pack_slots) are
byte for byte what the ctypes mirror of camus_slot holds (the layout the XDP program reads)."""
from __future__ import annotations

import ctypes
from array import array

from hypothesis import given
from hypothesis import strategies as st

from camus.compiler.backends.ebpf.contents import STATE_FINAL, STATE_MASK
from camus.dataplane.live import pack_slots
from camus.dataplane.maps import SLOT_BYTES, Desc, Slot

u8, u32, u64 = (st.integers(0, 2 ** b - 1) for b in (8, 32, 64))
descs = st.dictionaries(st.integers(0, 50), st.tuples(u8, u8, u8, u32, u32, u32, u64), max_size=20)
slots = st.lists(st.none() | st.tuples(u64, st.integers(0, 60) | st.integers(0, 60).map(lambda s: s | STATE_FINAL)),
                 max_size=40)


def slot_object(slot: tuple[int, int] | None, table: dict) -> Slot:
    if slot is None:
        return Slot()
    value, nxt = slot
    d = None if nxt & STATE_FINAL else table.get(nxt & STATE_MASK)
    if d is None:
        return Slot(value, nxt, 1, Desc())
    kind, var, bits, default, base, count, mult = d
    return Slot(value, nxt, 1, Desc(kind, var, bits, 0, default, base, count, mult))


@given(slots, descs)
def test_packed_slots_are_the_ctypes_layout(slot_list, table) -> None:
    packed = pack_slots(slot_list, table)
    assert len(packed) == SLOT_BYTES.size * len(slot_list) == ctypes.sizeof(Slot) * len(slot_list)
    assert packed == b"".join(bytes(slot_object(s, table)) for s in slot_list)


def test_keys_pack_as_the_map_reads_them() -> None:
    keys = array("I", [0, 7, 2 ** 32 - 1])
    assert keys.itemsize == ctypes.sizeof(ctypes.c_uint32)
    assert keys.tobytes() == bytes((ctypes.c_uint32 * 3)(0, 7, 2 ** 32 - 1))
