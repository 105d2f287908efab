/* camus-xdp forwarding, after the XDP classifier (appended to camus_xdp.c: shared maps).
 *
 * camus_tc_in  (clsact ingress of the broker interface): for a packet XDP classified, send one
 *              copy to each subscribed port (bpf_clone_redirect to the port's interface), the
 *              copy's skb->mark saying which port it is for and which messages it keeps. The
 *              original goes to this host's stack only if a LOCAL port subscribed or a message
 *              has custom actions (they run on the host), trimmed to those messages.
 * camus_tc_out (clsact egress of every output interface): on a marked copy, drop the messages
 *              its port did not subscribe to (fixing the MoldUDP64 count, UDP and IP lengths and
 *              the IP checksum; the UDP checksum is zeroed, which IPv4 allows) and, for a REMOTE
 *              port, rewrite the destination MAC, IP and UDP port.
 */
#include <uapi/linux/pkt_cls.h>

#define CAMUS_MSG_COPY 128          /* largest message (with its length prefix) we move */

BPF_PROG_ARRAY(tc_progs, 1);                                  /* [0]: camus_tc_local */

static __always_inline struct camus_port *port_cfg(__u32 port) {
    return ports_cfg.lookup(&port);
}



#define PRUNE_CTX struct __sk_buff
#define PRUNE_FN prune
#define PRUNE_UDP6 udp6_checksum
#define PRUNE_LOAD(c, off, p, n) bpf_skb_load_bytes(c, off, p, n)
#define PRUNE_STORE(c, off, p, n) bpf_skb_store_bytes(c, off, p, n, 0)
#define PRUNE_LEN(c) ((c)->len)
#define PRUNE_PULL(c) bpf_skb_pull_data(c, (c)->len)
#define PRUNE_TAIL(c, new_end) bpf_skb_change_tail(c, new_end, 0)
#define PRUNE_OK TC_ACT_OK
#define PRUNE_DROP TC_ACT_SHOT
/*@CAMUS_PRUNE_H@*/

/* Copies for the ports of one 64-port word (W is a constant: no variable indexing). Paths
 * through the body rejoin with equal state (no counters), so the verifier prunes them. */
#define CAMUS_FAN_WORD(W)                                                            \
    do {                                                                             \
        __u64 word = pk->ports[W];                                                   \
        for (int n = 0; n < 64; n++) {                                               \
            if (!word)                                                               \
                break;                                                               \
            __u64 low = word & -word;                                                \
            word &= ~low;                                                            \
            struct camus_port *pc = port_cfg((W << 6) + bit_index(low));             \
            if (!pc)                                                                 \
                continue;                                                            \
            __u32 kind = pc->kind;                                                   \
            __u32 is_local = 1 ^ nonzero(kind ^ CAMUS_PORT_LOCAL);                   \
            __u32 keep = 0;                                                          \
            for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++)                            \
                keep |= nonzero(pk->msg_ports[i][W] & low) << i;                     \
            local |= is_local;                                                       \
            pk->local_keep |= keep & -is_local;                                      \
            if (kind == CAMUS_PORT_IFACE || kind == CAMUS_PORT_REMOTE) {             \
                skb->mark = CAMUS_MARK_TAG | ((((W << 6) + bit_index(low)) & 0xFF) << 16) \
                            | (keep & 0xFFFF);                                       \
                if (bpf_clone_redirect(skb, pc->ifindex, 0) == 0)                    \
                    count_port((W << 6) + bit_index(low));                           \
            }                                                                        \
        }                                                                            \
    } while (0)

int camus_tc_in(struct __sk_buff *skb) {
    void *data = (void *)(long)skb->data;
    struct camus_meta *meta = (void *)(long)skb->data_meta;
    if ((void *)(meta + 1) > data || meta->magic != CAMUS_META_MAGIC)
        return TC_ACT_UNSPEC;       /* not a packet this app classified: the next filter (another
                                       app's, on an interface serving several) or the stack */
    /* The ring is per CPU: a packet queued to another CPU after XDP (RPS, which attach turns off)
     * would find that CPU's slot here, another packet's ports. Dropped and counted instead. */
    if ((meta->seq >> CAMUS_META_CPU_SHIFT) != (bpf_get_smp_processor_id() & (0xFFFFFFFFU >> CAMUS_META_CPU_SHIFT))) {
        count(CAMUS_STAT_CROSS_CPU);
        return TC_ACT_SHOT;
    }
    __u32 slot = meta->seq & (CAMUS_RING - 1);
    struct camus_pkt *pk = ring.lookup(&slot);
    if (!pk)
        return TC_ACT_OK;
    __u32 local = 0;
    pk->local_keep = 0;
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {      /* XDP kept states; copies need ports */
        __u32 state = i < pk->nmsgs ? pk->msg_state[i] : 0;      /* later slots: stale */
        if (state == CAMUS_STATE_BV)
            continue;                      /* XDP wrote its ports and counted its rules */
        struct camus_leaf *l = leaf.lookup(&state);
        count_delivered(state, l);
        #pragma unroll
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            pk->msg_ports[i][w] = l ? l->ports[w] : 0;
    }
    CAMUS_FAN_WORD(0);
    CAMUS_FAN_WORD(1);
    CAMUS_FAN_WORD(2);
    CAMUS_FAN_WORD(3);
    skb->mark = 0;
    pk->local_keep |= pk->call_keep;          /* custom actions run on this host: its stack gets them */
    local |= nonzero(pk->call_keep);
    if (!local)
        return TC_ACT_SHOT;
    /* camus_tc_local trims ours for the stack. After clone_redirect the metadata may be gone,
     * so the keep-mask travels in the mark. */
    skb->mark = CAMUS_MARK_TAG | (0xFF << 16) | (pk->local_keep & 0xFFFF);
    tc_progs.call(skb, 0);
    skb->mark = 0;
    return TC_ACT_OK;                          /* not loaded: over-deliver rather than lose */
}

/* The original packet, for this host's stack: keep only what the LOCAL port subscribed to. */
int camus_tc_local(struct __sk_buff *skb) {
    __u32 mark = skb->mark;
    if ((mark & CAMUS_MARK_MASK) != CAMUS_MARK_TAG)
        return TC_ACT_OK;
    skb->mark = 0;
    count(CAMUS_STAT_LOCAL);
    return prune(skb, mark & 0xFFFF, 0);
}

int camus_tc_out(struct __sk_buff *skb) {
    __u32 mark = skb->mark;
    if ((mark & CAMUS_MARK_MASK) != CAMUS_MARK_TAG)
        return TC_ACT_UNSPEC;                          /* not this app's copy: next filter */
    skb->mark = 0;
    __u32 port = (mark >> 16) & 0xFF, keep = mark & 0xFFFF;
    struct camus_port *pc = ports_cfg.lookup(&port);
    if (!pc)
        return TC_ACT_OK;
    return prune(skb, keep, pc);
}
