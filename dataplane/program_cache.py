"""Built XDP programs kept between attaches: BCC's clang compile (2-3 s) done once per program.

An entry is what BCC handed the kernel: the BTF it generated, each map's creation attributes and
each program's instructions, with the map references (ld_imm64 of a map fd) recorded by map name.
Loading an entry creates the BTF, the maps and the programs with the bpf syscall (libbpf) and
patches each reference with the new map's fd: no BCC, no clang, no kernel headers. The kernel's
verifier still checks every program, as on a cold build.

The key is everything that determines the object: the generated C, BCC's flags, BCC's version
and the kernel (release and build), plus this file's format. An entry that does not load (a
damaged file, a kernel that changed under the same name) is removed, and the caller builds
again. Entries live under /var/cache/camus-xdp/programs (root-only; CAMUS_XDP_CACHE moves it,
`CAMUS_XDP_CACHE=off` turns the cache off); the newest KEEP stay.
"""
from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import logging
import os
import struct
from dataclasses import dataclass
from typing import Any

from .cache_dir import CacheDir
from .testrun import libbpf

log = logging.getLogger(__name__)

FORMAT = 1                      # bump when an entry's meaning changes
KEEP = 16                       # entries kept (one per spec, limits and app id in use, roughly)
MAP_OF_MAPS = (12, 13)          # BPF_MAP_TYPE_ARRAY_OF_MAPS, _HASH_OF_MAPS: created with an inner map
DEVMAPS = (14, 25)              # BPF_MAP_TYPE_DEVMAP, _DEVMAP_HASH: the kernel sets BPF_F_RDONLY_PROG on
BPF_F_RDONLY_PROG = 1 << 7      # them itself and refuses it at creation (kernel/bpf/devmap.c)
LD_IMM64 = 0x18                 # BPF_LD | BPF_IMM | BPF_DW: two instruction slots
PSEUDO_MAP_FD = 1               # its src_reg when imm is a map's fd
PROG_NAME_LEN = 15              # BPF_OBJ_NAME_LEN - 1: the kernel's (and BCC's) program names


def cache_key(source: str, cflags: list[str], bcc_version: str) -> str:
    u = os.uname()
    h = hashlib.sha256()
    for part in (str(FORMAT), source, "\0".join(cflags), bcc_version, u.release, u.version, u.machine):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()[:32]


# -- libbpf's option structs (libbpf 1.1 layouts; `sz` tells libbpf which fields we know) ------
class _MapCreateOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("btf_fd", ctypes.c_uint32), ("btf_key_type_id", ctypes.c_uint32),
                ("btf_value_type_id", ctypes.c_uint32), ("btf_vmlinux_value_type_id", ctypes.c_uint32),
                ("inner_map_fd", ctypes.c_uint32), ("map_flags", ctypes.c_uint32), ("map_extra", ctypes.c_uint64),
                ("numa_node", ctypes.c_uint32), ("map_ifindex", ctypes.c_uint32)]


class _ProgLoadOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("attempts", ctypes.c_int), ("expected_attach_type", ctypes.c_uint32),
                ("prog_btf_fd", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32), ("prog_ifindex", ctypes.c_uint32),
                ("kern_version", ctypes.c_uint32), ("attach_btf_id", ctypes.c_uint32),
                ("attach_prog_fd", ctypes.c_uint32), ("attach_btf_obj_fd", ctypes.c_uint32),
                ("fd_array", ctypes.c_void_p), ("func_info", ctypes.c_void_p), ("func_info_cnt", ctypes.c_uint32),
                ("func_info_rec_size", ctypes.c_uint32), ("line_info", ctypes.c_void_p),
                ("line_info_cnt", ctypes.c_uint32), ("line_info_rec_size", ctypes.c_uint32),
                ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32), ("log_buf", ctypes.c_void_p)]


class _BtfLoadOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("log_buf", ctypes.c_void_p), ("log_level", ctypes.c_uint32),
                ("log_size", ctypes.c_uint32)]


class _MapInfo(ctypes.Structure):           # struct bpf_map_info (uapi/linux/bpf.h)
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16), ("ifindex", ctypes.c_uint32),
                ("btf_vmlinux_value_type_id", ctypes.c_uint32), ("netns_dev", ctypes.c_uint64),
                ("netns_ino", ctypes.c_uint64), ("btf_id", ctypes.c_uint32), ("btf_key_type_id", ctypes.c_uint32),
                ("btf_value_type_id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("map_extra", ctypes.c_uint64)]


class _BtfInfo(ctypes.Structure):           # struct bpf_btf_info
    _fields_ = [("btf", ctypes.c_uint64), ("btf_size", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("name", ctypes.c_uint64), ("name_len", ctypes.c_uint32), ("kernel_btf", ctypes.c_uint32)]


_typed = False


def _lib() -> ctypes.CDLL:
    global _typed
    lib = libbpf()
    if not _typed:
        lib.bpf_map_create.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                                       ctypes.c_uint32, ctypes.POINTER(_MapCreateOpts)]
        lib.bpf_prog_load.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.POINTER(_ProgLoadOpts)]
        lib.bpf_btf_load.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_BtfLoadOpts)]
        lib.bpf_btf_get_fd_by_id.argtypes = [ctypes.c_uint32]
        lib.bpf_obj_get_info_by_fd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        _typed = True
    return lib


def _info(fd: int, info: ctypes.Structure) -> Any:
    size = ctypes.c_uint32(ctypes.sizeof(info))
    if _lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) != 0:
        raise OSError(ctypes.get_errno(), f"bpf_obj_get_info_by_fd: {os.strerror(ctypes.get_errno())}")
    return info


def _btf_bytes(btf_id: int) -> bytes:
    fd = _lib().bpf_btf_get_fd_by_id(btf_id)
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"BTF {btf_id}: {os.strerror(ctypes.get_errno())}")
    try:
        size = _info(fd, _BtfInfo()).btf_size
        buf = ctypes.create_string_buffer(size)
        _info(fd, _BtfInfo(btf=ctypes.addressof(buf), btf_size=size))
        return buf.raw
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ProgramSpec:
    """One program as BCC loaded it: how, and its instructions."""
    name: str
    prog_type: int
    attach_type: int            # expected attach type (0: none)


@dataclass
class Loaded:
    """Programs and maps made from an entry: fds by name (closed by close())."""
    programs: dict[str, int]
    maps: dict[str, int]
    btf_fd: int

    def close(self) -> None:
        for fd in [*self.programs.values(), *self.maps.values(), self.btf_fd]:
            if fd >= 0:
                os.close(fd)
        self.programs, self.maps, self.btf_fd = {}, {}, -1


class EntryUnusable(Exception):
    """The entry cannot be loaded as it is (it is removed; build again)."""


def capture(maps: dict[str, int], programs: dict[ProgramSpec, bytes], license: str,
            inner: dict[str, str]) -> dict[str, Any]:
    """The entry for programs BCC built: `maps` the module's map fds by name, `programs` each
    program's instructions as handed to the kernel (map references are those fds), `inner` the
    map each map of maps was declared with as its template (the kernel does not say)."""
    by_fd = {fd: name for name, fd in maps.items()}
    btf_ids: set[int] = set()
    out_maps = []
    for name, fd in sorted(maps.items()):
        mi = _info(fd, _MapInfo())
        if mi.btf_id:
            btf_ids.add(mi.btf_id)
        flags = mi.map_flags & ~BPF_F_RDONLY_PROG if mi.type in DEVMAPS else mi.map_flags
        out_maps.append({"name": name, "type": mi.type, "key_size": mi.key_size, "value_size": mi.value_size,
                         "max_entries": mi.max_entries, "flags": flags, "map_extra": mi.map_extra,
                         "btf_key": mi.btf_key_type_id if mi.btf_id else 0,
                         "btf_value": mi.btf_value_type_id if mi.btf_id else 0, "inner": inner.get(name, "")})
        if mi.type in MAP_OF_MAPS and inner.get(name) not in maps:
            raise EntryUnusable(f"map of maps {name}: no inner map template known")
    if len(btf_ids) > 1:
        raise EntryUnusable(f"the maps carry {len(btf_ids)} BTF objects (one expected)")
    out_progs = []
    for ps, code in programs.items():
        refs = []
        for i in range(0, len(code) - 15, 8):
            if code[i] == LD_IMM64 and code[i + 1] >> 4 == PSEUDO_MAP_FD:
                fd = struct.unpack_from("<i", code, i + 4)[0]
                if fd not in by_fd:
                    raise EntryUnusable(f"{ps.name}: instruction {i // 8} names map fd {fd}, not one of the module's")
                refs.append([i // 8, by_fd[fd]])
        out_progs.append({"name": ps.name, "type": ps.prog_type, "attach_type": ps.attach_type,
                          "insns": base64.b64encode(code).decode(), "refs": refs})
    btf = _btf_bytes(btf_ids.pop()) if btf_ids else b""
    return {"format": FORMAT, "license": license, "btf": base64.b64encode(btf).decode(),
            "maps": out_maps, "programs": out_progs}


def load_entry(entry: dict[str, Any], skip: frozenset[str] = frozenset()) -> Loaded:
    """Create the entry's BTF, maps and programs (but those named in `skip`). Raises EntryUnusable (nothing left open) when
    the kernel refuses any of them."""
    lib = _lib()
    if entry.get("format") != FORMAT:
        raise EntryUnusable(f"format {entry.get('format')} (this release reads {FORMAT})")
    loaded = Loaded({}, {}, -1)
    try:
        btf = base64.b64decode(entry["btf"])
        if btf:
            buf = ctypes.create_string_buffer(btf, len(btf))
            loaded.btf_fd = lib.bpf_btf_load(buf, len(btf), ctypes.byref(_BtfLoadOpts(sz=ctypes.sizeof(_BtfLoadOpts))))
            if loaded.btf_fd < 0:
                raise EntryUnusable(f"the kernel refused the BTF: {os.strerror(ctypes.get_errno())}")
        for m in sorted(entry["maps"], key=lambda m: bool(m["inner"])):     # templates first
            opts = _MapCreateOpts(sz=ctypes.sizeof(_MapCreateOpts), map_flags=m["flags"], map_extra=m["map_extra"],
                                  inner_map_fd=loaded.maps[m["inner"]] if m["inner"] else 0)
            if m["btf_key"] or m["btf_value"]:
                opts.btf_fd, opts.btf_key_type_id, opts.btf_value_type_id = loaded.btf_fd, m["btf_key"], m["btf_value"]
            fd = lib.bpf_map_create(m["type"], m["name"][:PROG_NAME_LEN].encode(), m["key_size"], m["value_size"],
                                    m["max_entries"], ctypes.byref(opts))
            if fd < 0:
                raise EntryUnusable(f"map {m['name']}: {os.strerror(ctypes.get_errno())}")
            loaded.maps[m["name"]] = fd
        license = entry["license"].encode()
        for p in entry["programs"]:
            if p["name"] in skip:
                continue
            code = bytearray(base64.b64decode(p["insns"]))
            for index, name in p["refs"]:
                struct.pack_into("<i", code, index * 8 + 4, loaded.maps[name])
            insns = (ctypes.c_char * len(code)).from_buffer(code)
            how = _ProgLoadOpts(sz=ctypes.sizeof(_ProgLoadOpts), expected_attach_type=p["attach_type"])
            fd = lib.bpf_prog_load(p["type"], p["name"][:PROG_NAME_LEN].encode(), license, insns,
                                   len(code) // 8, ctypes.byref(how))
            if fd < 0:
                raise EntryUnusable(f"program {p['name']}: the kernel refused it ({os.strerror(ctypes.get_errno())})")
            loaded.programs[p["name"]] = fd
        return loaded
    except BaseException:
        loaded.close()
        raise


# -- the store ---------------------------------------------------------------------------
STORE = CacheDir("programs", ".json", KEEP)


def read(key: str) -> dict[str, Any] | None:
    data = STORE.read(key)
    if data is None:
        return None
    try:
        entry = json.loads(data)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        STORE.drop(key)
        return None
    return entry


def write(key: str, entry: dict[str, Any]) -> None:
    STORE.write(key, json.dumps(entry).encode())


def drop(key: str) -> None:
    STORE.drop(key)
