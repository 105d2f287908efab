/* camus_sender: the benchmark publisher as an XDP program, run by BPF_PROG_TEST_RUN in live-frames
 * mode (BPF_F_TEST_XDP_LIVE_FRAMES): each run takes the next prepared feed frame from a map,
 * writes it into the packet, stamps the send time into its messages' timestamp fields and
 * returns XDP_TX, so the kernel transmits it out of the context's ingress interface without a
 * socket, an skb or a copy from user space. One core sends several million frames a second this
 * way, far beyond the AF_PACKET sender (bench/c/send.c), so a broker's lossless rate is the
 * broker's and not the sender's.
 *
 * Built by BCC with -DSENDER_FRAMES=N (map size), -DSENDER_FRAME_MAX (a power of two) and
 * -DSENDER_STAMPS_MAX.
 * bench/xdp_sender.py loads it, fills the maps from the C sender's frame file and paces the runs.
 */
#include <uapi/linux/bpf.h>

struct sender_frame {
    __u16 len;                              /* bytes of data[] that are the frame */
    __u16 nstamps;                          /* timestamp fields to stamp */
    __u16 stamps[SENDER_STAMPS_MAX];        /* their offsets from the frame start */
    __u8 data[SENDER_FRAME_MAX];
};

struct sender_cfg {
    __u32 nframes;                          /* frames in the map; the cursor wraps after the last */
    __u32 pad;
    __u64 limit;                            /* frames to send in all; runs after that send nothing */
    __u64 interval_ns;                      /* pacing: one frame per interval (0: every run sends) */
    __u64 clock_offset;                     /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns: receivers compare
                                               the stamp with their own wall clock */
};

struct sender_state {                       /* one sending CPU owns it */
    __u64 cursor;                           /* frames sent so far; the next frame is cursor % nframes */
    __u64 next_ns;                          /* pacing: when the next frame is due */
};

/* A run that finds the sender further behind than this (a test-run call's ~25 ms set-up, a stall
 * of the VM) skips the missed frames' slots instead of sending them back to back: a veth's receive
 * ring holds 256 frames (a NIC's, thousands), and a catch-up burst of a millisecond's frames
 * overflowed it at rates the broker behind it sustained. */
#define CATCH_UP_NS 100000

BPF_ARRAY(frames, struct sender_frame, SENDER_FRAMES);
BPF_ARRAY(sender_cfg, struct sender_cfg, 1);
BPF_ARRAY(sender_state, struct sender_state, 1);
BPF_PERCPU_ARRAY(sent, __u64, 2);           /* [0] frames, [1] bytes */

static __always_inline void add(__u32 idx, __u64 n) {
    __u64 *c = sent.lookup(&idx);
    if (c)
        *c += n;
}

int camus_send(struct xdp_md *ctx) {
    __u32 zero = 0;
    struct sender_cfg *cfg = sender_cfg.lookup(&zero);
    struct sender_state *st = sender_state.lookup(&zero);
    if (!cfg || !st || cfg->nframes == 0)
        return XDP_ABORTED;
    if (st->cursor >= cfg->limit)
        return XDP_DROP;                    /* done: user space stops calling soon */
    /* Pacing in the kernel: a run before the next frame is due sends nothing (user space keeps
     * the runs coming; one costs ~100 ns), so frames leave evenly spaced, not in bursts. */
    if (cfg->interval_ns) {
        __u64 now = bpf_ktime_get_ns();
        if (now < st->next_ns)
            return XDP_DROP;
        st->next_ns += cfg->interval_ns;
        if (now > st->next_ns + CATCH_UP_NS)    /* further behind: no burst to catch up */
            st->next_ns = now;
    }
    __u32 i = st->cursor % cfg->nframes;
    st->cursor += 1;
    struct sender_frame *f = frames.lookup(&i);
    if (!f)
        return XDP_ABORTED;
    if (f->len < 14 || f->len > SENDER_FRAME_MAX)
        return XDP_ABORTED;
    /* The same length, in a form the verifier bounds to [1, SENDER_FRAME_MAX] (a power of two)
     * whichever register the compiler keeps it in. */
    __u32 len = ((f->len - 1) & (SENDER_FRAME_MAX - 1)) + 1;
    /* The run's packet starts as the template user space gave (or as the last run left its
     * page): set its length, then its bytes. */
    int delta = (int)len - (int)((long)ctx->data_end - (long)ctx->data);
    if (delta && bpf_xdp_adjust_tail(ctx, delta))
        return XDP_ABORTED;
    if (bpf_xdp_store_bytes(ctx, 0, f->data, len))
        return XDP_ABORTED;
    __u64 now = bpf_ktime_get_ns() + cfg->clock_offset;
    __u8 ts[6];                             /* ITCH: 48-bit big-endian nanoseconds */
    #pragma unroll
    for (int b = 0; b < 6; b++)
        ts[b] = (__u8)(now >> (8 * (5 - b)));
    for (int k = 0; k < SENDER_STAMPS_MAX; k++) {
        if (k >= f->nstamps)
            break;
        __u32 off = f->stamps[k];
        if (off + 6 > len)
            break;
        bpf_xdp_store_bytes(ctx, off, ts, 6);
    }
    add(0, 1);
    add(1, len);
    return XDP_TX;
}
