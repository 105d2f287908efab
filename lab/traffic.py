"""Traffic under test that runs until the test has seen what it waits for: a feed that keeps
sending (each frame's counters bumped) and a capture that streams what an interface receives.
Tests wait for the event (a swap seen, a message delivered) with a generous bound, never for a
guessed time: how long a program build or a swap takes depends on the machine (issue 40)."""
from __future__ import annotations

import subprocess
import sys

FEED_SCRIPT = """  # argv: IFACE GAP_S MAX_PACKETS; stdin: a frame's hex, then the offsets of its counters
# The frame again and again; in packet k, counter i (8 bytes, an ITCH order reference) holds
# k * len(counters) + i + 1. Stops at a line (or EOF) on stdin or MAX_PACKETS; prints the count.
import select, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
gap, most = float(sys.argv[2]), int(sys.argv[3])
frame = bytearray(bytes.fromhex(sys.stdin.readline().strip()))
offsets = [int(x) for x in sys.stdin.readline().split()]
sent = 0
print("sending", flush=True)
while sent < most and not select.select([sys.stdin], [], [], 0)[0]:
    for i, off in enumerate(offsets):
        frame[off:off + 8] = (sent * len(offsets) + i + 1).to_bytes(8, "big")
    s.send(frame)
    sent += 1
    if gap:
        time.sleep(gap)
print(sent, flush=True)
"""

STREAM_CAPTURE_SCRIPT = """  # argv: IFACE SECS: each IPv4 frame IFACE receives, a hex line as it comes, for <= SECS
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((sys.argv[1], 0))
s.settimeout(0.2)
end = time.time() + float(sys.argv[2])
print("ready", flush=True)
while time.time() < end:
    try:
        print(s.recv(65535).hex(), flush=True)
    except socket.timeout:
        pass
"""


class StreamCapture:
    """Frames a subscriber receives, as they come: a test waits for the frames it expects (with
    a generous bound), never for a guessed time. `cmd_prefix` runs it in the subscriber's
    namespace (`ip netns exec NS`)."""

    def __init__(self, iface: str, cmd_prefix: list[str], bound_s: float = 300.0) -> None:
        import threading
        self.frames: list[bytes] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen([*cmd_prefix, sys.executable, "-c", STREAM_CAPTURE_SCRIPT, iface, str(bound_s)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the capture on {iface} did not start")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.frames.append(bytes.fromhex(line.strip()))
                self._cond.notify_all()

    def wait_for(self, predicate, timeout_s: float = 120.0) -> list[bytes]:
        """Wait until predicate(frames so far) holds; raises TimeoutError past the bound."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.frames), timeout=timeout_s):
                raise TimeoutError(f"capture: condition not met in {timeout_s:.0f} s ({len(self.frames)} frames)")
            return list(self.frames)

    def stop(self) -> list[bytes]:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        with self._cond:
            return list(self.frames)


class Feed:
    """FEED_SCRIPT from a publisher namespace: `frame` sent over and over with its counters at
    `offsets` numbered on, until stop() (which returns how many packets went out)."""

    def __init__(self, ns: str, iface: str, frame: bytes, offsets: list[int], gap_s: float = 0.001,
                 most: int = 1_000_000) -> None:
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", FEED_SCRIPT, iface, str(gap_s),
                                      str(most)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{frame.hex()}\n{' '.join(map(str, offsets))}\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "sending":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("the feed did not start")

    def stop(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        sent = int(self.proc.stdout.readline())
        self.proc.wait(timeout=30)
        return sent
