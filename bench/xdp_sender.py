"""The benchmark publisher from inside the kernel: XDP live frames (bpf/camus_sender.c).

    sudo python bench/xdp_sender.py IFACE FRAMES RATE_PPS MAX_SECONDS [--loops N]

Same arguments, frame file and last line as the AF_PACKET sender (bench/c/send.c): the frames
of FRAMES (records of u16 length, u8 stamp count, u16 stamp offsets, frame bytes) are sent once
each, in order, out of IFACE, at RATE_PPS frames a second (0: as fast as it goes), for at most
MAX_SECONDS, each message's timestamp field stamped with the wall clock as the frame leaves; it
prints "sent N frames in S s". `--loops N` sends the file N times (the sequence numbers repeat:
for measuring the sender itself).

How: BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES runs the program `repeat` times on a
template packet; each run writes the next frame from a map into its packet and returns XDP_TX,
which the kernel transmits from IFACE as if it had arrived there and been bounced. No socket,
no skb, no copy from user space per frame: one core sends millions of frames a second. Pacing:
runs in slices of a millisecond's frames, each slice started on schedule. The receiving side of
a veth needs an XDP program (or GRO on) to take XDP_TX frames: the camus-xdp broker has one;
for userspace brokers the lab attaches a pass-through program (`camus.lab.namespaces.pass_through`).

Run it inside the sender's network namespace (`ip netns exec NS python bench/xdp_sender.py ...`).
"""
from __future__ import annotations

import argparse
import ctypes
import socket
import struct
import sys
import time
from pathlib import Path

from camus.bench.clocks import realtime_minus_monotonic_ns

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bpf" / "camus_sender.c"
FRAME_MAX = 2048                       # a power of two (the program masks lengths with it)
STAMPS_MAX = 16
BPF_F_TEST_XDP_LIVE_FRAMES = 2
XDP_MD = struct.Struct("<6I")          # data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex


def read_frames(path: Path) -> list[tuple[bytes, list[int]]]:
    """The C sender's frame file: (frame, timestamp offsets) per frame."""
    raw, out, i = path.read_bytes(), [], 0
    while i < len(raw):
        length, n = struct.unpack_from("<HB", raw, i)
        stamps = list(struct.unpack_from(f"<{n}H", raw, i + 3))
        i += 3 + 2 * n
        out.append((raw[i:i + length], stamps))
        i += length
    return out


class _Frame(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("nstamps", ctypes.c_uint16), ("stamps", ctypes.c_uint16 * STAMPS_MAX),
                ("data", ctypes.c_uint8 * FRAME_MAX)]


class _Cfg(ctypes.Structure):
    _fields_ = [("nframes", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("limit", ctypes.c_uint64),
                ("interval_ns", ctypes.c_uint64), ("clock_offset", ctypes.c_uint64)]


class _State(ctypes.Structure):
    _fields_ = [("cursor", ctypes.c_uint64), ("next_ns", ctypes.c_uint64)]


class XdpSender:
    """The loaded sender with its frames; `send` transmits from `iface`."""

    def __init__(self, frames: list[tuple[bytes, list[int]]]) -> None:
        from camus.dataplane.program import DataplaneError, bcc_module, require_root
        require_root()
        if not frames:
            raise ValueError("no frames to send")
        for k, (frame, stamps) in enumerate(frames):
            if not 14 <= len(frame) <= FRAME_MAX or len(stamps) > STAMPS_MAX:
                raise ValueError(f"frame {k}: {len(frame)} bytes, {len(stamps)} stamps "
                                 f"(14..{FRAME_MAX} bytes, at most {STAMPS_MAX} stamps)")
        bcc = bcc_module()
        try:
            self.bpf = bcc.BPF(text=SOURCE.read_bytes(), cflags=[
                f"-DSENDER_FRAMES={len(frames)}", f"-DSENDER_FRAME_MAX={FRAME_MAX}", f"-DSENDER_STAMPS_MAX={STAMPS_MAX}"])
            self.fn = self.bpf.load_func(b"camus_send", bcc.BPF.XDP)
        except Exception as exc:
            raise DataplaneError(f"the XDP sender did not load: {exc}") from exc
        table = self.bpf[b"frames"]
        for k, (frame, stamps) in enumerate(frames):
            f = _Frame(len(frame), len(stamps))
            f.stamps[:len(stamps)] = stamps
            ctypes.memmove(f.data, frame, len(frame))
            table[ctypes.c_int(k)] = f
        self.frames = len(frames)
        # One byte longer than any frame, so that every run changes the packet's length: the
        # kernel re-reads a live frame's length and metadata size from the run's context only
        # when the context differs from the template (net/bpf/test_run.c, ctx_was_changed), and a
        # frame that came back from a broker whose XDP broadcast trimmed it in place (camus_fan.c
        # prunes the last copy, the original frame) kept the trimmed length for its next send:
        # frames of the template's length left short, and the broker counted them malformed.
        self.template = max(len(f) for f, _ in frames) + 1

    def sent(self) -> tuple[int, int]:
        """Frames and bytes transmitted so far (all CPUs)."""
        per_cpu = self.bpf[b"sent"]
        return (sum(per_cpu[ctypes.c_int(0)]), sum(per_cpu[ctypes.c_int(1)]))

    def send(self, iface: str, count: int, rate: float = 0.0, max_seconds: float = 1e9) -> tuple[int, float]:
        """Transmit `count` frames (the map's frames in order, wrapping) out of `iface`, at
        `rate` frames/s (0: as fast as it goes) for at most `max_seconds`; returns (frames sent,
        seconds taken, the ~25 ms set-up of each test-run call included)."""
        from camus.dataplane.testrun import live_frames
        ifindex = socket.if_nametoindex(iface)
        template = bytes(self.template)
        ctx = XDP_MD.pack(0, len(template), 0, ifindex, 0, 0)
        offset = realtime_minus_monotonic_ns()
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.bpf[b"sender_cfg"][ctypes.c_int(0)] = _Cfg(self.frames, 0, count, int(1e9 / rate) if rate else 0, offset)
        self.bpf[b"sender_state"][ctypes.c_int(0)] = _State(0, now)
        state = self.bpf[b"sender_state"]
        t0 = time.monotonic()
        while True:
            done = state[ctypes.c_int(0)].cursor
            left_s = max_seconds - (time.monotonic() - t0)
            if done >= count or left_s <= 0:
                break
            # A call costs ~25 ms before its first run (the kernel sets up a page pool), a run
            # ~100 ns (one that is not due yet) to ~300 ns: calls of up to about half a second,
            # no more runs than the frames (or, paced, the time) left need.
            want_s = min(left_s, (count - done) / rate) if rate else 0.0
            runs = int(min(5_000_000, max(100_000, want_s * 1e7))) if rate else min(count - done, 5_000_000)
            live_frames(self.fn.fd, template, ctx, runs)
        seconds = time.monotonic() - t0
        self.bpf[b"sender_cfg"][ctypes.c_int(0)] = _Cfg(self.frames, 0, 0, 0, offset)   # stop
        return int(state[ctypes.c_int(0)].cursor), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("iface")
    ap.add_argument("frames", type=Path)
    ap.add_argument("rate", type=float, help="frames/s (0: as fast as it goes)")
    ap.add_argument("max_seconds", type=float)
    ap.add_argument("--loops", type=int, default=1, help="send the file this many times")
    args = ap.parse_args()
    frames = read_frames(args.frames)
    sender = XdpSender(frames)
    n, seconds = sender.send(args.iface, len(frames) * args.loops, args.rate, args.max_seconds)
    print(f"sent {n} frames in {seconds:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
