/* camus_dispatch: one interface, several applications (dataplane/apps.py).
 *
 * Each application is a whole camus_xdp program of its own spec, with its own maps, rules,
 * counters and updates, loaded but not attached. This small program is what is attached: it
 * reads the frame's EtherType (after up to two VLAN tags) and, for UDP over IPv4 or IPv6, the
 * destination port, looks the key up in `dispatch_keys` and tail-calls that application's
 * classifier, which parses the frame again from the start (an application is the same program
 * whether it serves an interface alone or shares it). Frames no application claims pass to
 * the stack untouched, as they would without camus-xdp.
 *
 * Keys: CAMUS_DISPATCH_ETHER | ethertype (attribute encodings on EtherType 0x9001, no IP) and
 * CAMUS_DISPATCH_UDP | port. User space refuses two applications claiming one key.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

#define CAMUS_MAX_APPS       16          /* the app id is 4 bits of a TC copy's mark (camus_xdp.h) */
#define CAMUS_DISPATCH_ETHER (1u << 16)
#define CAMUS_DISPATCH_UDP   (2u << 16)
#define CAMUS_DISPATCH_OTHER CAMUS_MAX_APPS      /* dispatch_stats: frames no application claimed */

BPF_PROG_ARRAY(dispatch_progs, CAMUS_MAX_APPS);
BPF_HASH(dispatch_keys, __u32, __u32, 256);
BPF_PERCPU_ARRAY(dispatch_stats, __u64, CAMUS_MAX_APPS + 1);   /* [app]: frames handed to it */

static __always_inline void dispatch_count(__u32 idx) {
    __u64 *n = dispatch_stats.lookup(&idx);
    if (n)
        *n += 1;
}

static __always_inline __u32 *udp_app(void *l3, __u16 proto, void *end) {
    void *l4;
    if (proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = l3;
        if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_UDP)
            return 0;
        if (ip->frag_off & bpf_htons(0x1FFF))
            return 0;                        /* a later fragment has no UDP header */
        l4 = l3 + ip->ihl * 4;
    } else if (proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = l3;
        if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
            return 0;
        l4 = ip6 + 1;
    } else {
        return 0;
    }
    struct udphdr *udp = l4;
    if ((void *)(udp + 1) > end)
        return 0;
    __u32 key = CAMUS_DISPATCH_UDP | bpf_ntohs(udp->dest);
    return dispatch_keys.lookup(&key);
}

int camus_dispatch(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        goto other;
    __u16 proto = eth->h_proto;
    void *l3 = eth + 1;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
            break;
        if (l3 + 4 > end)
            goto other;
        proto = *(__u16 *)(l3 + 2);
        l3 += 4;
    }
    __u32 key = CAMUS_DISPATCH_ETHER | bpf_ntohs(proto);
    __u32 *app = dispatch_keys.lookup(&key);
    if (!app)
        app = udp_app(l3, proto, end);
    if (!app)
        goto other;
    __u32 slot = *app;
    if (slot >= CAMUS_MAX_APPS)
        goto other;
    dispatch_count(slot);
    dispatch_progs.call(ctx, slot);
    /* not loaded (cannot happen while the attachment is whole): the stack gets it, as if the
     * application were not there; counted as unclaimed */
other:
    dispatch_count(CAMUS_DISPATCH_OTHER);
    return XDP_PASS;
}
