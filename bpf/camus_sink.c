/* camus_sink: a benchmark subscriber as an XDP program on its veth (bench/sink_bench.py). It counts
 * the MoldUDP64 copies a broker delivered and the messages in them, measures each copy's latency
 * from the send time the sender stamped into its first message, and drops the frame. A receiving
 * process costs several microseconds per copy (IP, UDP, a socket, a wake-up, a write); this costs
 * ~100 ns, so the subscribers' CPU stops being where the lab's rate ends and a broker's lossless
 * rate is the broker's own — as with subscribers on other hosts behind a NIC.
 *
 * Built by BCC with -DSINK_PORTS (a power of two) and -DSINK_BUCKETS (latency histogram buckets of
 * SINK_BUCKET_NS each; the last one holds everything slower).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#define MOLD_HEADER 20
#define STAMP_OFFSET 5          /* an ITCH message's 48-bit timestamp, after its 2-byte length */
#define MASK48 ((1ULL << 48) - 1)

struct sink_count {
    __u64 copies;               /* frames received */
    __u64 messages;             /* the MoldUDP64 message counts of those frames */
    __u64 other;                /* frames that were not a broker's copy (ARP, IPv6 router chatter) */
};

BPF_PERCPU_ARRAY(counts, struct sink_count, SINK_PORTS);   /* [subscriber port] */
BPF_PERCPU_ARRAY(latency, __u64, SINK_BUCKETS);            /* copies per latency bucket */
BPF_ARRAY(sink_cfg, __u64, 1);                             /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */

int camus_sink(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + sizeof(*eth);
    if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
        ip->protocol != IPPROTO_UDP) {
        __u32 zero = 0;                          /* counted against port 0: nobody's */
        struct sink_count *c = counts.lookup(&zero);
        if (c)
            c->other += 1;
        return XDP_PASS;
    }
    /* The subscriber is the third octet of its address (NET.p.2, dataplane/lab.py). */
    __u32 port = (bpf_ntohl(ip->daddr) >> 8) & (SINK_PORTS - 1);
    struct sink_count *c = counts.lookup(&port);
    if (!c)
        return XDP_DROP;
    __u8 *mold = (void *)(ip + 1) + sizeof(struct udphdr);
    __u8 *stamp = mold + MOLD_HEADER + 2 + STAMP_OFFSET;
    if ((void *)(stamp + 6) > end) {
        c->other += 1;
        return XDP_DROP;
    }
    c->copies += 1;
    c->messages += ((__u32)mold[18] << 8) | mold[19];
    __u64 sent = 0;
    #pragma unroll
    for (int i = 0; i < 6; i++)
        sent = (sent << 8) | stamp[i];
    __u32 zero = 0;
    __u64 *offset = sink_cfg.lookup(&zero);
    if (offset && *offset) {
        __u64 took = ((bpf_ktime_get_ns() + *offset) - sent) & MASK48;
        __u32 bucket = took / SINK_BUCKET_NS;
        if (bucket >= SINK_BUCKETS)
            bucket = SINK_BUCKETS - 1;
        __u64 *n = latency.lookup(&bucket);
        if (n)
            *n += 1;
    }
    return XDP_DROP;
}
