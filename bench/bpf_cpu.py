"""CPU time the kernel spent in camus-xdp's BPF programs (kernel.bpf_stats_enabled).

With the sysctl on, the kernel adds each run of a program to its `run_time_ns` and `run_cnt`
(struct bpf_prog_info); a tail-called program's time is counted in its caller's, a program run
inside another's helper (camus_tc_out under camus_tc_in's clone_redirect) in both. `BpfStats`
turns the sysctl on for a benchmark run and restores it; `broker_seconds()` sums the programs
the kernel enters from outside (the benchmark sender, also BPF, is left out by name).
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from camus.dataplane.testrun import libbpf


class ProgInfo(ctypes.Structure):       # struct bpf_prog_info (uapi/linux/bpf.h), up to run_cnt
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32), ("nr_map_ids", ctypes.c_uint32),
                ("map_ids", ctypes.c_uint64), ("name", ctypes.c_char * 16), ("ifindex", ctypes.c_uint32),
                ("gpl_compatible", ctypes.c_uint32), ("netns_dev", ctypes.c_uint64), ("netns_ino", ctypes.c_uint64),
                ("nr_jited_ksyms", ctypes.c_uint32), ("nr_jited_func_lens", ctypes.c_uint32),
                ("jited_ksyms", ctypes.c_uint64), ("jited_func_lens", ctypes.c_uint64),
                ("btf_id", ctypes.c_uint32), ("func_info_rec_size", ctypes.c_uint32), ("func_info", ctypes.c_uint64),
                ("nr_func_info", ctypes.c_uint32), ("nr_line_info", ctypes.c_uint32), ("line_info", ctypes.c_uint64),
                ("jited_line_info", ctypes.c_uint64), ("nr_jited_line_info", ctypes.c_uint32),
                ("line_info_rec_size", ctypes.c_uint32), ("jited_line_info_rec_size", ctypes.c_uint32),
                ("nr_prog_tags", ctypes.c_uint32), ("prog_tags", ctypes.c_uint64),
                ("run_time_ns", ctypes.c_uint64), ("run_cnt", ctypes.c_uint64)]


def run_times(prefix: bytes = b"camus_") -> dict[str, tuple[int, int]]:
    """name -> (run_time_ns, run_cnt) summed over loaded programs whose name starts with prefix."""
    lib = libbpf()
    lib.bpf_prog_get_next_id.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]
    lib.bpf_prog_get_fd_by_id.argtypes = [ctypes.c_uint32]
    lib.bpf_obj_get_info_by_fd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    out: dict[str, tuple[int, int]] = {}
    pid = ctypes.c_uint32(0)
    while lib.bpf_prog_get_next_id(pid.value, ctypes.byref(pid)) == 0:
        fd = lib.bpf_prog_get_fd_by_id(pid.value)
        if fd < 0:
            continue
        try:
            info = ProgInfo()
            size = ctypes.c_uint32(ctypes.sizeof(info))
            if lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) == 0 and \
                    info.name.startswith(prefix):
                t, n = out.get(info.name.decode(), (0, 0))
                out[info.name.decode()] = (t + info.run_time_ns, n + info.run_cnt)
        finally:
            os.close(fd)
    return out


SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
# The programs the kernel enters from outside: a tail call's time is its caller's (camus_msg in
# camus_xdp, camus_xdp in camus_dispatch, camus_tc_local in camus_tc_in), and camus_tc_out runs
# inside camus_tc_in's bpf_clone_redirect (the copy's egress path is synchronous), so counting it
# too would count each copy's pruning twice.
BROKER_PROGRAMS = ("camus_xdp", "camus_tc_in", "camus_dispatch")


def broker_seconds() -> float:
    """Run time so far of every loaded camus-xdp broker program (seconds)."""
    return sum(t for name, (t, _) in run_times().items() if name in BROKER_PROGRAMS) / 1e9


class BpfStats:
    """`with BpfStats():` the kernel accounts BPF run time inside (a few ns per run: it reads
    the clock twice), and the setting is restored after."""

    def __enter__(self) -> "BpfStats":
        self.before = SYSCTL.read_text().strip()
        SYSCTL.write_text("1")
        return self

    def __exit__(self, *exc: object) -> None:
        SYSCTL.write_text(self.before)
