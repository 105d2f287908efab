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

BPF_PROG_ARRAY(tc_progs, 2);               /* [0]: camus_tc_local, [1]: camus_tc_more (over 256 ports) */

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

#if CAMUS_PORT_WORDS > 4
/* More than 256 ports: unrolled words as above would be 64 x CAMUS_PORT_WORDS iterations, each
 * verified with its own constants (over a million instructions at 1,024 ports). Instead one copy
 * per iteration of a flat loop whose cursor (the port word at hand, its ports left) lives in the
 * ring slot and is read back as values the verifier does not know, so every iteration verifies
 * alike. A program run covers CAMUS_TC_CHUNK words (the verifier keeps at most 8,192 branches
 * pending: about a thousand iterations); camus_tc_more, tail-called, goes on from the cursor.
 * A copy's messages are not worked out here: camus_tc_out reads them from this ring slot, which
 * the mark names (the clone reaches it inside bpf_clone_redirect, on this CPU). LOCAL ports are
 * gathered for tc_wide_local. Returns 1 when words are left for the next run. */
#define CAMUS_TC_CHUNK (CAMUS_PORT_WORDS < 16 ? CAMUS_PORT_WORDS : 16)
static __always_inline __u32 tc_copies_wide(struct __sk_buff *skb, struct camus_pkt *pk, __u32 slot) {
    pk->cur_end = pk->cur_w + CAMUS_TC_CHUNK;
    for (int it = 0; it < 65 * CAMUS_TC_CHUNK; it++) {     /* every port, and a step per word */
        __u32 w = *(volatile __u32 *)&pk->cur_w & (CAMUS_PORT_WORDS - 1);
        __u64 word = *(volatile __u64 *)&pk->cur_bits;
        if (!word) {                                       /* this word is done: the next one */
            if (w + 1 >= CAMUS_PORT_WORDS)
                return 0;
            pk->cur_w = w + 1;
            pk->cur_bits = pk->ports[(w + 1) & (CAMUS_PORT_WORDS - 1)];
            if (w + 1 >= *(volatile __u32 *)&pk->cur_end)
                return 1;
            continue;
        }
        __u64 low = word & -word;
        pk->cur_bits = word ^ low;
        __u32 port = (w << 6) + bit_index(low);
        struct camus_port *pc = port_cfg(port);
        if (!pc)
            continue;
        __u32 kind = pc->kind;
        if (kind == CAMUS_PORT_LOCAL) {
            pk->local_ports[w] |= low;
            pk->local_any = 1;
        } else if (kind == CAMUS_PORT_IFACE || kind == CAMUS_PORT_REMOTE) {
            skb->mark = CAMUS_MARK_TAG | (slot << 16);
            skb->tc_index = port;
            if (bpf_clone_redirect(skb, pc->ifindex, 0) == 0)
                count_port(port);
        }
    }
    return 0;                  /* cannot happen: each word takes at most 65 iterations */
}

/* After the copies: the messages the LOCAL ports keep (their union), into local_keep. Returns 1
 * when a LOCAL port is among the packet's. */
static __always_inline __u32 tc_wide_local(struct __sk_buff *skb, struct camus_pkt *pk) {
    skb->tc_index = 0;
    if (!pk->local_any)
        return 0;
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        __u64 any = 0;
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            any |= pk->msg_ports[i][w] & pk->local_ports[w];
        pk->local_keep |= nonzero_opaque(any) << i;
    }
    return 1;
}
#endif

/* The original packet after its copies: to this host's stack, trimmed to what a LOCAL port or a
 * custom action keeps (camus_tc_local), or dropped. */
static __always_inline int tc_to_stack(struct __sk_buff *skb, struct camus_pkt *pk, __u32 local) {
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
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            pk->msg_ports[i][w] = l ? l->ports[w] : 0;
    }
#if CAMUS_PORT_WORDS > 4
    pk->cur_w = 0;
    pk->cur_bits = pk->ports[0];
    pk->local_any = 0;
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        pk->local_ports[w] = 0;
#if CAMUS_PORT_WORDS > CAMUS_TC_CHUNK
    if (tc_copies_wide(skb, pk, slot)) {
        skb->cb[0] = slot;                    /* camus_tc_more goes on from the cursor */
        tc_progs.call(skb, 1);
    }
#else
    tc_copies_wide(skb, pk, slot);
#endif
    local = tc_wide_local(skb, pk);
#else
    CAMUS_FAN_WORD(0);
    CAMUS_FAN_WORD(1);
    CAMUS_FAN_WORD(2);
    CAMUS_FAN_WORD(3);
#endif
    return tc_to_stack(skb, pk, local);
}

#if CAMUS_PORT_WORDS > 4 && CAMUS_PORT_WORDS > CAMUS_TC_CHUNK
/* Tail-called by camus_tc_in (and itself) while port words are left: the next CAMUS_TC_CHUNK. */
int camus_tc_more(struct __sk_buff *skb) {
    __u32 slot = skb->cb[0] & (CAMUS_RING - 1);
    struct camus_pkt *pk = ring.lookup(&slot);
    if (!pk)
        return TC_ACT_SHOT;
    if (tc_copies_wide(skb, pk, slot))
        tc_progs.call(skb, 1);
    return tc_to_stack(skb, pk, tc_wide_local(skb, pk));
}
#endif

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
#if CAMUS_PORT_WORDS > 4
    /* the port in tc_index, the messages it keeps from the ring slot the mark names (tc_copies_wide) */
    __u32 port = skb->tc_index;
    skb->tc_index = 0;
    __u32 slot = (mark >> 16) & (CAMUS_RING - 1);
    struct camus_pkt *pk = ring.lookup(&slot);
    if (!pk)
        return TC_ACT_OK;
    __u32 w = (port >> 6) & (CAMUS_PORT_WORDS - 1);
    __u64 bit = 1ULL << (port & 63);
    __u32 keep = 0;
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++)
        keep |= nonzero_opaque(pk->msg_ports[i][w] & bit) << i;   /* no branch per message */
#else
    __u32 port = (mark >> 16) & 0xFF, keep = mark & 0xFFFF;
#endif
    struct camus_port *pc = ports_cfg.lookup(&port);
    if (!pc)
        return TC_ACT_OK;
    return prune(skb, keep, pc);
}
