"""Loading the XDP classifier with BCC and writing its tables.

`XdpProgram.load(spec)` compiles and verifies the program for a spec (clear errors for: not
root, BCC or kernel headers missing, verifier rejection with its last lines). `write(contents)`
fills the maps from the eBPF back end's MapContents: capacity was checked by the back end, so
a write never half-fails on size.
"""
from __future__ import annotations

import ctypes
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from camus.compiler.backends.ebpf.program import PORT_WORDS, EbpfLimits, program_text
from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.language.spec import Spec

from .errors import DataplaneError
from .fanout import BPF_XDP_DEVMAP
from .maps import CFG_MALFORMED, CFG_RECORD, MAP_NAMES, OPTIONAL_MAPS, MapSet
from . import program_cache
from .program_cache import ProgramSpec
from .testrun import TestRun, libbpf, skb_context, test_run

log = logging.getLogger(__name__)

CAMUS_MARK_TAG = 0xC0000000          # bpf/camus_xdp.h: skb->mark of a copy



def require_root() -> None:
    if os.geteuid() != 0:
        raise DataplaneError("this needs root (CAP_BPF and CAP_NET_ADMIN): run it with sudo")


def bcc_module():
    try:
        import bcc  # Debian's python3-bpfcc; PyPI's "bcc" is an unrelated package
    except ImportError as exc:
        raise DataplaneError("BCC is not importable: install Debian's python3-bpfcc (./run does) "
                             "and use a venv made with --system-site-packages") from exc
    return bcc


@dataclass
class PacketResult:
    verdict: str
    messages: list[tuple[int, int, tuple[int, ...]]]   # per message: (final state, flags, port words)
    union: tuple[int, ...]
    flags: int


XDP_PROG, SCHED_CLS_PROG = 6, 3      # enum bpf_prog_type (BCC's BPF.XDP, BPF.SCHED_CLS)
PROGRAMS = (ProgramSpec("camus_xdp", XDP_PROG, 0), ProgramSpec("camus_msg", XDP_PROG, 0),
            ProgramSpec("camus_tc_in", SCHED_CLS_PROG, 0), ProgramSpec("camus_tc_out", SCHED_CLS_PROG, 0),
            ProgramSpec("camus_tc_local", SCHED_CLS_PROG, 0),
            ProgramSpec("camus_fan_out", XDP_PROG, BPF_XDP_DEVMAP),      # fanout.py
            ProgramSpec("camus_fan_decide", XDP_PROG, 0))
# More than 256 ports: a packet's end in a program of its own (bpf/camus_xdp.c, wide_union); more
# than 1,024: TC's copies go on in a tail call per 1,024 (bpf/camus_tc.c)
FINISH, TC_MORE, TC_CHUNK_WORDS = ProgramSpec("camus_finish", XDP_PROG, 0), ProgramSpec("camus_tc_more", SCHED_CLS_PROG, 0), 16
TC_PROGRAMS = frozenset({"camus_tc_in", "camus_tc_out", "camus_tc_local", TC_MORE.name})   # only with subscriber ports
# tail calls: (program array, slot) -> the program it runs (bpf/camus_xdp.c)
TAIL_CALLS = ((("progs", 0), "camus_msg"), (("tc_progs", 0), "camus_tc_local"), (("progs", 1), "camus_fan_decide"),
              (("tc_progs", 1), TC_MORE.name), (("progs", 2), FINISH.name))


def programs_of(limits: EbpfLimits) -> tuple[ProgramSpec, ...]:
    """The programs a build with these limits has."""
    return (PROGRAMS + ((FINISH,) if limits.port_words > PORT_WORDS else ())
            + ((TC_MORE,) if limits.port_words > TC_CHUNK_WORDS else ()))


@dataclass(frozen=True)
class _Fn:
    fd: int


class XdpProgram:
    """The classifier's programs and maps, loaded: from the program cache when this program was
    built before (no compile), else built by BCC (and kept in the cache)."""

    def __init__(self, programs: dict[str, int], map_fds: dict[str, int], spec: Spec, limits: EbpfLimits,
                 source: str, closer: Callable[[], None], bpf: Any = None, seconds: float = 0.0) -> None:
        self.programs, self.map_fds, self.spec, self.limits, self.source = programs, map_fds, spec, limits, source
        self._closer, self.bpf = closer, bpf          # bpf: the BCC module, when built this time
        self.seconds = seconds                        # how long building (or loading) took

    @property
    def cached(self) -> bool:
        """Loaded from the program cache (no compile)."""
        return self.bpf is None

    @property
    def fn(self) -> _Fn:
        """The XDP entry program (what is attached to the interface)."""
        return _Fn(self.programs["camus_xdp"])

    def fd(self, name: str) -> int:
        return self.programs[name]

    def map_fd(self, name: str) -> int:
        return self.map_fds[name]

    @classmethod
    def load(cls, spec: Spec, limits: EbpfLimits | None = None, app_id: int = 0,
             generation: int = 0, with_tc: bool = True,
             progress: Callable[[str], None] | None = None) -> "XdpProgram":
        """`app_id`: which of several apps on one interface this is (dataplane/apps.py); it
        tags the program's XDP metadata and TC copies so the apps' TC programs tell theirs apart.
        `generation` (0-255) tags the metadata too: a program grown for an update runs beside
        the one it replaces for a moment (dataplane/grow.py). `with_tc`: load the TC programs
        too (copies to subscriber ports; without a ports file nothing runs them, and the
        verifier takes 0.4 s over them). `progress` hears before a build (BCC: seconds)."""
        require_root()
        skip = frozenset() if with_tc else TC_PROGRAMS
        lim = limits or EbpfLimits()
        source = program_text(spec, lim)
        cflags = ["-Wno-unused-function", "-Wno-unused-variable", f"-DCAMUS_APP_ID={int(app_id)}",
                  f"-DCAMUS_GEN={int(generation) & 0xFF}"]
        t0 = time.perf_counter()
        key = program_cache.cache_key(source, cflags, bcc_version())
        entry = program_cache.read(key)
        if entry is not None:
            try:
                got = program_cache.load_entry(entry, skip)
            except (program_cache.EntryUnusable, KeyError, TypeError, ValueError) as exc:
                log.info("program cache entry %s not loaded (%s): building again", key, exc)
                program_cache.drop(key)
            else:
                try:
                    _link_tail_calls(got.programs, got.maps)
                except BaseException:
                    got.close()
                    raise
                return cls(got.programs, got.maps, spec, lim, source, got.close, seconds=time.perf_counter() - t0)
        if progress is not None:
            progress("BCC compiles the program (seconds, once: it is kept in the program cache)")
        bpf = _bcc_build(source, cflags)
        try:
            programs = _bcc_load(bpf, skip, programs_of(lim))
            maps = _bcc_maps(bpf)
            _link_tail_calls(programs, maps)
            try:
                program_cache.write(key, program_cache.capture(
                    maps, {ps: bpf.dump_func(ps.name.encode()) for ps in programs_of(lim)},
                    _bcc_license(bpf), inner_maps(source)))
            except (program_cache.EntryUnusable, OSError) as exc:     # attach goes on: only the cache misses
                log.info("program not kept in the cache: %s", exc)
        except BaseException:
            bpf.cleanup()
            raise
        return cls(programs, maps, spec, lim, source, bpf.cleanup, bpf, time.perf_counter() - t0)

    # -- tables ---------------------------------------------------------------------------
    @property
    def maps(self) -> MapSet:
        names = MAP_NAMES + (OPTIONAL_MAPS if self.spec.topics else ())
        return MapSet({name: self.map_fds[name] for name in names})

    def write(self, c: MapContents) -> None:
        """Write a complete table set, then point the root at it (the last, atomic step)."""
        self.maps.write(c)

    def remove(self, c: MapContents) -> None:
        """Take out a table set written earlier (after the root moved away from it)."""
        self.maps.remove(c)

    def set_malformed_policy(self, pass_them: bool) -> None:
        self.maps.cfg(CFG_MALFORMED, int(pass_them))

    def set_recording(self, on: bool) -> None:
        self.maps.cfg(CFG_RECORD, int(on))

    def stats(self) -> dict[str, int]:
        return self.maps.stats()

    # -- running packets ------------------------------------------------------------------
    def run(self, packet: bytes, repeat: int = 1) -> TestRun:
        return test_run(self.fn.fd, packet, repeat)

    def classify(self, packet: bytes) -> PacketResult:
        """Run one packet with recording on and read back what each message got."""
        self.set_recording(True)
        fd, n = self.map_fds["results"], self.limits.max_msgs
        lib = libbpf()
        result_t = self.maps.structs.Result
        blank = result_t()
        for i in range(n + 1):
            lib.bpf_map_update_elem(fd, ctypes.byref(ctypes.c_int(i)), ctypes.byref(blank), 0)
        out = self.run(packet)

        def result(i: int) -> Any:
            r = result_t()
            lib.bpf_map_lookup_elem(fd, ctypes.byref(ctypes.c_int(i)), ctypes.byref(r))
            return r
        summary = result(n)
        msgs = []
        for i in range(min(summary.state, n)):
            r = result(i)
            msgs.append((r.state, r.flags, tuple(r.ports)))
        return PacketResult(out.verdict, msgs, tuple(summary.ports), summary.flags)

    def output_packet(self, packet: bytes, port_bit: int, keep: int) -> TestRun:
        """What TC sends to port bit `port_bit` for `packet` when the messages in the `keep`
        mask go there: the kernel's own pruning and rewriting (camus_tc_out), run with
        BPF_PROG_TEST_RUN on a copy, so nothing is transmitted."""
        mark = CAMUS_MARK_TAG | (port_bit & 0xFF) << 16 | (keep & 0xFFFF)
        return test_run(self.programs["camus_tc_out"], packet, 1, skb_context(mark))

    def close(self) -> None:
        self._closer()


def bcc_version() -> str:
    """BCC's version without importing it (its import loads LLVM): the version file and the
    library it wraps."""
    import importlib.util
    found = importlib.util.find_spec("bcc")
    if found is None or not found.origin:
        return "none"
    where = Path(found.origin).parent
    parts = [(where / "version.py").read_text() if (where / "version.py").exists() else ""]
    for lib in sorted(Path("/usr/lib").glob("*/libbcc.so*")) + sorted(Path("/usr/lib").glob("libbcc.so*")):
        try:
            st = lib.stat()
            parts.append(f"{lib}:{st.st_size}:{int(st.st_mtime)}")
        except OSError:
            pass
    return "|".join(parts)


def _bcc_build(source: str, cflags: list[str]) -> Any:
    bcc = bcc_module()
    if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        raise DataplaneError(f"no kernel headers at /lib/modules/{os.uname().release}/build: "
                             "run scripts/setup.sh (links Debian's linux-headers for BCC)")
    try:
        return bcc.BPF(text=source.encode(), cflags=cflags)
    except Exception as exc:   # BCC raises a bare Exception on compile errors
        raise DataplaneError(f"BCC could not compile the program: {exc}") from exc


def _bcc_load(bpf: Any, skip: frozenset[str], specs: tuple[ProgramSpec, ...] = PROGRAMS) -> dict[str, int]:
    """Every program (but `skip`) through the verifier; its log's tail in the error when one is
    refused."""
    with _capture_fd2() as log_text:
        try:
            fds = {ps.name: bpf.load_func(ps.name.encode(), ps.prog_type,
                                          attach_type=ps.attach_type or -1).fd
                   for ps in specs if ps.name not in skip}
            failure = None
        except Exception as exc:     # BCC prints the verifier log to fd 2
            failure = exc
    if failure is not None:
        raise DataplaneError("the kernel verifier rejected the program "
                             f"({failure}); its last lines:\n" + _tail(log_text.text)) from failure
    return fds


def _bcc_maps(bpf: Any) -> dict[str, int]:
    """Every map of the BCC module by name (the cache records them all)."""
    from bcc.libbcc import lib
    lib.bpf_num_tables.restype, lib.bpf_num_tables.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    lib.bpf_table_name.restype, lib.bpf_table_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_ulonglong]
    lib.bpf_table_fd_id.restype, lib.bpf_table_fd_id.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_ulonglong]
    return {lib.bpf_table_name(bpf.module, i).decode(): lib.bpf_table_fd_id(bpf.module, i)
            for i in range(lib.bpf_num_tables(bpf.module))}


def inner_maps(source: str) -> dict[str, str]:
    """Each map of maps and the map its declaration names as the template of its inner maps."""
    import re
    return {m[1]: m[2] for m in re.finditer(r'BPF_(?:HASH|ARRAY)_OF_MAPS\(\s*(\w+)\s*,[^"]*"(\w+)"', source)}


def _bcc_license(bpf: Any) -> str:
    from bcc.libbcc import lib
    return (lib.bpf_module_license(bpf.module) or b"GPL").decode()


def _link_tail_calls(programs: dict[str, int], maps: dict[str, int]) -> None:
    lib = libbpf()
    for (array, slot), name in TAIL_CALLS:
        if name not in programs:            # not loaded (with_tc): the slot stays empty
            continue
        if lib.bpf_map_update_elem(maps[array], ctypes.byref(ctypes.c_int(slot)),
                                   ctypes.byref(ctypes.c_int(programs[name])), 0) != 0:
            raise DataplaneError(f"cannot link {name} into {array}[{slot}]: {os.strerror(ctypes.get_errno())}")


class _capture_fd2:
    """Collect what C code writes to file descriptor 2 (BCC's verifier log) while active."""

    def __enter__(self) -> "_capture_fd2":
        import tempfile
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()


def _tail(text: str, lines: int = 25) -> str:
    rows = [r for r in text.splitlines() if r.strip()]
    return "\n".join(rows[-lines:])
