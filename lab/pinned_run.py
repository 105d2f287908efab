"""What an attached unit's program does with messages, asked of the kernel: the pinned program
run on packets by BPF_PROG_TEST_RUN with per-message results recorded. Benchmarks and tests
check the live tables against the reference interpreter through it; nothing is transmitted
(the run's verdict is only returned)."""
from __future__ import annotations

import ctypes
import os

from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec import Spec

from camus.dataplane.installed import load_installed
from camus.dataplane.maps import CFG_RECORD, MapSet
from camus.dataplane.testrun import libbpf, test_run

PER_PACKET = 8          # messages per test packet (the program takes up to CAMUS_MAX_MSGS)


def port_bits_of(unit: str, spec: Spec, messages: list[str]) -> list[tuple[int, ...]]:
    """The port bits the unit's live tables give each message (text form, `field=value ...`)."""
    inst = load_installed(unit)
    fd = libbpf().bpf_obj_get(str(inst.pins / "prog_xdp").encode())
    if fd < 0:
        raise OSError(f"{unit}: no pinned program under {inst.pins}")
    maps = MapSet.from_pins(inst.pins)
    out: list[tuple[int, ...]] = []
    try:
        maps.cfg(CFG_RECORD, 1)
        try:
            for k in range(0, len(messages), PER_PACKET):
                chunk = messages[k:k + PER_PACKET]
                test_run(fd, build_packet(spec, [message_from_text(spec, m) for m in chunk],
                                          src_ip="10.9.0.1", dst_ip="10.9.0.2"))
                for i in range(len(chunk)):
                    r = maps.structs.Result()
                    if not maps.lookup("results", ctypes.c_uint32(i), r):
                        raise OSError(f"{unit}: no result recorded for message {k + i}")
                    out.append(tuple(w * 64 + b for w in range(len(r.ports)) for b in range(64) if r.ports[w] >> b & 1))
        finally:
            maps.cfg(CFG_RECORD, 0)
    finally:
        maps.close()
        os.close(fd)
    return out
