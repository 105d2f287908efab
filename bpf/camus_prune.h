/* Pruning a copy to the messages its port subscribed to, and rewriting it for a REMOTE port.
 * One body for both ways a copy leaves: TC (camus_tc.c, on an frame) and the devmap egress program
 * of an XDP broadcast (camus_fan.c, on an XDP frame). Each pastes it after defining:
 *   PRUNE_CTX                  the context type
 *   PRUNE_FN, PRUNE_UDP6       the two functions' names
 *   PRUNE_LOAD(c, off, p, n)   PRUNE_STORE(c, off, p, n)      bytes from / to the frame (helpers)
 *   PRUNE_LEN(c)  PRUNE_PULL(c)  PRUNE_TAIL(c, new_end)        length, linearise, shorten
 *   PRUNE_OK, PRUNE_DROP       verdicts
 * The body #undef-s them at its end.
 *
 * Fixed-size fields (the framing's count and lengths, the headers' lengths, checksum and
 * addresses: 2 to 6 bytes at a bounded offset) are read and written in place through
 * PRUNE_GET / PRUNE_PUT: a helper call per field was ~14% of the broker's CPU under XDP
 * broadcast (bench/sink_bench.py's profile: bpf_xdp_load_bytes / store_bytes and their
 * memcpy). Only the messages' moves, of variable length, go through PRUNE_LOAD / PRUNE_STORE.
 * Both contexts have data / data_end; TC's copy is linear and its own after PRUNE_PULL, and the
 * pointers are taken afresh from the context at every access (a helper may move the frame). */
#ifndef CAMUS_PRUNE_COMMON
#define CAMUS_PRUNE_COMMON

/* `copy` runs with _s pointing at the n bytes at `off`, once they are known to be in the frame. */
#define PRUNE_AT(c, off, n, copy) ({                                                \
    void *_d = (void *)(long)(c)->data, *_e = (void *)(long)(c)->data_end;           \
    void *_s = _d + ((off) & 0x3FFF), *_t = _s + (n);                                \
    int _r = -1;                                                                     \
    asm volatile("" : "+r"(_t));     /* compare the pointer itself: clang would move */ \
    if (_t <= _e) {                  /* the offset onto pkt_end, which the verifier refuses */ \
        copy;                                                                        \
        _r = 0;                                                                      \
    }                                                                                \
    _r; })
#define PRUNE_GET(c, off, p, n) PRUNE_AT(c, off, n, __builtin_memcpy((p), _s, (n)))
#define PRUNE_PUT(c, off, p, n) PRUNE_AT(c, off, n, __builtin_memcpy(_s, (p), (n)))

/* The 16-bit one's complement checksum `check` (as stored) after a 2- or 4-byte field went
 * from `from` to `to`, both as stored (RFC 1624; the sum is the same in either byte order). */
static __always_inline __u16 csum16_replace(__u16 check, __u32 from, __u32 to, __u32 size) {
    __u32 sum = ~check & 0xFFFF;
    if (size == 4)
        sum += (~from & 0xFFFF) + (~from >> 16) + (to & 0xFFFF) + (to >> 16);
    else
        sum += (~from & 0xFFFF) + (to & 0xFFFF);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return ~sum & 0xFFFF;
}

/* The IP header checksum at `off` updated in place for a field's change. */
#define PRUNE_L3_CSUM(c, off, from, to, size) ({                                    \
    __u16 _ck;                                                                       \
    int _r = PRUNE_GET(c, off, &_ck, 2);                                             \
    if (!_r) {                                                                       \
        _ck = csum16_replace(_ck, (from), (to), (size));                             \
        _r = PRUNE_PUT(c, off, &_ck, 2);                                             \
    }                                                                                \
    _r; })
#endif

/* IPv6 requires a UDP checksum: recompute it over the pseudo-header and the datagram (its
 * checksum field is 0 here), 128 bytes at a time; the last chunk is zero-padded. */
static __always_inline int PRUNE_UDP6(PRUNE_CTX *frame, __u32 l3, __u32 l4, __u32 end) {
    __u8 ph[40] = {};
    if (PRUNE_LOAD(frame, l3 + offsetof(struct ipv6hdr, saddr), ph, 32) < 0)
        return PRUNE_DROP;
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
        if (PRUNE_LOAD(frame, off & 0x3FFF, buf, n) < 0)
            return PRUNE_DROP;
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
    PRUNE_STORE(frame, l4 + offsetof(struct udphdr, check), &csum, 2);
    return PRUNE_OK;
}

/* Keep only the messages in `keep`; fix count, lengths and checksums. For REMOTE ports `pc`
 * also rewrites the destination. Returns PRUNE_OK (send it) or PRUNE_DROP. */
static __always_inline int PRUNE_FN(PRUNE_CTX *frame, __u32 keep, struct camus_port *pc) {
    if (PRUNE_PULL(frame) < 0)
        return PRUNE_OK;
    void *data = (void *)(long)frame->data, *end = (void *)(long)frame->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return PRUNE_OK;
    __u32 l3 = sizeof(*eth), l4, v6 = 0;
    __u16 old_tot = 0;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > end || ip->ihl < 5)
            return PRUNE_OK;
        l4 = l3 + ip->ihl * 4;
        old_tot = ip->tot_len;
    } else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
            return PRUNE_OK;                          /* extension headers: out unpruned */
        l4 = l3 + sizeof(*ip6);
        v6 = 1;
    } else {
        return PRUNE_OK;                              /* not IP: out as it is */
    }
    if (l4 > 0x3FF)
        return PRUNE_OK;
    __u32 payload = l4 + sizeof(struct udphdr);
    __u32 new_end = 0;

#if CAMUS_FRAMING_MOLD
    __u16 count_be;
    if (PRUNE_GET(frame, payload + 18, &count_be, 2) < 0)
        return PRUNE_OK;
    __u32 count = bpf_ntohs(count_be);
    __u32 rd = payload + 20, wr = rd, seen = 0;
    __u8 buf[CAMUS_MSG_COPY];
    /* The write offset moves without a branch and the kept count is taken once, after the
     * loop: fewer distinct states per message for the verifier. */
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        if (i >= count)
            break;
        __u16 len_be;
        if (rd > 0x3FFF || PRUNE_GET(frame, rd, &len_be, 2) < 0)
            return PRUNE_DROP;
        __u32 total = 2 + bpf_ntohs(len_be);
        if (total > CAMUS_MSG_COPY)
            return PRUNE_DROP;                        /* cannot prune it honestly: drop the copy */
        __u32 take = (keep >> i) & 1;
        if (take && wr != rd) {
            __u32 n = ((total - 1) & (CAMUS_MSG_COPY - 1)) + 1;   /* [1, 128] for the verifier */
            if (PRUNE_LOAD(frame, rd & 0x3FFF, buf, n) < 0)
                return PRUNE_DROP;
            if (PRUNE_STORE(frame, wr & 0x3FFF, buf, n) < 0)
                return PRUNE_DROP;
        }
        wr += total & -take;
        rd += total;
        seen |= 1U << i;
    }
    __u32 kept = popcount64(keep & seen);
    if (kept == 0)
        return PRUNE_DROP;
    __u16 kept_be = bpf_htons(kept);
    PRUNE_PUT(frame, payload + 18, &kept_be, 2);
    new_end = wr;
#else
    new_end = PRUNE_LEN(frame);
#endif
    if (new_end < payload || new_end > 0xFFFF)
        return PRUNE_DROP;
    __u16 udp_len = bpf_htons(new_end - l4), zero = 0;
    PRUNE_PUT(frame, l4 + offsetof(struct udphdr, len), &udp_len, 2);
    PRUNE_PUT(frame, l4 + offsetof(struct udphdr, check), &zero, 2);
    if (!v6) {
        __u16 new_tot = bpf_htons(new_end - l3);
        PRUNE_L3_CSUM(frame, l3 + offsetof(struct iphdr, check), old_tot, new_tot, 2);
        PRUNE_PUT(frame, l3 + offsetof(struct iphdr, tot_len), &new_tot, 2);
    } else {
        PRUNE_PUT(frame, l3 + offsetof(struct ipv6hdr, payload_len), &udp_len, 2);
    }
    if (pc && pc->kind == CAMUS_PORT_REMOTE) {
        if (!v6) {                                     /* IPv6 endpoints keep the feed's address */
            __u32 old_ip;
            if (PRUNE_GET(frame, l3 + offsetof(struct iphdr, daddr), &old_ip, 4) < 0)
                return PRUNE_DROP;
            __u32 new_ip = pc->ip;
            PRUNE_L3_CSUM(frame, l3 + offsetof(struct iphdr, check), old_ip, new_ip, 4);
            PRUNE_PUT(frame, l3 + offsetof(struct iphdr, daddr), &new_ip, 4);
        }
        __u16 dport = pc->udp_port;
        if (dport)                                     /* 0: keep the feed's port */
            PRUNE_PUT(frame, l4 + offsetof(struct udphdr, dest), &dport, 2);
        PRUNE_PUT(frame, 0, pc->mac, 6);
        PRUNE_PUT(frame, 6, pc->src_mac, 6);
    }
    if (new_end < PRUNE_LEN(frame))
        PRUNE_TAIL(frame, new_end);
    if (v6)
        return PRUNE_UDP6(frame, l3, l4, new_end);
    return PRUNE_OK;                                  /* IPv4: a zero UDP checksum is allowed */
}

#undef PRUNE_CTX
#undef PRUNE_FN
#undef PRUNE_UDP6
#undef PRUNE_LOAD
#undef PRUNE_STORE
#undef PRUNE_LEN
#undef PRUNE_PULL
#undef PRUNE_TAIL
#undef PRUNE_OK
#undef PRUNE_DROP
