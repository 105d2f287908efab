"""Loading the XDP classifier with BCC and writing its tables.

`XdpProgram.load(spec)` compiles and verifies the program for a spec (clear errors for: not
root, BCC or kernel headers missing, verifier rejection with its last lines). `write(contents)`
fills the maps from the eBPF back end's MapContents: capacity was checked by the back end, so
a write never half-fails on size.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from camus.compiler.backends.ebpf.program import EbpfLimits, program_text
from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.language.spec import Spec

from .fanout import BPF_XDP_DEVMAP
from .maps import CFG_MALFORMED, CFG_RECORD, MAP_NAMES, OPTIONAL_MAPS, MapSet
from .testrun import TestRun, skb_context, test_run

CAMUS_MARK_TAG = 0xC0000000          # bpf/camus_xdp.h: skb->mark of a copy



class DataplaneError(RuntimeError):
    """A data-plane operation failed; the message says what to do."""


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


class XdpProgram:
    def __init__(self, bpf, fn, spec: Spec, limits: EbpfLimits, source: str) -> None:
        self.bpf, self.fn, self.spec, self.limits, self.source = bpf, fn, spec, limits, source

    @classmethod
    def load(cls, spec: Spec, limits: EbpfLimits | None = None, app_id: int = 0,
             generation: int = 0) -> "XdpProgram":
        """`app_id`: which of several apps on one interface this is (dataplane/apps.py); it
        tags the program's XDP metadata and TC copies so the apps' TC programs tell theirs apart.
        `generation` (0-255) tags the metadata too: a program grown for an update runs beside
        the one it replaces for a moment (dataplane/grow.py)."""
        require_root()
        lim = limits or EbpfLimits()
        source = program_text(spec, lim)
        bcc = bcc_module()
        if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
            raise DataplaneError(f"no kernel headers at /lib/modules/{os.uname().release}/build: "
                                 "run scripts/setup.sh (links Debian's linux-headers for BCC)")
        try:
            bpf = bcc.BPF(text=source.encode(), cflags=["-Wno-unused-function", "-Wno-unused-variable",
                                                        f"-DCAMUS_APP_ID={int(app_id)}",
                                                        f"-DCAMUS_GEN={int(generation) & 0xFF}"])
        except Exception as exc:   # BCC raises a bare Exception on compile errors
            raise DataplaneError(f"BCC could not compile the program: {exc}") from exc
        with _capture_fd2() as log:
            try:
                fn = bpf.load_func(b"camus_xdp", bcc.BPF.XDP)
                msg_fn = bpf.load_func(b"camus_msg", bcc.BPF.XDP)
                bpf[b"progs"][ctypes.c_int(0)] = ctypes.c_int(msg_fn.fd)
                bpf.load_func(b"camus_tc_in", bcc.BPF.SCHED_CLS)
                bpf.load_func(b"camus_tc_out", bcc.BPF.SCHED_CLS)
                local_fn = bpf.load_func(b"camus_tc_local", bcc.BPF.SCHED_CLS)
                bpf[b"tc_progs"][ctypes.c_int(0)] = ctypes.c_int(local_fn.fd)
                bpf.load_func(b"camus_fan_out", bcc.BPF.XDP, attach_type=BPF_XDP_DEVMAP)   # fanout.py
                decide_fn = bpf.load_func(b"camus_fan_decide", bcc.BPF.XDP)
                bpf[b"progs"][ctypes.c_int(1)] = ctypes.c_int(decide_fn.fd)
                failure = None
            except Exception as exc:     # BCC prints the verifier log to fd 2
                failure = exc
        if failure is not None:
            raise DataplaneError("the kernel verifier rejected the program "
                                 f"({failure}); its last lines:\n" + _tail(log.text)) from failure
        return cls(bpf, fn, spec, lim, source)

    # -- tables ---------------------------------------------------------------------------
    @property
    def maps(self) -> MapSet:
        names = MAP_NAMES + (OPTIONAL_MAPS if self.spec.topics else ())
        return MapSet({name: self.bpf[name.encode()].map_fd for name in names})

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
        res = self.bpf[b"results"]
        n = self.limits.max_msgs
        res.clear()
        out = self.run(packet)
        summary = res[ctypes.c_int(n)]
        msgs = []
        for i in range(min(summary.state, n)):
            r = res[ctypes.c_int(i)]
            msgs.append((r.state, r.flags, tuple(r.ports)))
        return PacketResult(out.verdict, msgs, tuple(summary.ports), summary.flags)

    def output_packet(self, packet: bytes, port_bit: int, keep: int) -> TestRun:
        """What TC sends to port bit `port_bit` for `packet` when the messages in the `keep`
        mask go there: the kernel's own pruning and rewriting (camus_tc_out), run with
        BPF_PROG_TEST_RUN on a copy, so nothing is transmitted."""
        mark = CAMUS_MARK_TAG | (port_bit & 0xFF) << 16 | (keep & 0xFFFF)
        return test_run(self.bpf.funcs[b"camus_tc_out"].fd, packet, 1, skb_context(mark))

    def close(self) -> None:
        self.bpf.cleanup()


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
