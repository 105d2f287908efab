"""BPF_PROG_TEST_RUN through libbpf's bpf_prog_test_run_opts: run a loaded program on a packet.

The kernel executes the real program on the bytes (repeat N times for stable ns/packet) and
returns its verdict and the packet as the program left it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

XDP_VERDICTS = {0: "XDP_ABORTED", 1: "XDP_DROP", 2: "XDP_PASS", 3: "XDP_TX", 4: "XDP_REDIRECT"}


class _Opts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


@dataclass
class TestRun:
    retval: int
    packet: bytes
    ns_per_run: int

    @property
    def verdict(self) -> str:
        return XDP_VERDICTS.get(self.retval, str(self.retval))


_lib: ctypes.CDLL | None = None


def libbpf() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("bpf") or "libbpf.so.1"
        _lib = ctypes.CDLL(name, use_errno=True)
        _lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_Opts)]
        for fn in ("bpf_map_update_elem", "bpf_map_lookup_elem"):
            getattr(_lib, fn).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p] + (
                [ctypes.c_uint64] if fn == "bpf_map_update_elem" else [])
        _lib.bpf_map_delete_elem.argtypes = [ctypes.c_int, ctypes.c_void_p]
        _lib.bpf_map_get_next_key.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        _lib.bpf_map_update_batch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
        _lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
        _lib.bpf_obj_pin.argtypes = [ctypes.c_int, ctypes.c_char_p]
    return _lib


SKB_CTX_SIZE = 192          # sizeof(struct __sk_buff)
SKB_MARK_OFFSET = 8         # offsetof(struct __sk_buff, mark)


def skb_context(mark: int) -> bytes:
    """A struct __sk_buff for running a TC program: only `mark` set (the kernel accepts a few
    fields from user space and wants the rest zero)."""
    ctx = bytearray(SKB_CTX_SIZE)
    ctx[SKB_MARK_OFFSET:SKB_MARK_OFFSET + 4] = mark.to_bytes(4, "little")
    return bytes(ctx)


def test_run(prog_fd: int, packet: bytes, repeat: int = 1, ctx: bytes | None = None) -> TestRun:
    """Run the program on `packet`; `ctx` is the context for program types that take one
    (TC: skb_context)."""
    buf = ctypes.create_string_buffer(packet, len(packet))
    out = ctypes.create_string_buffer(max(256, len(packet) + 256))
    opts = _Opts(sz=ctypes.sizeof(_Opts), data_in=ctypes.cast(buf, ctypes.c_void_p),
                 data_out=ctypes.cast(out, ctypes.c_void_p), data_size_in=len(packet),
                 data_size_out=len(out), repeat=repeat)
    if ctx is not None:
        ctx_buf = ctypes.create_string_buffer(ctx, len(ctx))
        opts.ctx_in = ctypes.cast(ctx_buf, ctypes.c_void_p)
        opts.ctx_size_in = len(ctx)
    rc = libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if rc != 0:
        err = ctypes.get_errno()
        hint = " (XDP test runs need at least 14 bytes)" if len(packet) < 14 else ""
        raise OSError(err, f"BPF_PROG_TEST_RUN failed: {os.strerror(err)}{hint}")
    return TestRun(opts.retval, out.raw[:opts.data_size_out], opts.duration)


test_run.__test__ = False  # type: ignore[attr-defined]   # not a pytest test


BPF_F_TEST_XDP_LIVE_FRAMES = 2


def live_frames(prog_fd: int, packet: bytes, ctx: bytes, repeat: int, batch_size: int = 64) -> int:
    """Run an XDP program `repeat` times in live-frames mode: each run's packet starts as
    `packet` and what the program returns is carried out for real (XDP_TX: transmitted from the
    context's ingress interface). `ctx` is a struct xdp_md with data_end = len(packet) and
    ingress_ifindex set. Returns the kernel's mean ns per run."""
    buf = ctypes.create_string_buffer(packet, len(packet))
    ctx_buf = ctypes.create_string_buffer(ctx, len(ctx))
    opts = _Opts(sz=ctypes.sizeof(_Opts), data_in=ctypes.cast(buf, ctypes.c_void_p), data_size_in=len(packet),
                 ctx_in=ctypes.cast(ctx_buf, ctypes.c_void_p), ctx_size_in=len(ctx), repeat=repeat,
                 flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch_size)
    if libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"BPF_PROG_TEST_RUN (live frames) failed: {os.strerror(err)}")
    return int(opts.duration)
