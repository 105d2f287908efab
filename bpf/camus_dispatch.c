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
 * Keys: an EtherType (attribute encodings on 0x9001, no IP) or a UDP port, each in an array
 * indexed by the 16-bit value holding the application's slot + 1 (0: no application). User
 * space refuses two applications claiming one key.
 *
 * Cost (bench/dispatch_bench.py): arrays rather than a hash, because the JIT inlines an array
 * lookup into a bounds check and a load; and the tail call goes through a switch of constant
 * indices, which the kernel patches into direct jumps, where a variable index is an indirect
 * jump (a retpoline on this kind of machine).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>
/*@CAMUS_L2_H@*/

#define CAMUS_MAX_APPS       16          /* the app id is 4 bits of a TC copy's mark (camus_xdp.h) */
#define CAMUS_DISPATCH_OTHER CAMUS_MAX_APPS      /* dispatch_stats: frames no application claimed */

BPF_PROG_ARRAY(dispatch_progs, CAMUS_MAX_APPS);
BPF_ARRAY(dispatch_ether, __u32, 65536);         /* EtherType -> slot + 1 */
BPF_ARRAY(dispatch_udp, __u32, 65536);           /* UDP destination port -> slot + 1 */
BPF_PERCPU_ARRAY(dispatch_stats, __u64, CAMUS_MAX_APPS + 1);   /* [app]: frames handed to it */

static __always_inline void dispatch_count(__u32 idx) {
    __u64 *n = dispatch_stats.lookup(&idx);
    if (n)
        *n += 1;
}

static __always_inline __u32 udp_app(void *l3, __u16 proto, void *end) {
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
    __u32 key = bpf_ntohs(udp->dest);
    __u32 *app = dispatch_udp.lookup(&key);
    return app ? *app : 0;
}

int camus_dispatch(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    __u16 proto;
    void *l3 = camus_l2(data, end, &proto);
    if (!l3)
        goto other;
    __u32 key = bpf_ntohs(proto);
    __u32 *by_type = dispatch_ether.lookup(&key);
    __u32 app = by_type ? *by_type : 0;
    if (!app)
        app = udp_app(l3, proto, end);
    if (app == 0 || app > CAMUS_MAX_APPS)
        goto other;
    __u32 slot = app - 1;
    dispatch_count(slot);
    switch (slot) {      /* constant indices only (see the top); written out: BCC rewrites
                            map calls in the source, not inside macros */
    case 0: dispatch_progs.call(ctx, 0); break;
    case 1: dispatch_progs.call(ctx, 1); break;
    case 2: dispatch_progs.call(ctx, 2); break;
    case 3: dispatch_progs.call(ctx, 3); break;
    case 4: dispatch_progs.call(ctx, 4); break;
    case 5: dispatch_progs.call(ctx, 5); break;
    case 6: dispatch_progs.call(ctx, 6); break;
    case 7: dispatch_progs.call(ctx, 7); break;
    case 8: dispatch_progs.call(ctx, 8); break;
    case 9: dispatch_progs.call(ctx, 9); break;
    case 10: dispatch_progs.call(ctx, 10); break;
    case 11: dispatch_progs.call(ctx, 11); break;
    case 12: dispatch_progs.call(ctx, 12); break;
    case 13: dispatch_progs.call(ctx, 13); break;
    case 14: dispatch_progs.call(ctx, 14); break;
    case 15: dispatch_progs.call(ctx, 15); break;
    }
    /* not loaded (cannot happen while the attachment is whole): the stack gets it, as if the
     * application were not there; counted as unclaimed */
other:
    dispatch_count(CAMUS_DISPATCH_OTHER);
    return XDP_PASS;
}
