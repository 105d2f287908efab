"""The XDP live-frames sender (bench/xdp_sender.py) on a real veth: every frame of the file
leaves once per loop, in order, byte for byte except the timestamps, which carry the wall
clock as the frame left; pacing holds the rate; the C sender's frame file is the input."""
from __future__ import annotations

import socket
import time

import pytest

from camus.bench.feeds import ETH_IP_UDP, FeedConfig, itch_feed, write_frames
from camus.bench.xdp_sender import XdpSender, read_frames
from camus.lab.namespaces import pass_through
from tests.conftest import veth_pair

pytestmark = pytest.mark.bpf
A, B = "cxsnd0", "cxsnd1"


@pytest.fixture
def veth():
    with veth_pair(A, B):
        yield



def test_frames_leave_in_order_stamped_and_paced(veth, tmp_path) -> None:
    feed = itch_feed(FeedConfig(messages=600, seed=3))
    path = write_frames(feed, tmp_path / "frames.bin", src_ip="10.9.0.1", dst_ip="10.9.0.2",
                        src_mac=bytes.fromhex("020000000001"), dst_mac=bytes.fromhex("020000000002"), port=9000)
    frames = read_frames(path)
    assert 50 < len(frames) < 200 and all(stamps for _, stamps in frames)
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    rx.bind((B, 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.settimeout(5)
    bpf = pass_through(B)                       # the veth takes XDP_TX frames only with XDP on its end
    try:
        sender = XdpSender(frames)
        before = time.time_ns()
        n, seconds = sender.send(A, 2 * len(frames), rate=2000)
        after = time.time_ns()
        assert n == 2 * len(frames) and sender.sent()[0] == n
        assert seconds >= 0.8 * n / 2000                      # paced: not faster than asked
        got = [rx.recv(4096) for _ in range(n)]
    finally:
        bpf.remove_xdp(B.encode(), 0)
        rx.close()
    for k, pkt in enumerate(got):
        frame, stamps = frames[k % len(frames)]
        assert len(pkt) == len(frame)
        masked = bytearray(pkt)
        for off in stamps:
            stamp = int.from_bytes(pkt[off:off + 6], "big")
            assert (before & (2**48 - 1)) <= stamp <= (after & (2**48 - 1))     # the wall clock, ns
            masked[off:off + 6] = frame[off:off + 6]
        assert bytes(masked) == frame, f"frame {k} differs beyond its timestamps"
    assert ETH_IP_UDP < min(stamps[0] for _, stamps in frames)


def test_a_frame_file_it_cannot_send_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="frame 1: 3000 bytes"):
        XdpSender([(bytes(60), [40]), (bytes(3000), [])])
    with pytest.raises(ValueError, match="no frames"):
        XdpSender([])


# The receiving end trims every frame and sends it back (XDP_TX), as a broker's XDP broadcast
# trims the frame it forwards in place; the sender's end drops it, returning the page to the
# sender's pool. The lengths that arrived are counted.
TRIM_AND_BOUNCE = b"""
BPF_HASH(lengths, u32, u64, 4096);
int trim_and_bounce(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    u32 len = ctx->data_end - ctx->data;
    if (data + 14 > (void *)(long)ctx->data_end || *(u16 *)(data + 12) != bpf_htons(0x88B5))
        return XDP_PASS;                         /* the veths' own IPv6 chatter */
    lengths.increment(len);
    if (bpf_xdp_adjust_tail(ctx, -8))
        return XDP_DROP;
    return XDP_TX;
}
int drop_all(struct xdp_md *ctx) { return XDP_DROP; }
"""


def test_a_frame_trimmed_downstream_leaves_whole_when_its_page_comes_back(veth) -> None:
    """The kernel re-reads a live frame's length from the run's context only when the context
    differs from the template: a page that came back trimmed (by a broker's in-place broadcast)
    once left short when the frame sent from it had the template's length."""
    from camus.dataplane.program import bcc_module
    bcc = bcc_module()
    frame = bytes.fromhex("020000000002020000000001") + b"\x88\xb5" + bytes(range(100))   # local experimental type
    bpf = bcc.BPF(text=TRIM_AND_BOUNCE)
    bpf.attach_xdp(B.encode(), bpf.load_func(b"trim_and_bounce", bcc.BPF.XDP), 0)
    bpf.attach_xdp(A.encode(), bpf.load_func(b"drop_all", bcc.BPF.XDP), 0)
    try:
        sender = XdpSender([(frame, [])])
        n, _ = sender.send(A, 3000)
        time.sleep(0.2)
        lengths = {k.value: v.value for k, v in bpf[b"lengths"].items()}
    finally:
        bpf.remove_xdp(A.encode(), 0)
        bpf.remove_xdp(B.encode(), 0)
    assert n == 3000
    assert lengths == {len(frame): 3000}, f"lengths that arrived (length: frames): {lengths}"
