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



/* IPv6 requires a UDP checksum: recompute it over the pseudo-header and the datagram (its
 * checksum field is 0 here), 128 bytes at a time; the last chunk is zero-padded. */
static __always_inline int udp6_checksum(struct __sk_buff *skb, __u32 l3, __u32 l4, __u32 end) {
    __u8 ph[40] = {};
    if (bpf_skb_load_bytes(skb, l3 + offsetof(struct ipv6hdr, saddr), ph, 32) < 0)
        return TC_ACT_SHOT;
    __u32 len = end - l4;
    ph[34] = len >> 8;
    ph[35] = len;
    ph[39] = IPPROTO_UDP;
    __s64 sum = bpf_csum_diff(0, 0, (__be32 *)ph, sizeof(ph), 0);
    __u8 buf[CAMUS_MSG_COPY];
    for (int c = 0; c < 8; c++) {
        __u32 off = l4 + c * CAMUS_MSG_COPY;
        if (off >= end)
            break;
        __u32 n = end - off;
        if (n > CAMUS_MSG_COPY)
            n = CAMUS_MSG_COPY;
        __builtin_memset(buf, 0, sizeof(buf));
        n = ((n - 1) & (CAMUS_MSG_COPY - 1)) + 1;      /* [1, 128] for the verifier */
        if (bpf_skb_load_bytes(skb, off & 0x3FFF, buf, n) < 0)
            return TC_ACT_SHOT;
        __u32 n4 = ((n + 3) & ~3U) & (CAMUS_MSG_COPY | (CAMUS_MSG_COPY - 4));
        if (n4 == 0)
            n4 = CAMUS_MSG_COPY;
        sum = bpf_csum_diff(0, 0, (__be32 *)buf, n4, (__wsum)sum);
    }
    __u32 folded = (__u32)sum;
    folded = (folded & 0xFFFF) + (folded >> 16);
    folded = (folded & 0xFFFF) + (folded >> 16);
    __u16 csum = ~folded & 0xFFFF;
    if (csum == 0)
        csum = 0xFFFF;
    bpf_skb_store_bytes(skb, l4 + offsetof(struct udphdr, check), &csum, 2, 0);
    return TC_ACT_OK;
}

/* Keep only the messages in `keep`; fix count, lengths and checksums. For REMOTE ports `pc`
 * also rewrites the destination. Returns a TC action. */
static __always_inline int prune(struct __sk_buff *skb, __u32 keep, struct camus_port *pc) {
    if (bpf_skb_pull_data(skb, skb->len) < 0)
        return TC_ACT_OK;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return TC_ACT_OK;
    __u32 l3 = sizeof(*eth), l4, v6 = 0;
    __u16 old_tot = 0;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > end || ip->ihl < 5)
            return TC_ACT_OK;
        l4 = l3 + ip->ihl * 4;
        old_tot = ip->tot_len;
    } else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
            return TC_ACT_OK;                          /* extension headers: out unpruned */
        l4 = l3 + sizeof(*ip6);
        v6 = 1;
    } else {
        return TC_ACT_OK;                              /* not IP: out as it is */
    }
    if (l4 > 0x3FF)
        return TC_ACT_OK;
    __u32 payload = l4 + sizeof(struct udphdr);
    __u32 new_end = 0;

#if CAMUS_FRAMING_MOLD
    __u16 count_be;
    if (bpf_skb_load_bytes(skb, payload + 18, &count_be, 2) < 0)
        return TC_ACT_OK;
    __u32 count = bpf_ntohs(count_be);
    __u32 rd = payload + 20, wr = rd, kept = 0;
    __u8 buf[CAMUS_MSG_COPY];
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        if (i >= count)
            break;
        __u16 len_be;
        if (rd > 0x3FFF || bpf_skb_load_bytes(skb, rd & 0x3FFF, &len_be, 2) < 0)
            return TC_ACT_SHOT;
        __u32 total = 2 + bpf_ntohs(len_be);
        if (total > CAMUS_MSG_COPY)
            return TC_ACT_SHOT;                        /* cannot prune it honestly: drop the copy */
        if (keep & (1U << i)) {
            if (wr != rd) {
                __u32 n = ((total - 1) & (CAMUS_MSG_COPY - 1)) + 1;   /* [1, 128] for the verifier */
                if (bpf_skb_load_bytes(skb, rd & 0x3FFF, buf, n) < 0)
                    return TC_ACT_SHOT;
                if (bpf_skb_store_bytes(skb, wr & 0x3FFF, buf, n, 0) < 0)
                    return TC_ACT_SHOT;
            }
            wr += total;
            kept++;
        }
        rd += total;
    }
    if (kept == 0)
        return TC_ACT_SHOT;
    __u16 kept_be = bpf_htons(kept);
    bpf_skb_store_bytes(skb, payload + 18, &kept_be, 2, 0);
    new_end = wr;
#else
    new_end = skb->len;
#endif
    if (new_end < payload || new_end > 0xFFFF)
        return TC_ACT_SHOT;
    __u16 udp_len = bpf_htons(new_end - l4), zero = 0;
    bpf_skb_store_bytes(skb, l4 + offsetof(struct udphdr, len), &udp_len, 2, 0);
    bpf_skb_store_bytes(skb, l4 + offsetof(struct udphdr, check), &zero, 2, 0);
    if (!v6) {
        __u16 new_tot = bpf_htons(new_end - l3);
        bpf_l3_csum_replace(skb, l3 + offsetof(struct iphdr, check), old_tot, new_tot, 2);
        bpf_skb_store_bytes(skb, l3 + offsetof(struct iphdr, tot_len), &new_tot, 2, 0);
    } else {
        bpf_skb_store_bytes(skb, l3 + offsetof(struct ipv6hdr, payload_len), &udp_len, 2, 0);
    }
    if (pc && pc->kind == CAMUS_PORT_REMOTE) {
        if (!v6) {                                     /* IPv6 endpoints keep the feed's address */
            __u32 old_ip;
            if (bpf_skb_load_bytes(skb, l3 + offsetof(struct iphdr, daddr), &old_ip, 4) < 0)
                return TC_ACT_SHOT;
            __u32 new_ip = pc->ip;
            bpf_l3_csum_replace(skb, l3 + offsetof(struct iphdr, check), old_ip, new_ip, 4);
            bpf_skb_store_bytes(skb, l3 + offsetof(struct iphdr, daddr), &new_ip, 4, 0);
        }
        __u16 dport = pc->udp_port;
        if (dport)                                     /* 0: keep the feed's port */
            bpf_skb_store_bytes(skb, l4 + offsetof(struct udphdr, dest), &dport, 2, 0);
        bpf_skb_store_bytes(skb, 0, pc->mac, 6, 0);
        bpf_skb_store_bytes(skb, 6, pc->src_mac, 6, 0);
    }
    if (new_end < skb->len)
        bpf_skb_change_tail(skb, new_end, 0);
    if (v6)
        return udp6_checksum(skb, l3, l4, new_end);
    return TC_ACT_OK;                                  /* IPv4: a zero UDP checksum is allowed */
}

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
