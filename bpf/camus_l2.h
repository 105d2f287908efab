/* Layer 2 of a frame for the XDP programs (camus_xdp.c, camus_dispatch.c): Ethernet and up to
 * two VLAN tags (802.1Q / 802.1ad). Returns where the layer-3 header starts and sets *proto to
 * the EtherType after the tags; 0 when the frame is too short for its tags. Inlined, so the
 * verifier sees the bounds checks in the caller. */
#ifndef CAMUS_L2_H
#define CAMUS_L2_H

static __always_inline void *camus_l2(void *data, void *end, __u16 *proto) {
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return 0;
    __u16 p = eth->h_proto;
    void *l3 = eth + 1;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        if (p != bpf_htons(ETH_P_8021Q) && p != bpf_htons(ETH_P_8021AD))
            break;
        if (l3 + 4 > end)
            return 0;
        p = *(__u16 *)(l3 + 2);
        l3 += 4;
    }
    *proto = p;
    return l3;
}

#endif
