/* camus-xdp fan-out by XDP broadcast (appended to camus_xdp.c: shared maps).
 *
 * camus_fan_decide (tail-called by camus_xdp for a delivering packet, fan_out in camus_xdp.c):
 * when struct camus_fan allows it, the packet leaves by bpf_redirect_map(..., BPF_F_BROADCAST)
 * through the devmap of exactly its ports (fan_groups) or of every broadcast port: the kernel
 * copies the XDP frame (metadata included) to each interface and runs camus_fan_out on each
 * copy before the device sends it. No skb is built for the broker's own stack and no TC clone
 * is made (bench/fanout_bench.py prices both ways; dataplane/fanout.py says when each is used).
 *
 * camus_fan_out (devmap egress, once per copy): finds the copy's port by its interface, drops
 * it if the packet does not go there, else keeps only that port's messages and rewrites the
 * destination for a REMOTE port: the same pruning as TC's (camus_prune.h, pasted below for
 * XDP frames). */

#define PRUNE_CTX struct xdp_md
#define PRUNE_FN prune_xdp
#define PRUNE_UDP6 udp6_checksum_xdp
#define PRUNE_LOAD(c, off, p, n) bpf_xdp_load_bytes(c, off, p, n)
#define PRUNE_STORE(c, off, p, n) bpf_xdp_store_bytes(c, off, p, n)
#define PRUNE_LEN(c) ((__u32)((c)->data_end - (c)->data))
#define PRUNE_PULL(c) 0
#define PRUNE_TAIL(c, new_end) bpf_xdp_adjust_tail(c, (int)(new_end) - (int)PRUNE_LEN(c))
#define PRUNE_OK XDP_PASS
#define PRUNE_DROP XDP_DROP
/*@CAMUS_PRUNE_H@*/

/* Tail-called by camus_xdp for a delivering packet whose ring slot and metadata are written:
 * this CPU's scratch still holds its verdict. */
int camus_fan_decide(struct xdp_md *ctx) {
    struct camus_scratch *s = get_scratch();
    return s ? fan_out(s) : XDP_PASS;
}

int camus_fan_out(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    struct camus_meta *meta = (void *)(long)ctx->data_meta;
    if ((void *)(meta + 1) > data || meta->magic != CAMUS_META_MAGIC)
        return XDP_DROP;                       /* cannot happen: the classifier wrote it */
    __u32 ifindex = ctx->egress_ifindex;
    __u32 *port_of = fan_port.lookup(&ifindex);
    __u32 slot = meta->seq & (CAMUS_RING - 1);
    struct camus_pkt *pk = ring.lookup(&slot);  /* this CPU's: the copies leave in the same poll */
    if (!port_of || !pk)
        return XDP_DROP;
    __u32 port = *port_of;
    __u32 w = port >> 6;
    if (w >= CAMUS_PORT_WORDS)
        return XDP_DROP;
    __u64 bit = 1ULL << (port & 63);
    if (!(pk->ports[w] & bit))
        return XDP_DROP;                       /* every entry gets a copy: not this port's packet */
    __u32 keep = 0;            /* the messages this port gets: from their leaves, as TC reads them */
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        __u32 state = i < pk->nmsgs ? pk->msg_state[i] : 0;
        __u64 ports = pk->msg_ports[i][w];         /* XDP wrote these for the bit-vector stage */
        if (state != CAMUS_STATE_BV) {
            struct camus_leaf *l = leaf.lookup(&state);
            ports = l ? l->ports[w] : 0;
        }
        keep |= nonzero(ports & bit) << i;
    }
    pk->copy_keep = keep;     /* the copies of this CPU's broadcasts are pruned one at a time */
    struct camus_port *pc = ports_cfg.lookup(&port);
    if (!pc)
        return XDP_DROP;
    __u32 n = pk->nmsgs;
    __u32 all = n >= 32 ? 0xFFFFFFFF : (1U << n) - 1;
    int verdict = XDP_PASS;
    if (pc->kind != CAMUS_PORT_IFACE || (keep & all) != all)
        verdict = prune_xdp(ctx, pk->copy_keep, pc);
    if (verdict == XDP_PASS)
        count_port(port);
    return verdict;
}
