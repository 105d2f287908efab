/* camus-xdp: DNS answers from XDP (apps/dns; the Camus paper's DNS application).
 *
 * A query whose name a rule answers with answerDNS(a.b.c.d) (leaf flag CAMUS_LEAF_ANSWER, the
 * address in leaf.answer) becomes its own response, sent back out of the interface it came in
 * on with XDP_TX, so the resolver host never sees it: Ethernet and IPv4 addresses and the UDP
 * ports swapped, the header turned into an authoritative answer (QR, AA, RD kept, RCODE 0), the
 * question kept, one A record appended (the name as a pointer to the question, TTL
 * CAMUS_DNS_TTL, the address), the authority and additional sections dropped (an EDNS OPT
 * record too: a plain DNS answer is what every client accepts), the IPv4 checksum recomputed
 * and the UDP checksum 0 (allowed over IPv4). Only a standard query (QR 0, opcode 0, one
 * question) of type A, class IN, over untagged IPv4 without options is answered; anything else
 * goes to the host's resolver as every custom action does. The spec puts the name right after
 * the 12-byte DNS header (the back end checks); `wire` is the name's length in wire format.
 */
#define CAMUS_DNS_TTL 60
#define CAMUS_DNS_RR  16              /* the answer record: pointer 2, type 2, class 2, TTL 4, length 2, address 4 */

static __always_inline __u16 csum_fold(__u32 sum) {
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return (__u16)~sum;
}

/* 1: the frame is now the response (send it with XDP_TX); 0: not a query we answer, the frame
 * unchanged; -1: the frame was resized but could not be written (drop it). */
static __always_inline int camus_dns_answer(struct xdp_md *ctx, __u32 wire, __u32 addr) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    __u8 *dns = (void *)(udp + 1);
    if (wire < 2 || wire > 255 || (void *)(dns + 12) > end)
        return 0;
    if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->version != 4)
        return 0;
    if ((dns[2] & 0xF8) != 0 || dns[4] != 0 || dns[5] != 1)   /* QR 0, opcode 0; QDCOUNT 1 */
        return 0;
    asm volatile("" : "+r"(wire));       /* keep the masks below: the verifier needs them */
    __u8 *qt = dns + 12 + (wire & 0xFF);
    if ((void *)(qt + 4) > end || qt[0] != 0 || qt[1] != 1 || qt[2] != 0 || qt[3] != 1)
        return 0;                         /* type A, class IN only */
    __u32 dns_len = 12 + wire + 4 + CAMUS_DNS_RR;
    int delta = (int)(sizeof(*eth) + sizeof(*ip) + sizeof(*udp) + dns_len) - (int)(end - data);
    if (bpf_xdp_adjust_tail(ctx, delta))
        return 0;                         /* no room to grow: the host answers */
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    eth = data;
    ip = (void *)(eth + 1);
    udp = (void *)(ip + 1);
    dns = (void *)(udp + 1);
    __u8 *rr = dns + 12 + (wire & 0xFF) + 4;
    if ((void *)(dns + 12) > end || (void *)(rr + CAMUS_DNS_RR) > end)
        return -1;
    __u8 mac[ETH_ALEN];
    __builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, mac, ETH_ALEN);
    __u32 a = ip->saddr;
    ip->saddr = ip->daddr;
    ip->daddr = a;
    ip->tot_len = bpf_htons(sizeof(*ip) + sizeof(*udp) + dns_len);
    ip->ttl = 64;
    ip->frag_off = bpf_htons(0x4000);     /* DF, like the resolver's own answers */
    ip->check = 0;
    __u32 sum = 0;
    __u16 *w = (void *)ip;
    #pragma unroll
    for (int i = 0; i < 10; i++)
        sum += w[i];
    ip->check = csum_fold(sum);
    __u16 port = udp->source;
    udp->source = udp->dest;
    udp->dest = port;
    udp->len = bpf_htons(sizeof(*udp) + dns_len);
    udp->check = 0;
    dns[2] = 0x84 | (dns[2] & 0x01);      /* QR, AA, the client's RD */
    dns[3] = 0;                           /* RA 0, RCODE NOERROR */
    dns[6] = 0; dns[7] = 1;               /* one answer */
    dns[8] = 0; dns[9] = 0;               /* no authority */
    dns[10] = 0; dns[11] = 0;             /* no additional records (an EDNS OPT is dropped) */
    rr[0] = 0xC0; rr[1] = 12;             /* the name: a pointer to the question's */
    rr[2] = 0; rr[3] = 1;                 /* A */
    rr[4] = 0; rr[5] = 1;                 /* IN */
    rr[6] = 0; rr[7] = 0; rr[8] = CAMUS_DNS_TTL >> 8; rr[9] = CAMUS_DNS_TTL & 0xFF;
    rr[10] = 0; rr[11] = 4;
    __builtin_memcpy(rr + 12, &addr, 4);  /* leaf.answer holds the bytes in packet order */
    return 1;
}
