"""What the kernel says of a loaded BPF program or map (bpf_obj_get_info_by_fd): ids, the maps a
program uses, its name; and the ids behind pins. bpftool's `prog show` / `map show`, by library."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .errors import DataplaneError
from .testrun import libbpf
class MapInfo(ctypes.Structure):    # the head of struct bpf_map_info (uapi/linux/bpf.h)
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("name", ctypes.c_char * 16), ("rest", ctypes.c_uint8 * 256)]


class ProgInfo(ctypes.Structure):   # the head of struct bpf_prog_info, to its name
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32),
                ("nr_map_ids", ctypes.c_uint32), ("map_ids", ctypes.c_uint64), ("name", ctypes.c_char * 16),
                ("rest", ctypes.c_uint8 * 512)]


def obj_info(fd: int, info: ctypes.Structure) -> ctypes.Structure:
    lib = libbpf()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    if lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) != 0:
        raise DataplaneError(f"bpf_obj_get_info_by_fd: {os.strerror(ctypes.get_errno())}")
    return info


def map_id(fd: int) -> int:
    return obj_info(fd, MapInfo()).id


def prog_map_ids(prog_id: int) -> set[int]:
    """The maps a loaded program uses (empty when it is gone)."""
    lib = libbpf()
    fd = lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return set()
    try:
        ids = (ctypes.c_uint32 * 64)()
        info = ProgInfo(nr_map_ids=64, map_ids=ctypes.addressof(ids))
        obj_info(fd, info)
        return set(ids[:min(64, info.nr_map_ids)])
    finally:
        os.close(fd)


def pinned_id(directory: Path, name: str) -> int:
    lib = libbpf()
    fd = lib.bpf_obj_get(str(directory / name).encode())
    if fd < 0:
        return 0
    try:
        return obj_info(fd, ProgInfo()).id if name.startswith("prog_") else map_id(fd)
    finally:
        os.close(fd)


def prog_name(prog_id: int) -> str:
    """The name a loaded program was given ("" when there is no such program)."""
    lib = libbpf()
    fd = lib.bpf_prog_get_fd_by_id(ctypes.c_uint32(prog_id))
    if fd < 0:
        return ""
    try:
        return obj_info(fd, ProgInfo()).name.decode(errors="replace")   # type: ignore[attr-defined]
    finally:
        os.close(fd)
