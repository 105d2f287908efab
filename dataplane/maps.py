"""The XDP program's maps from user space: ctypes mirrors of bpf/camus_xdp.h and raw map
operations through libbpf, so a process that did not load the program (`camus-xdp update`,
`stats`) can read and write its pinned maps.
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
from array import array
from pathlib import Path
from typing import Any

from camus.compiler.backends.ebpf.bitvector import LEAF_COUNTED, SEG_PLANE_SHIFT, inline_ports
from camus.compiler.backends.ebpf.contents import PORT_WORDS, STATE_MASK, MapContents
from camus.compiler.structure.bv_layout import MAX_PLANES, PLANE_LEAVES

from .testrun import libbpf

BPF_ANY = 0


class Desc(ctypes.Structure):
    c_struct = "camus_desc"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("kind", ctypes.c_uint8), ("var", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("pad", ctypes.c_uint8), ("default_next", ctypes.c_uint32), ("base", ctypes.c_uint32),
                ("count", ctypes.c_uint32), ("mult", ctypes.c_uint64)]


class Slot(ctypes.Structure):
    c_struct = "camus_slot"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("value", ctypes.c_uint64), ("next", ctypes.c_uint32), ("used", ctypes.c_uint32),
                ("nd", Desc)]                 # the next state's desc, copied (bpf/camus_xdp.h)


# camus_slot as raw bytes, the way Slot lays it out (native order; tests check the two agree):
# value, next, used, then the next state's desc (kind, var, bits, pad, default_next, base, count,
# mult). A delta rewrites a whole exact state's slots; building a ctypes object per slot was a
# quarter of the host agent's time under churn.
SLOT_BYTES = struct.Struct("=QII4B3IQ")
assert SLOT_BYTES.size == ctypes.sizeof(Slot)


class Bound(ctypes.Structure):
    c_struct = "camus_bound"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("keys", ctypes.c_uint64 * 8), ("vals", ctypes.c_uint32 * 8), ("nkeys", ctypes.c_uint32),
                ("leaf", ctypes.c_uint32)]


class RNode(ctypes.Structure):
    c_struct = "camus_rnode"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("split", ctypes.c_uint64), ("below", ctypes.c_uint32), ("above", ctypes.c_uint32)]


class RSub(ctypes.Structure):
    c_struct = "camus_rsub"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("lo", ctypes.c_uint64), ("base", ctypes.c_uint32), ("last", ctypes.c_uint32),
                ("shift", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class LpmKey(ctypes.Structure):
    c_struct = "camus_lpm_key"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("prefixlen", ctypes.c_uint32), ("data", ctypes.c_uint8 * 12)]


class PortCfg(ctypes.Structure):
    c_struct = "camus_port"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("kind", ctypes.c_uint32), ("ifindex", ctypes.c_uint32), ("mac", ctypes.c_uint8 * 6),
                ("src_mac", ctypes.c_uint8 * 6), ("ip", ctypes.c_uint32), ("udp_port", ctypes.c_uint16),
                ("pad", ctypes.c_uint16)]


class BvCol(ctypes.Structure):
    c_struct = "camus_bv_col"             # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("need", ctypes.c_uint64), ("word", ctypes.c_uint32), ("group", ctypes.c_uint16),
                ("next", ctypes.c_uint16)]


class BvRun(ctypes.Structure):
    c_struct = "camus_bv_run"             # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("mask", ctypes.c_uint64), ("word", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class BvPortRun(ctypes.Structure):
    c_struct = "camus_bv_prun"            # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("first", ctypes.c_uint16), ("n", ctypes.c_uint16)]


class PortStructs:
    """The structs of bpf/camus_xdp.h that hold a port set, for a program whose port sets have
    `words` 64-bit words (CAMUS_PORT_WORDS: 4 unless the program serves more than 256 ports)."""

    def __init__(self, words: int) -> None:
        self.words = words
        self.Words = ctypes.c_uint64 * words
        W = self.Words

        def struct(name: str, c_struct: str, fields: list[tuple[str, Any]]) -> Any:
            return type(f"{name}{words}" if words != PORT_WORDS else name, (ctypes.Structure,),
                        {"c_struct": c_struct, "_fields_": fields})   # tests/dataplane/test_layout.py compares
        self.Bypass = struct("Bypass", "camus_bypass", [("ports", W), ("flags", ctypes.c_uint32),
                                                        ("pad", ctypes.c_uint32)])
        self.Result = struct("Result", "camus_result", [("state", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                                                        ("ports", W)])
        self.Leaf = struct("Leaf", "camus_leaf", [("ports", W), ("flags", ctypes.c_uint32), ("group", ctypes.c_uint32),
                                                  ("value", ctypes.c_uint64)])
        self.BvSeg = struct("BvSeg", "camus_bv_seg", [
            ("mask", ctypes.c_uint64), ("lbit", ctypes.c_uint64), ("word", ctypes.c_uint32), ("flags", ctypes.c_uint32),
            ("leaf", ctypes.c_uint32), ("next", ctypes.c_uint32), ("ports", W)])
        self.BvPrefixLeaf = struct("BvPrefixLeaf", "camus_bv_pleaf", [
            ("tbit", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("leaf", ctypes.c_uint32), ("ports", W)])
        self.BvPlane = struct("BvPlane", "camus_bv_plane", [
            ("tops", ctypes.c_uint64), ("rest", ctypes.c_uint64), ("all_ports", W), ("all_flags", ctypes.c_uint32),
            ("words", ctypes.c_uint32), ("first_word", ctypes.c_uint32), ("counted", ctypes.c_uint32),
            ("pad", ctypes.c_uint32), ("grp", ctypes.c_uint8 * 64)])
        self.FanCfg = struct("FanCfg", "camus_fan", [
            ("mask", W), ("entries", ctypes.c_uint32), ("min_copies", ctypes.c_uint32), ("min_group", ctypes.c_uint32),
            ("pad", ctypes.c_uint32)])
        self.PortSet = struct("PortSet", "camus_portset", [("w", W)])   # fan_groups' key

    def words_of(self, ports: tuple[int, ...] | list[int]) -> Any:
        """A port set's words as the C array (fewer given: the rest are 0)."""
        return self.Words(*ports)

    def leaf(self, ports: tuple[int, ...], flags: int = 0, group: int = 0, value: int = 0) -> Any:
        return self.Leaf(self.Words(*ports), flags, group, value)

    def bypass(self, ports: tuple[int, ...], flags: int) -> Any:
        return self.Bypass(self.Words(*ports), flags, 0)


@functools.lru_cache(maxsize=None)
def port_structs(words: int = PORT_WORDS) -> PortStructs:
    return PortStructs(words)


_DEFAULT = port_structs(PORT_WORDS)     # a program of up to 256 ports (tests and tools name these)
Bypass, Result, Leaf = _DEFAULT.Bypass, _DEFAULT.Result, _DEFAULT.Leaf


DEBRUIJN = 0x03F79D71B4CB0A89             # bpf/camus_xdp.h CAMUS_DEBRUIJN



def label_key_type(words: int) -> type[ctypes.Structure]:
    """struct camus_label_key (bpf/camus_topic.h): its words depend on the spec's widest topic."""
    return type(f"LabelKey{words}", (ctypes.Structure,),
                {"_fields_": [("var", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("w", ctypes.c_uint8 * (8 * words))]})


def _label_key(c: MapContents, var: int, level: bytes) -> ctypes.Structure:
    """A long level's key in `labels` (bpf/camus_topic.h; short levels are their own label)."""
    key = label_key_type(c.label_words)()
    key.var = c.label_bank << 16 | var
    ctypes.memmove(key.w, level, len(level))
    return key


def debruijn_index(bit: int) -> int:
    """The kernel's index of a single-bit word: (bit * DEBRUIJN) >> 58, in 64-bit arithmetic."""
    return ((bit * DEBRUIJN) & 0xFFFFFFFFFFFFFFFF) >> 58




def bv_stage_value(fields: int, max_segs: int, columns: int, port_words: int = PORT_WORDS) -> type[ctypes.Structure]:
    """struct camus_bv_segs (bpf/camus_bv.h) for a program with these limits."""
    ps = port_structs(port_words)

    class BvStage(ctypes.Structure):
        _fields_ = [("nplanes", ctypes.c_uint32), ("walk_all", ctypes.c_uint32), ("ncols", ctypes.c_uint32),
                    ("nruns", ctypes.c_uint32), ("runmask", ps.Words),
                    ("pr", BvPortRun * (64 * port_words)), ("pn", ps.BvPlane * MAX_PLANES),
                    ("fd", Desc * fields), ("pl", ps.BvPrefixLeaf * (MAX_PLANES * PLANE_LEAVES)),
                    ("s", ps.BvSeg * max_segs), ("c", BvCol * columns), ("r", BvRun * columns)]
    return BvStage


class SvarCfg(ctypes.Structure):
    c_struct = "camus_svar_cfg"           # bpf/camus_xdp.h; tests/dataplane/test_layout.py compares
    _fields_ = [("window_ns", ctypes.c_uint64), ("fn", ctypes.c_uint32), ("field", ctypes.c_uint32),
                ("modulus", ctypes.c_uint64)]


MAP_NAMES = ("cfg", "stats", "desc", "xslots", "bounds", "rnodes", "rsub", "lpm", "leaf", "updates", "svars",
             "svar_cfg", "bypass", "overload", "results", "scratch", "progs", "ring", "ports_cfg", "port_stats",
             "tc_progs", "tx_ports", "leaf_hits", "bv_bits", "bv_segs", "bv_acc", "fan", "fan_ports", "fan_port",
             "fan_groups")
OPTIONAL_MAPS = ("labels", "topic_work")     # only in programs whose spec has topic fields
CFG_ROOT, CFG_MALFORMED, CFG_RECORD, CFG_NSVARS, CFG_REDIRECT, CFG_TC, CFG_BYPASS_PPS = 0, 1, 2, 3, 4, 5, 6
STAT_NAMES = ("packets", "other", "malformed", "messages", "no_match", "explicit_drop", "deliver",
              "local", "redirected", "overflow", "bypassed", "answered",
              "rewritten", "broadcast", "broadcast_all", "cross_cpu")


class MapError(OSError):
    pass


def _check(rc: int, what: str) -> None:
    if rc < 0:
        err = ctypes.get_errno() or -rc
        raise MapError(err, f"{what}: {os.strerror(err)}")


def lpm_key(plen: int, state: int, value: int) -> LpmKey:
    k = LpmKey()
    k.prefixlen = plen
    ctypes.memmove(ctypes.addressof(k.data), state.to_bytes(4, "big") + value.to_bytes(8, "big"), 12)
    return k


class MapSet:
    """File descriptors of one program's maps, by name."""

    def __init__(self, fds: dict[str, int], owned: bool = False) -> None:
        self.fds = fds
        self.owned = owned           # opened from pins: close them when done
        self.lib = libbpf()
        self._port_words: int | None = None

    @property
    def port_words(self) -> int:
        """The program's port-set words (CAMUS_PORT_WORDS), read off its leaf map: a camus_leaf
        value is the words, then 16 bytes."""
        if self._port_words is None:
            from .bpfinfo import MapInfo, obj_info
            self._port_words = (obj_info(self.fds["leaf"], MapInfo()).value_size - 16) // 8
        return self._port_words

    @property
    def structs(self) -> PortStructs:
        """The port-set structs as this program lays them out."""
        return port_structs(self.port_words)

    @classmethod
    def from_pins(cls, directory: Path) -> "MapSet":
        lib = libbpf()
        lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
        fds: dict[str, int] = {}
        for name in MAP_NAMES:
            fd = lib.bpf_obj_get(str(directory / name).encode())
            if fd < 0:
                for f in fds.values():
                    os.close(f)
                raise MapError(ctypes.get_errno(), f"cannot open pinned map {directory / name}")
            fds[name] = fd
        for name in OPTIONAL_MAPS:
            if (directory / name).exists():
                fd = lib.bpf_obj_get(str(directory / name).encode())
                if fd >= 0:
                    fds[name] = fd
        return cls(fds, owned=True)

    def pin(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.lib.bpf_obj_pin.argtypes = [ctypes.c_int, ctypes.c_char_p]
        for name, fd in self.fds.items():
            path = directory / name
            if not path.exists():
                _check(self.lib.bpf_obj_pin(fd, str(path).encode()), f"pin {path}")

    def close(self) -> None:
        if self.owned:
            for fd in self.fds.values():
                os.close(fd)
            self.fds = {}

    # -- raw operations ----------------------------------------------------------------------
    def update(self, name: str, key: ctypes._CData, value: ctypes._CData) -> None:
        _check(self.lib.bpf_map_update_elem(self.fds[name], ctypes.byref(key), ctypes.byref(value), BPF_ANY),
               f"update {name}")

    def update_many(self, name: str, key_type: Any, value_type: Any, items: list[tuple[Any, Any]]) -> None:
        """Write many entries with one BPF_MAP_UPDATE_BATCH call (arrays and hashes since 5.6);
        entry by entry where the map has no batch operation (an LPM trie)."""
        if not items:
            return
        keys = (key_type * len(items))(*[k for k, _ in items])
        values = (value_type * len(items))(*[v for _, v in items])
        self._update_batch(name, keys, values, len(items), ctypes.sizeof(key_type), ctypes.sizeof(value_type))

    def update_packed(self, name: str, keys: array, values: bytes | bytearray) -> None:
        """`update_many` for entries already packed: `keys` an array of fixed-size keys, `values`
        their values back to back (each len(values) // len(keys) bytes)."""
        n = len(keys)
        if not n:
            return
        if len(values) % n:
            raise ValueError(f"{len(values)} value bytes for {n} keys")
        self._update_batch(name, (ctypes.c_char * (n * keys.itemsize)).from_buffer_copy(keys.tobytes()),
                           (ctypes.c_char * len(values)).from_buffer_copy(values), n, keys.itemsize, len(values) // n)

    def _update_batch(self, name: str, keys: Any, values: Any, n: int, key_size: int, value_size: int) -> None:
        """`n` entries from two buffers of keys and values back to back: one batch call, entry by
        entry from where it stopped when the map has none."""
        count = ctypes.c_uint32(n)
        rc = self.lib.bpf_map_update_batch(self.fds[name], keys, values, ctypes.byref(count), None)
        if rc == 0 and count.value == n:
            return
        errno = ctypes.get_errno()
        if rc < 0 and errno not in (22, 95, 524):        # EINVAL, EOPNOTSUPP, ENOTSUPP: no batch here
            raise MapError(errno, f"batch update {name}: {os.strerror(errno)}")
        for i in range(count.value if rc == 0 else 0, n):
            _check(self.lib.bpf_map_update_elem(self.fds[name], ctypes.byref(keys, i * key_size),
                                                ctypes.byref(values, i * value_size), BPF_ANY), f"update {name}")

    def delete(self, name: str, key: ctypes._CData) -> None:
        rc = self.lib.bpf_map_delete_elem(self.fds[name], ctypes.byref(key))
        if rc < 0 and ctypes.get_errno() not in (2,):   # ENOENT: already gone
            _check(rc, f"delete {name}")

    def lookup(self, name: str, key: ctypes._CData, value: ctypes._CData) -> bool:
        return self.lib.bpf_map_lookup_elem(self.fds[name], ctypes.byref(key), ctypes.byref(value)) == 0

    def keys(self, name: str, key_type: Any) -> list[Any]:
        """Every key a hash or LPM-trie map holds (BPF_MAP_GET_NEXT_KEY from the start)."""
        out: list[Any] = []
        prev, key = None, key_type()
        while self.lib.bpf_map_get_next_key(self.fds[name], None if prev is None else ctypes.byref(prev),
                                            ctypes.byref(key)) == 0:
            out.append(key)
            prev, key = key, key_type()
        return out

    def cfg(self, idx: int, value: int | None = None) -> int:
        if value is not None:
            self.update("cfg", ctypes.c_uint32(idx), ctypes.c_uint32(value))
            return value
        out = ctypes.c_uint32()
        self.lookup("cfg", ctypes.c_uint32(idx), out)
        return out.value

    @staticmethod
    def _ncpu() -> int:
        possible = Path("/sys/devices/system/cpu/possible")
        if possible.exists():
            return int(possible.read_text().strip().split("-")[-1].split(",")[-1]) + 1
        return os.sysconf("SC_NPROCESSORS_CONF")

    def _percpu_sum(self, name: str, index: int) -> int:
        vals = (ctypes.c_uint64 * self._ncpu())()
        self.lookup(name, ctypes.c_uint32(index), vals)
        return sum(vals)

    def leaf_hits(self, states: list[int]) -> dict[int, int]:
        """Messages that ended in each of `states` (all CPUs)."""
        return {s: self._percpu_sum("leaf_hits", s) for s in states}

    def clear_leaf_hits(self, states: list[int]) -> None:
        zeros = (ctypes.c_uint64 * self._ncpu())()
        for s in states:
            self.update("leaf_hits", ctypes.c_uint32(s), zeros)

    def stats(self) -> dict[str, int]:
        return {name: self._percpu_sum("stats", i) for i, name in enumerate(STAT_NAMES)}

    def port_stats(self, n_ports: int) -> list[int]:
        """Copies sent to each port bit (the order of the ports file)."""
        return [self._percpu_sum("port_stats", i) for i in range(n_ports)]

    # -- table sets --------------------------------------------------------------------------
    def write(self, c: MapContents) -> None:
        """Write a table set; the root moves to it last (one atomic array write)."""
        ps = port_structs(c.port_words)
        for s, (kind, var, bits, default, base, count, mult) in c.desc.items():
            self.update("desc", ctypes.c_uint32(s), Desc(kind, var, bits, 0, default, base, count, mult))
        no_desc = (0, 0, 0, 0, 0, 0, 0)
        for i, (value, nxt) in c.xslots.items():
            kind, var, bits, default, base, count, mult = c.desc.get(nxt & STATE_MASK, no_desc)
            self.update("xslots", ctypes.c_uint32(i),
                        Slot(value, nxt, 1, Desc(kind, var, bits, 0, default, base, count, mult)))
        for i, (keys, vals, nkeys, leaf) in enumerate(c.bounds):
            self.update("bounds", ctypes.c_uint32(c.bounds_base + i),
                        Bound((ctypes.c_uint64 * 8)(*keys), (ctypes.c_uint32 * 8)(*vals), nkeys, leaf))
        for i, (split, below, above) in enumerate(c.rnodes):
            self.update("rnodes", ctypes.c_uint32(c.rnodes_base + i), RNode(split, below, above))
        for i, (lo, base, last, shift) in enumerate(c.rsub):
            self.update("rsub", ctypes.c_uint32(c.rsub_base + i), RSub(lo, base, last, shift))
        for (plen, s, v), nxt in c.lpm.items():
            self.update("lpm", lpm_key(plen, s, v), ctypes.c_uint32(nxt))
        for s, (words, flags, group, value) in c.leaf.items():
            self.update("leaf", ctypes.c_uint32(s), ps.leaf(words, flags, group, value))
        for s, mask in c.updates.items():
            self.update("updates", ctypes.c_uint32(s), ctypes.c_uint64(mask))
        for (var, level), code in c.labels.items():
            self.update("labels", _label_key(c, var, level), ctypes.c_uint64(code))
        if c.bv_bits:
            bits_t = ctypes.c_uint64 * c.bv_words
            for k, words in c.bv_bits.items():
                self.update("bv_bits", ctypes.c_uint32(k), bits_t(*words))
            segs = bv_stage_value(c.bv_fields, c.bv_max_segs, c.bv_columns, c.port_words)()
            for i in range(c.bv_fields):            # the fields' interval tables, inline
                kind, var, bits, default, base, count, mult = c.desc[c.root + 1 + i]
                segs.fd[i] = Desc(kind, var, bits, 0, default, base, count, mult)
            segs.nplanes, segs.walk_all, segs.ncols = len(c.bv_planes), int(c.bv_walk_all), len(c.bv_cols)
            for j, (need, word, group, nxt) in enumerate(c.bv_cols):
                segs.c[j] = BvCol(need, word, group, nxt)
            segs.nruns = len(c.bv_runs)
            for j, (mask, word) in enumerate(c.bv_runs):
                segs.r[j] = BvRun(mask, word, 0)
            for bit, (first, n) in c.bv_port_runs.items():
                segs.runmask[bit // 64] |= 1 << (bit % 64)
                segs.pr[bit // 64 * 64 + debruijn_index(1 << (bit % 64))] = BvPortRun(first, n)
            first_leaf = 0
            for k, (tops, rest, words, first_word, leaves) in enumerate(c.bv_planes):
                union, all_flags = [0] * c.port_words, 0
                for g, (tbit, flags, leaf, ports) in enumerate(leaves):
                    held, held_flags = inline_ports(ports, flags, c.port_words)
                    segs.pl[first_leaf + g] = ps.BvPrefixLeaf(tbit, held_flags | k << SEG_PLANE_SHIFT, leaf,
                                                              ps.Words(*held))
                    union = [u | w for u, w in zip(union, ports)]
                    all_flags |= flags
                grp = [0] * 64
                for g, (tbit, _, _, _) in enumerate(leaves):
                    grp[debruijn_index(tbit)] = first_leaf + g
                segs.pn[k] = ps.BvPlane(tops, rest, ps.Words(*union), all_flags, words, first_word,
                                     int(bool(all_flags & LEAF_COUNTED)), 0, (ctypes.c_uint8 * 64)(*grp))
                first_leaf += len(leaves)
            for j, (mask, word, leaf, ports, flags, nxt, lbit) in enumerate(c.bv_segs):
                held, held_flags = inline_ports(ports, flags, c.port_words)
                segs.s[j] = ps.BvSeg(mask, lbit, word, held_flags, leaf, nxt, ps.Words(*held))
            self.update("bv_segs", ctypes.c_uint32(c.bv_segs_base), segs)
        for k, (window_ns, fn, fld, modulus) in enumerate(c.svar_cfg):
            self.update("svar_cfg", ctypes.c_uint32(k), SvarCfg(window_ns, fn, fld, modulus))
        self.cfg(CFG_NSVARS, len(c.svar_cfg))
        self.update("bypass", ctypes.c_uint32(c.label_bank), ps.bypass(c.cover_ports, c.cover_flags))
        self.cfg(CFG_ROOT, c.root)

    def write_ports(self, bits: list[object], specs: dict) -> None:
        """Port bit i (the order map_contents used) -> where its copies go."""
        import socket
        import struct

        from .ports import KIND, iface_mac
        for i, port in enumerate(bits):
            ps = specs[port]
            cfg = PortCfg()
            cfg.kind = KIND[ps.kind]
            cfg.ifindex = ps.ifindex
            if ps.kind == "remote":
                ctypes.memmove(cfg.mac, ps.mac, 6)
                ctypes.memmove(cfg.src_mac, iface_mac(ps.iface), 6)
                cfg.ip = struct.unpack("=I", socket.inet_aton(ps.ip))[0]
                cfg.udp_port = socket.htons(ps.udp_port) if ps.udp_port else 0
            self.update("ports_cfg", ctypes.c_uint32(i), cfg)
            if ps.kind == "iface":
                self.update("tx_ports", ctypes.c_uint32(i), ctypes.c_int(ps.ifindex))

    def remove(self, c: MapContents) -> None:
        """Take out a table set written earlier, once the root no longer leads into it."""
        for s in c.desc:
            self.update("desc", ctypes.c_uint32(s), Desc())
        for i in c.xslots:
            self.update("xslots", ctypes.c_uint32(i), Slot())
        blank = port_structs(c.port_words).Leaf()
        for s in c.leaf:
            self.update("leaf", ctypes.c_uint32(s), blank)
        for plen, s, v in c.lpm:
            self.delete("lpm", lpm_key(plen, s, v))
        for s in c.updates:
            self.delete("updates", ctypes.c_uint32(s))
        for var, level in c.labels:
            self.delete("labels", _label_key(c, var, level))
