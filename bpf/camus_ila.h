/* camus-xdp: identifier-locator rewrite from XDP (apps/ila; the Camus paper's ILA application).
 *
 * A packet whose leaf has CAMUS_LEAF_ILA (a rule with ila(L::)) gets locator L as the top 64
 * bits of its IPv6 destination (leaf.value, bytes in packet order), as Linux's `encap ila ...
 * csum-mode adj-transport` does: the UDP checksum is adjusted for the changed words (RFC 1624),
 * so the datagram stays valid without the checksum-neutral identifier bit. Then the packet goes
 * on as the rules say: its ports (TC clones the rewritten frame) and, for the call itself, the
 * host stack, which routes the new address.
 */

/* 1: rewritten (or already carrying the locator); 0: not an IPv6/UDP packet this can rewrite. */
static __always_inline int camus_ila_rewrite(struct xdp_md *ctx, __u32 l3off, __u64 locator) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    asm volatile("" : "+r"(l3off));       /* keep the mask: the verifier needs a bounded offset */
    struct ipv6hdr *ip6 = data + (l3off & 0x3F);   /* Ethernet and at most two VLAN tags */
    struct udphdr *udp = (void *)(ip6 + 1);
    if ((void *)(udp + 1) > end || ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
        return 0;
    __u64 old, new = locator;
    __builtin_memcpy(&old, &ip6->daddr, 8);
    if (old == new)
        return 1;
    __builtin_memcpy(&ip6->daddr, &new, 8);
    if (udp->check) {                     /* 0 would mean "no checksum": not valid over IPv6, left */
        __u32 sum = bpf_csum_diff((__be32 *)&old, 8, (__be32 *)&new, 8, (__u16)~udp->check);
        sum = (sum & 0xFFFF) + (sum >> 16);
        sum = (sum & 0xFFFF) + (sum >> 16);
        __u16 check = (__u16)~sum;
        udp->check = check ? check : 0xFFFF;
    }
    return 1;
}
