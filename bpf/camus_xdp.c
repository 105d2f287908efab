/* camus-xdp: the XDP classifier of an edge broker.
 *
 * Parses Ethernet (up to two VLAN tags), IPv4 (options; fragments go to the stack) or IPv6,
 * UDP on the feed's port(s), then one application message or a MoldUDP64 batch of up to
 * CAMUS_MAX_MSGS messages. Each message walks the staged tables (all of them data in maps, see
 * camus_xdp.h) from the root state to a leaf; the packet's verdict is the union of its
 * messages' ports: nobody -> XDP_DROP here, as early as possible.
 *
 * The spec-specific parts (feed port, framing, message size, how to read each query field)
 * come from the generated header `camus_gen.h`, which the ebpf back end writes in front of
 * this file. Everything is bounds-checked; loops have constant bounds.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

/*@CAMUS_XDP_H@*/
/*@CAMUS_L2_H@*/
/*@CAMUS_GEN_H@*/

BPF_ARRAY(cfg, __u32, CAMUS_CFG_MAX);
BPF_PERCPU_ARRAY(stats, __u64, CAMUS_STAT_MAX);
BPF_ARRAY(desc, struct camus_desc, CAMUS_MAX_STATES);
BPF_ARRAY(xslots, struct camus_slot, CAMUS_MAX_EXACT);
BPF_ARRAY(bounds, struct camus_bound, CAMUS_MAX_BOUNDS);
BPF_ARRAY(rnodes, struct camus_rnode, CAMUS_MAX_RNODES);
BPF_ARRAY(rsub, struct camus_rsub, CAMUS_MAX_RSUB);
BPF_LPM_TRIE(lpm, struct camus_lpm_key, __u32, CAMUS_MAX_LPM);
BPF_ARRAY(leaf, struct camus_leaf, CAMUS_MAX_STATES);
BPF_HASH(updates, __u32, __u64, CAMUS_MAX_UPDATES);
BPF_ARRAY(svars, struct camus_svar, CAMUS_MAX_SVARS);
BPF_ARRAY(svar_cfg, struct camus_svar_cfg, CAMUS_MAX_SVARS);
BPF_ARRAY(results, struct camus_result, CAMUS_MAX_MSGS + 1);   /* [MAX_MSGS]: the packet */
/* Messages ending in each state; user space sums them per rule. Counted where it is free:
 * TC for delivered packets (it reads every message's leaf anyway); XDP only for drop rules,
 * for packets it redirects itself and when no TC is attached (CAMUS_CFG_TC 0). Packets
 * nobody wants cost nothing extra. */
BPF_PERCPU_ARRAY(leaf_hits, __u64, CAMUS_MAX_STATES);

static __always_inline void count_hit(__u32 state) {
    __u64 *hits = leaf_hits.lookup(&state);
    if (hits)
        *hits += 1;
}

/* A delivered message's hit: drop-rule states were counted when classified. */
static __always_inline void count_delivered(__u32 state, struct camus_leaf *l) {
    if (state && l && !(l->flags & CAMUS_LEAF_DROP))
        count_hit(state);
}


static __always_inline void count(__u32 idx) {
    __u64 *c = stats.lookup(&idx);
    if (c)
        *c += 1;
}

static __always_inline __u32 cfg_get(__u32 idx) {
    __u32 *v = cfg.lookup(&idx);
    return v ? *v : 0;
}

/* Which half of the maps the root's table set lives in (as ebpf_tables.map_contents): the
 * per-bank values written beside the tables (topic labels, the bypass cover) are indexed by it. */
static __always_inline __u32 camus_bank(__u32 root) {
    return (root & CAMUS_STATE_MASK) >= CAMUS_MAX_STATES / 2;
}

/* Unsigned a <= b, without a branch (branches per key would multiply the verifier's paths). */
static __always_inline __u32 le64(__u64 a, __u64 b) {
    __u64 borrow = ((~b & a) | ((~b | a) & (b - a))) >> 63;      /* 1 when b < a */
    return (__u32)(borrow ^ 1);
}

/* Range tables: walk the state's 8-ary search tree to the last interval start <= key. The
 * first key of every node is <= key by construction, so the count below is at least 1. */
static __always_inline __u32 range_next(struct camus_desc *d, __u64 key) {
    __u32 node = d->base;
    for (int level = 0; level < CAMUS_RANGE_LEVELS; level++) {
        struct camus_bound *b = bounds.lookup(&node);
        if (!b)
            return 0;
        __u32 c = 0;
        #pragma unroll
        for (int j = 0; j < CAMUS_FANOUT; j++)
            c += le64(b->keys[j], key);
        if (c > b->nkeys)
            c = b->nkeys;
        __u32 v = b->vals[(c - 1) & (CAMUS_FANOUT - 1)];
        if (b->leaf)
            return v;
        node = v;
    }
    return 0;
}

/* Radix range tables: bucket the key, compare with the bucket's one split; a bucket that
 * holds several starts continues in a finer table (rare: only clustered starts need one). */
static __always_inline __u32 radix_next(struct camus_desc *d, __u64 key) {
    __u64 lo = d->mult;
    __u32 shift = d->bits & 63, last = d->count, base = d->base;
    for (int level = 0; level < CAMUS_RADIX_LEVELS; level++) {
        __u64 b = key < lo ? 0 : (key - lo) >> shift;
        if (b > last)
            b = last;
        __u32 i = base + (__u32)b;
        struct camus_rnode *n = rnodes.lookup(&i);
        if (!n)
            return 0;
        __u32 r = key < n->split ? n->below : n->above;
        if (!(r & CAMUS_RADIX_SUB))
            return r;
        __u32 sub = r & ~CAMUS_RADIX_SUB;
        struct camus_rsub *t = rsub.lookup(&sub);
        if (!t)
            return 0;
        lo = t->lo;
        shift = t->shift & 63;
        last = t->last;
        base = t->base;
    }
    return 0;
}

/* Exact tables: multiplicative hash into the state's slice, linear probing (bounded). Returns
 * the matching slot (it carries the next state and that state's descriptor), or 0. */
static __always_inline struct camus_slot *exact_slot(struct camus_desc *d, __u64 key) {
    __u32 bits = d->bits & 31;
    if (bits == 0)
        return 0;
    __u32 mask = (1U << bits) - 1;
    __u32 idx = (__u32)((key * d->mult) >> (64 - bits));
    #pragma unroll
    for (int p = 0; p < CAMUS_MAX_PROBE; p++) {
        __u32 i = d->base + ((idx + p) & mask);
        struct camus_slot *slot = xslots.lookup(&i);
        if (!slot || !slot->used)
            return 0;
        if (slot->value == key)
            return slot;
    }
    return 0;
}

static __always_inline __u32 lpm_next(__u32 state, __u64 key, __u32 width) {
    struct camus_lpm_key k = {};
    __u64 v = width >= 64 ? key : key << (64 - width);
    k.prefixlen = 32 + width;
    k.data[0] = state >> 24; k.data[1] = state >> 16; k.data[2] = state >> 8; k.data[3] = state;
    #pragma unroll
    for (int i = 0; i < 8; i++)
        k.data[4 + i] = v >> (56 - 8 * i);
    __u32 *next = lpm.lookup(&k);
    return next ? *next : 0;
}

/* Apply the state-variable updates of `state` (their guards held), then expose aggregates. */
static __always_inline void update_svars(__u32 state, __u64 *v) {
#if CAMUS_N_SVARS > 0
    __u32 active = cfg_get(CAMUS_CFG_NSVARS);
    if (!active)
        return;
    __u64 *mask = updates.lookup(&state);
    __u64 now = bpf_ktime_get_ns();
    for (__u32 k = 0; k < CAMUS_N_SVARS; k++) {
        if (k >= active)
            break;
        struct camus_svar_cfg *c = svar_cfg.lookup(&k);
        struct camus_svar *s = svars.lookup(&k);
        if (!c || !s)
            continue;
        __u32 adds = mask && (*mask >> k) & 1;
        __u64 value = v[c->field & (CAMUS_VAR_SLOTS - 1)];
        __u64 count, sum;
        if (c->window_ns) {
            __u64 win = now / c->window_ns;
            if (adds) {
                /* A new tumbling window zeroes the counts under the lock, with this message's
                 * add and the read: an add by another CPU at the same instant is never wiped
                 * out, and sum and count always describe the same window. */
                bpf_spin_lock(&s->lock);
                if (s->window != win) {
                    s->window = win;
                    s->count = 0;
                    s->sum = 0;
                }
                s->count += 1;
                s->sum += value;
                count = s->count;
                sum = s->sum;
                bpf_spin_unlock(&s->lock);
            } else if (s->window == win) {   /* only reading: a snapshot, no write */
                count = s->count;
                sum = s->sum;
            } else {                         /* the window moved on: nothing in it yet */
                count = 0;
                sum = 0;
            }
        } else {
            /* Never reset: the count this message made is the add's own result (not a re-read),
             * so two CPUs never see the same count and every(n) delivers exactly one in n. */
            count = s->count;
            if (adds) {
                count = __sync_fetch_and_add(&s->count, 1) + 1;
                __sync_fetch_and_add(&s->sum, value);
            }
            sum = s->sum;
        }
        __u64 agg = c->fn == 0 ? count : c->fn == 1 ? sum : c->fn == 2 ? (count ? sum / count : 0)
                  : (c->modulus ? count % c->modulus : 0);
        v[CAMUS_N_FIELDS + k] = agg;
    }
#endif
}

/* One table step for `state` (not exact: those go through exact_slot); returns the next state. */
static __always_inline __u32 step(struct camus_desc *d, __u32 state, __u64 key) {
    if (d->kind == CAMUS_KIND_RADIX)
        return radix_next(d, key);
    if (d->kind == CAMUS_KIND_RANGE)
        return range_next(d, key);
    return lpm_next(state, key, camus_var_width(d->var));
}

static __always_inline struct camus_desc *desc_of(__u32 state) {
    if (state & CAMUS_STATE_FINAL)
        return 0;
    return desc.lookup(&state);
}

/* Walk `limit` tables from `state` (its descriptor: d) while they test variables below `top`. */
static __always_inline __u32 walk(__u32 state, struct camus_desc *d, __u64 *v, const int limit, __u32 top) {
    for (int i = 0; i < limit; i++) {
        if (!d || d->kind == CAMUS_KIND_NONE || d->var >= top)
            break;
        __u64 key = v[d->var & (CAMUS_VAR_SLOTS - 1)];
        if (d->kind == CAMUS_KIND_EXACT) {
            struct camus_slot *slot = exact_slot(d, key);
            if (slot) {
                state = slot->next;
                d = (state & CAMUS_STATE_FINAL) ? 0 : &slot->nd;
                continue;
            }
            state = d->default_next;
        } else {
            state = step(d, state & CAMUS_STATE_MASK, key);
        }
        d = desc_of(state);
    }
    return state;
}

/* Walk the tables from the root: header fields first, then (after the state variables whose
 * guard held are updated) the state-variable tables. Returns the final state. */
static __always_inline __u32 classify(__u32 root, struct camus_desc *root_desc, __u64 *v, __u32 nsvars) {
    __u32 state = walk(root, root_desc, v, CAMUS_N_FIELDS, CAMUS_N_FIELDS);
#if CAMUS_N_SVARS > 0
    if (!nsvars)
        return state & CAMUS_STATE_MASK;
    state &= CAMUS_STATE_MASK;
    update_svars(state, v);
    state = walk(state, desc_of(state), v, CAMUS_N_SVARS, CAMUS_N_VARS);
#endif
    return state & CAMUS_STATE_MASK;
}

/* Progress through a packet, carried across tail calls (one program run per message). */
struct camus_scratch {
    __u64 v[CAMUS_VAR_SLOTS];   /* the current message's variables (power of two: indexed by mask) */
    struct camus_leaf acc;      /* union over the packet's messages */
    __u32 off;                  /* from the packet start: the next message's length prefix */
    __u32 index;                /* the next message */
    __u32 nmsgs;
    __u32 root;
    __u32 record;
    __u32 seq;                  /* packets handed to TC on this CPU */
    __u32 skipped;              /* framed messages of other types (not classified) */
    __u32 empty;                /* framed messages that go nowhere (skipped or no ports) */
    __u32 nsvars;               /* state variables in use */
    __u32 uend;                 /* from the packet start: where the UDP datagram ends */
    __u32 bypass;               /* over budget: this packet's messages go by the cover */
    __u64 value;                /* a DNS answer's address or an ILA locator (leaf.value) */
    __u32 l3off;                /* ILA: where the IPv6 header starts (camus_ila.h) */
    __u32 call_keep;            /* messages with custom actions (for the host's stack) */
    __u32 msg_state[CAMUS_MAX_MSGS_RING];   /* each message's final state (0: nobody) */
    __u64 msg_ports[CAMUS_MAX_MSGS_RING][CAMUS_PORT_WORDS];   /* bit-vector stage: each message's
                                                                ports (no leaf state holds them) */
#if CAMUS_PORT_WORDS > 4
    struct { __u64 word; __u32 n, w; } one; /* finish: the packet's one port word, if one */
    struct camus_bv_out got;                /* the message being delivered (deliver) */
    struct camus_portset fan_key;           /* a packet's ports, as fan_groups' key (fan_out) */
#endif
    struct camus_desc root_desc;            /* the root's descriptor, copied once per packet */
};
BPF_PERCPU_ARRAY(scratch, struct camus_scratch, 1);
BPF_PERCPU_ARRAY(ring, struct camus_pkt, CAMUS_RING);
BPF_ARRAY(ports_cfg, struct camus_port, 64 * CAMUS_PORT_WORDS);
BPF_DEVMAP(tx_ports, 64 * CAMUS_PORT_WORDS);                  /* port -> ifindex, for XDP_REDIRECT */
BPF_PERCPU_ARRAY(port_stats, __u64, 64 * CAMUS_PORT_WORDS);   /* copies sent, per port */
BPF_ARRAY(fan, struct camus_fan, 1);
BPF_XDP_REDIRECT_MAP("devmap", struct bpf_devmap_val, fan_ports, CAMUS_MAX_FAN);  /* entry -> interface
                                                              + camus_fan_out, for broadcasts */
BPF_HASH(fan_port, __u32, __u32, CAMUS_MAX_FAN);             /* interface -> its port */
/* Port set -> a devmap of just those ports (user space makes one per port set of the leaves):
 * a broadcast through it copies only to the ports the packet goes to. */
BPF_HASH_OF_MAPS(fan_groups, struct camus_portset, "fan_ports", CAMUS_MAX_FAN_GROUPS);

BPF_ARRAY(bypass, struct camus_bypass, 2);             /* [bank]: written with the bank's tables */
BPF_PERCPU_ARRAY(overload, struct camus_overload, 1);

/* Graceful degradation (SANDS): above the configured packet rate a packet skips exact filtering
 * and its messages go to every port any rule forwards to, the cover of all filters: more copies,
 * never a missing one. A token bucket per CPU refilled at the rate, holding 10 ms of it. */
static __always_inline __u32 over_budget(void) {
    __u32 pps = cfg_get(CAMUS_CFG_BYPASS_PPS);
    __u32 zero = 0;
    struct camus_overload *o = pps ? overload.lookup(&zero) : 0;
    if (!o)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    __u64 elapsed = now - o->last_ns;
    if (elapsed > 1000000000ULL)                 /* idle for a second: the bucket is full anyway */
        elapsed = 1000000000ULL;
    o->last_ns = now;
    __u64 cap = (__u64)pps * 10;                 /* 10 ms of the rate, at least one packet */
    if (cap < 1000)
        cap = 1000;
    __u64 tokens = o->milli_tokens + elapsed * pps / 1000000;
    if (tokens > cap)
        tokens = cap;
    if (tokens < 1000) {
        o->milli_tokens = tokens;
        return 1;
    }
    o->milli_tokens = tokens - 1000;
    return 0;
}

static __always_inline void count_port(__u32 port) {
    __u64 *c = port_stats.lookup(&port);
    if (c)
        *c += 1;
}

/* 1 if x != 0, without a branch (data-dependent branches multiply the verifier's paths). */
static __always_inline __u32 nonzero(__u64 x) {
    return (__u32)((x | -x) >> 63);
}

/* nonzero(), which clang cannot turn back into a compare and branch (it does when the result
 * selects a value). */
static __always_inline __u32 nonzero_opaque(__u64 x) {
    __u64 y = x | -x;
    asm volatile("" : "+r"(y));
    return (__u32)(y >> 63);
}

static __always_inline __u32 bit_index(__u64 low) {   /* low has exactly one bit set */
    return (nonzero(low & 0xFFFFFFFF00000000ULL) << 5) | (nonzero(low & 0xFFFF0000FFFF0000ULL) << 4) |
           (nonzero(low & 0xFF00FF00FF00FF00ULL) << 3) | (nonzero(low & 0xF0F0F0F0F0F0F0F0ULL) << 2) |
           (nonzero(low & 0xCCCCCCCCCCCCCCCCULL) << 1) | nonzero(low & 0xAAAAAAAAAAAAAAAAULL);
}



static __always_inline __u32 popcount64(__u64 x) {
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (__u32)((x * 0x0101010101010101ULL) >> 56);
}

static __always_inline struct camus_pkt *ring_slot(struct camus_scratch *s) {
    __u32 slot = s->seq & (CAMUS_RING - 1);
    return ring.lookup(&slot);
}
BPF_PROG_ARRAY(progs, 3);       /* [0]: camus_msg, [1]: camus_fan_decide (camus_fan.c), [2]: camus_finish */

/*@CAMUS_TOPIC_H@*/

/*@CAMUS_DNS_H@*/

/*@CAMUS_ILA_H@*/

/*@CAMUS_BV_H@*/

/* One message: classify, merge its ports into the packet's, record it if asked. Only the final
 * state is kept per message (in the scratch: no ring lookup per message); TC, which alone
 * needs per-message ports to prune copies, reads them from leaf[] for delivering packets. */
static __always_inline void deliver(struct camus_scratch *s, __u32 index) {
#if CAMUS_PARSE_ONLY
    /* Benchmark floor: the fields were read; keep them live, classify nothing. */
    s->acc.group ^= (__u32)s->v[0];
    return;
#endif
#if CAMUS_PORT_WORDS > 4
    struct camus_bv_out *got = &s->got;         /* wide port sets: too big for the 512-byte stack */
    got->flags = 0;                             /* every path below writes all of its ports */
#else
    struct camus_bv_out got_here = {};
    struct camus_bv_out *got = &got_here;
#endif
    __u32 state;
    if (s->bypass) {
        __u32 bank = camus_bank(s->root);
        struct camus_bypass *b = bypass.lookup(&bank);
        state = CAMUS_STATE_BV;                  /* its ports are in the scratch, as below */
        count(CAMUS_STAT_BYPASS);
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++) {
            got->ports[w] = b ? b->ports[w] : 0;
            s->msg_ports[index & (CAMUS_MAX_MSGS_RING - 1)][w] = got->ports[w];
            if (got->ports[w])
                got->flags = CAMUS_LEAF_PORTS;
        }
        got->flags |= b ? b->flags : 0;
#if CAMUS_BV_STAGE
    } else if (s->root_desc.kind == CAMUS_KIND_BV) {
        state = CAMUS_STATE_BV;                  /* the matching terms' leaves, united */
        if (!bv_classify(&s->root_desc, s->root, s->v, got))
            got->flags = 0;                       /* maps inconsistent: deliver nothing */
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            s->msg_ports[index & (CAMUS_MAX_MSGS_RING - 1)][w] = got->ports[w];
#endif
    } else {
        state = classify(s->root, s->root_desc.kind ? &s->root_desc : 0, s->v, s->nsvars);
        struct camus_leaf *l = leaf.lookup(&state);
        if (!l)
            return;
        got->flags = l->flags;
#if CAMUS_PORT_WORDS <= 4                        /* wide sets: wide_union reads them from the leaf */
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            got->ports[w] = l->ports[w];
#endif
#if CAMUS_DNS_ANSWERS || CAMUS_ILA
        if (l->flags & (CAMUS_LEAF_ANSWER | CAMUS_LEAF_ILA))
            s->value = l->value;
#endif
    }
#ifdef CAMUS_DEFAULT_FLAGS
    /* query_default_action: a message no rule delivered gets the spec's default (its custom
     * actions run on the host stack); a leaf that only counts does not deliver either. */
    if (!(got->flags & (CAMUS_LEAF_PORTS | CAMUS_LEAF_DROP | CAMUS_LEAF_CALL)))
        got->flags |= CAMUS_DEFAULT_FLAGS;
#endif
    s->msg_state[index & (CAMUS_MAX_MSGS_RING - 1)] = state;
    __u32 flags = got->flags;
    s->call_keep |= ((flags / CAMUS_LEAF_CALL) & 1) << (index & (CAMUS_MAX_MSGS_RING - 1));
#if CAMUS_PORT_WORDS <= 4
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        s->acc.ports[w] |= got->ports[w];
#endif
    s->empty += ((flags / CAMUS_LEAF_PORTS) & 1) ^ 1;
    s->acc.flags |= flags;
    if (flags & CAMUS_LEAF_DROP) {
        count(CAMUS_STAT_EXPLICIT);
        if (state != CAMUS_STATE_BV)
            count_hit(state);               /* TC counts every other matched message */
    }
    if (s->record) {
        struct camus_result *r = results.lookup(&index);
        if (r) {
            r->state = state;
            r->flags = flags;
#if CAMUS_PORT_WORDS <= 4                        /* wide sets: wide_union records them */
            CAMUS_EACH_WORD
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                r->ports[w] = got->ports[w];
#endif
        }
    }
}

/* The rule hits of a delivered packet's messages, where XDP counts them itself. With
 * `may_drop` (a constant) drop-rule states, counted when classified, are skipped. */
static __always_inline void count_packet_hits(struct camus_scratch *s, const int may_drop) {
    #pragma unroll
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        if (i >= s->nmsgs)
            break;
        __u32 state = s->msg_state[i];
        if (may_drop)
            count_delivered(state, leaf.lookup(&state));
        else
            count_hit(state);
    }
}

static __always_inline void add_stat(__u32 idx, __u64 n) {
    __u64 *c = stats.lookup(&idx);
    if (c)
        *c += n;
}

/* Any port can take a broadcast (user space writes struct camus_fan only with TC attached):
 * one inlined array read spares packets the tail call when none can. */
static __always_inline __u32 fan_on(void) {
    __u32 zero = 0;
    struct camus_fan *f = fan.lookup(&zero);
    return f && f->entries;
}

/* The way out of a delivering packet whose ring slot and metadata are written: XDP broadcast
 * (camus_fan.c) when struct camus_fan allows it for this packet — through the devmap of exactly
 * its ports from `min_group` copies, or the devmap of all from `min_copies` — else XDP_PASS to
 * TC. Decided last, so the paths before it stay the same for the verifier. */
static __always_inline int fan_out(struct camus_scratch *s) {
    __u32 zero = 0;
    struct camus_fan *f = fan.lookup(&zero);
    if (!f || !f->entries || (s->acc.flags & CAMUS_LEAF_CALL))
        return XDP_PASS;                     /* custom actions run on the host: by TC */
    __u64 outside = 0;
    __u32 copies = 0;
#if CAMUS_PORT_WORDS > 4
    struct camus_portset *key = &s->fan_key;    /* too big for the stack */
#else
    struct camus_portset key_here;
    struct camus_portset *key = &key_here;
#endif
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++) {
        outside |= s->acc.ports[w] & ~f->mask[w];
        copies += popcount64(s->acc.ports[w]);
        key->w[w] = s->acc.ports[w];
    }
    if (outside || copies < f->min_group)
        return XDP_PASS;
    void *group = fan_groups.lookup(key);
    if (!group && copies < f->min_copies)
        return XDP_PASS;
    count_packet_hits(s, 1);                 /* TC counts the packets it copies; these it never sees */
    count(CAMUS_STAT_BROADCAST);
    if (group)
        return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
    count(CAMUS_STAT_BROADCAST_ALL);
    return fan_ports.redirect_map(0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

static __always_inline int finish(struct xdp_md *ctx, struct camus_scratch *s) {
    add_stat(CAMUS_STAT_MESSAGES, s->nmsgs - s->skipped);
    __u64 any = 0;
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        any |= s->acc.ports[w];
    if (s->record) {
        __u32 idx = CAMUS_MAX_MSGS;
        struct camus_result *r = results.lookup(&idx);
        if (r) {
            r->state = s->nmsgs;
            r->flags = s->acc.flags;
            CAMUS_EACH_WORD
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                r->ports[w] = s->acc.ports[w];
        }
    }
#if CAMUS_DNS_ANSWERS
    if (s->acc.flags & CAMUS_LEAF_ANSWER) {      /* one message per packet: the query itself */
        struct camus_topic_work *w = camus_topic_work();
        int answered = w ? camus_dns_answer(ctx, w->wire, (__u32)s->value) : 0;
        if (answered > 0) {
            count(CAMUS_STAT_ANSWERED);
            count_packet_hits(s, 1);             /* TC never sees it: the rule is counted here */
            return XDP_TX;
        }
        if (answered < 0) {                      /* resized, then out of bounds: cannot happen */
            count(CAMUS_STAT_MALFORMED);
            return XDP_DROP;
        }
    }
#endif
#if CAMUS_ILA
    if ((s->acc.flags & CAMUS_LEAF_ILA) && camus_ila_rewrite(ctx, s->l3off, s->value))
        count(CAMUS_STAT_REWRITTEN);             /* the ports and the stack get the new address */
#endif
    if (!any && !(s->acc.flags & CAMUS_LEAF_CALL)) {
        count(CAMUS_STAT_NO_MATCH);
        return XDP_DROP;
    }
    count(CAMUS_STAT_DELIVER);
    /* Every message for one interface port: send the frame as it is, straight from XDP. */
    if (s->empty == 0 && !(s->acc.flags & CAMUS_LEAF_CALL) && cfg_get(CAMUS_CFG_REDIRECT)) {
        __u32 nonzero_words = 0, widx = 0;
        __u64 word = 0;
#if CAMUS_PORT_WORDS > 4
        /* Without a branch per word (each would double the verifier's paths: 2^words), and the
         * sums in memory (in registers the verifier would follow each distinct value): with one
         * word in use, `word` is that word and `widx` its index. */
        s->one.n = 0;
        s->one.w = 0;
        s->one.word = 0;
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++) {
            __u64 x = s->acc.ports[w];
            __u32 nz = nonzero_opaque(x);
            *(volatile __u32 *)&s->one.n += nz;
            *(volatile __u64 *)&s->one.word |= x;
            *(volatile __u32 *)&s->one.w |= w & -nz;
        }
        nonzero_words = *(volatile __u32 *)&s->one.n;
        word = *(volatile __u64 *)&s->one.word;
        widx = *(volatile __u32 *)&s->one.w & (CAMUS_PORT_WORDS - 1);
#else
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++) {
            if (s->acc.ports[w]) {
                nonzero_words++;
                word = s->acc.ports[w];
                widx = w;
            }
        }
#endif
        if (nonzero_words == 1 && (word & (word - 1)) == 0) {
            __u32 port = (widx << 6) + bit_index(word);
            struct camus_port *pc = ports_cfg.lookup(&port);
            if (pc && pc->kind == CAMUS_PORT_IFACE) {
                count(CAMUS_STAT_REDIRECT);
                count_port(port);
                count_packet_hits(s, 0);     /* every message has ports: none is a drop */
                return tx_ports.redirect_map(port, 0);
            }
        }
    }
    if (!cfg_get(CAMUS_CFG_TC))              /* no TC attached: count the rules here */
        count_packet_hits(s, 1);
    /* Copies are made by TC (camus_tc.c) or an XDP broadcast (camus_fan.c, fan_out): either way
     * the ring slot named in the metadata says which ports each message goes to. */
    struct camus_pkt *pk = ring_slot(s);
    if (pk) {
        pk->nmsgs = s->nmsgs;
        pk->call_keep = s->call_keep;
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            pk->ports[w] = s->acc.ports[w];
        __builtin_memcpy(pk->msg_state, s->msg_state, sizeof(pk->msg_state));   /* TC reads nmsgs */
        if (s->root_desc.kind == CAMUS_KIND_BV || s->bypass) {  /* no leaf state holds these ports */
#if CAMUS_PORT_WORDS > 4
            /* wide port sets: the messages there are (a memcpy this long is no BPF instruction) */
            for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
                if (i >= s->nmsgs)
                    break;
                CAMUS_EACH_WORD
                for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                    pk->msg_ports[i][w] = s->msg_ports[i][w];
            }
#else
            __builtin_memcpy(pk->msg_ports, s->msg_ports, sizeof(pk->msg_ports));
#endif
        }
    }
    __u32 seq = s->seq;
    s->seq = seq + 1;
    if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct camus_meta)) == 0) {
        void *data = (void *)(long)ctx->data;
        struct camus_meta *meta = (void *)(long)ctx->data_meta;
        if ((void *)(meta + 1) <= data) {
            meta->magic = CAMUS_META_MAGIC;
            meta->seq = (seq & ((1U << CAMUS_META_CPU_SHIFT) - 1)) |
                        (bpf_get_smp_processor_id() << CAMUS_META_CPU_SHIFT);
            if (pk && fan_on())
                progs.call(ctx, 1);          /* camus_fan_decide: broadcast or XDP_PASS (a tail call:
                                                verified apart, not once per path through here) */
        }
    }
    return XDP_PASS;
}

#if CAMUS_PORT_WORDS > 4
/* Wide port sets: every loop over a set's words is walked by the verifier once per path that
 * reaches it, and the classifier has many paths (a thousand loops of 64 words exhaust the
 * budget). So deliver() keeps only each message's state (and the ports of the bit-vector stage
 * and the bypass, which no leaf holds), and the packet's end runs in a program of its own,
 * camus_finish (tail-called, verified from one state): there each message's ports are read from
 * its leaf and united, then finish() as for narrow sets. */
static __always_inline void wide_union(struct camus_scratch *s) {
    for (int i = 0; i < CAMUS_MAX_MSGS_RING; i++) {
        if (i >= s->nmsgs)
            break;
        __u32 state = s->msg_state[i];
        if (state != CAMUS_STATE_BV) {
            struct camus_leaf *l = leaf.lookup(&state);
            CAMUS_EACH_WORD
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                s->msg_ports[i][w] = l ? l->ports[w] : 0;
        }
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            s->acc.ports[w] |= s->msg_ports[i][w];
        __u32 idx = i;
        struct camus_result *r = s->record ? results.lookup(&idx) : 0;
        if (r) {
            CAMUS_EACH_WORD
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                r->ports[w] = s->msg_ports[i][w];
        }
    }
}
#define CAMUS_FINISH(ctx, s) finish_apart(ctx)
static __always_inline int finish_apart(struct xdp_md *ctx) {
    progs.call(ctx, 2);                        /* camus_finish */
    return XDP_PASS;                           /* not loaded: over-deliver rather than lose */
}
#else
#define CAMUS_FINISH(ctx, s) finish(ctx, s)
#endif

static __always_inline int malformed(void) {
    count(CAMUS_STAT_MALFORMED);
    return cfg_get(CAMUS_CFG_MALFORMED) ? XDP_PASS : XDP_DROP;
}

static __always_inline struct camus_scratch *get_scratch(void) {
    __u32 zero = 0;
    return scratch.lookup(&zero);
}

/* Per packet: the accumulated verdict cleared, the root (and so the table set) read once. */
static __always_inline void begin_packet(struct camus_scratch *s) {
    __builtin_memset(&s->acc, 0, sizeof(s->acc));
    s->root = cfg_get(CAMUS_CFG_ROOT);
    struct camus_desc *rd = desc_of(s->root);
    if (rd)
        s->root_desc = *rd;
    else
        s->root_desc.kind = CAMUS_KIND_NONE;
    s->record = cfg_get(CAMUS_CFG_RECORD);
    s->skipped = 0;
    s->empty = 0;
    s->nsvars = CAMUS_N_SVARS ? cfg_get(CAMUS_CFG_NSVARS) : 0;
    s->bypass = over_budget();
    s->call_keep = 0;
#if CAMUS_DNS_ANSWERS || CAMUS_ILA
    s->value = 0;
#endif
}

/*@CAMUS_ATTRS_H@*/

/* Classify the MoldUDP64 message at s->off, then tail-call ourselves for the next one. */
int camus_msg(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct camus_scratch *s = get_scratch();
    if (!s)
        return XDP_PASS;
    __u32 off = s->off;
    if (off > 0x3FFF)                      /* past any MTU: the packet is lying */
        return malformed();
    off &= 0x3FFF;                          /* tells the verifier the bound */
    void *lenp = data + off;
    if (lenp + 2 > end)
        return malformed();                 /* the count promised more messages */
    __u32 len = bpf_ntohs(*(__u16 *)lenp);
    if (len > 0x3FFF || off + 2 + len > s->uend)
        return malformed();                 /* runs past the datagram (or the MTU) */
    len &= 0x3FFF;
    void *msg = lenp + 2;
    if (msg + len > end)
        return malformed();
    __u32 index = s->index;
    s->off = off + 2 + len;
    s->index = index + 1;
    if (len >= CAMUS_MSG_BYTES && msg + CAMUS_MSG_BYTES <= end && CAMUS_MSG_TYPE_OK(msg)) {
        camus_message_fields(s->v, msg);
        CAMUS_READ_TOPICS(s->v, msg, end, len, camus_bank(s->root));
        deliver(s, index);
    } else {                                /* other message types: framed, not filtered */
        s->empty++;
        s->skipped++;
        s->msg_state[index & (CAMUS_MAX_MSGS_RING - 1)] = 0;
    }
    if (s->index < s->nmsgs && s->index < CAMUS_MAX_MSGS)
        progs.call(ctx, 0);
    if (s->index < s->nmsgs)
        return malformed();                 /* tail call failed: cannot finish honestly */
    return CAMUS_FINISH(ctx, s);
}

int camus_xdp(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    count(CAMUS_STAT_PACKETS);

    __u16 proto;
    void *l3 = camus_l2(data, end, &proto);
    if (!l3)
        goto other;
#if CAMUS_FRAMING_ATTRS
    /* EtherType 0x9001: one message of attributes, no IP/UDP (camus_attrs.h) */
    if (proto != bpf_htons(CAMUS_ETHERTYPE_ATTRS))
        goto other;
    struct camus_scratch *sa = get_scratch();
    if (!sa)
        goto other;
    begin_packet(sa);
    if (!camus_attrs(sa, data, l3, end))
        return malformed();
    sa->nmsgs = 1;
    deliver(sa, 0);
    return CAMUS_FINISH(ctx, sa);
#endif
    void *l4;
    __u32 ip_end;                             /* where the IP packet ends, by its length field */
    if (proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = l3;
        if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
            goto other;
        if (ip->frag_off & bpf_htons(0x3FFF))
            goto other;                       /* fragments: the stack reassembles */
        if (ip->protocol != IPPROTO_UDP)
            goto other;
        l4 = l3 + ip->ihl * 4;
        ip_end = (__u32)(l3 - data) + bpf_ntohs(ip->tot_len);
    } else if (proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = l3;
        if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
            goto other;
        l4 = ip6 + 1;
        ip_end = (__u32)(l4 - data) + bpf_ntohs(ip6->payload_len);
    } else {
        goto other;
    }
    struct udphdr *udp = l4;
    if ((void *)(udp + 1) > end)
        goto other;
    if (!CAMUS_UDP_PORT_OK(bpf_ntohs(udp->dest)))
        goto other;
    /* The lengths must agree with the frame: the messages end where the datagram does (not at
     * the frame's end: Ethernet pads short frames), and a lying length is a malformed packet. */
    __u32 l4_off = (__u32)(l4 - data), ulen = bpf_ntohs(udp->len);
    if (ulen < 8 || l4_off + ulen > ip_end || ip_end > (__u32)(end - data))
        return malformed();

    struct camus_scratch *s = get_scratch();
    if (!s)
        goto other;
    begin_packet(s);
#if CAMUS_ILA
    s->l3off = (__u32)(l3 - data);
#endif
    s->uend = l4_off + ulen;
    if (!camus_packet_fields(s->v, data, l3, l4, end))
        goto other;
    void *payload = udp + 1;

#if CAMUS_FRAMING_MOLD
    __u32 first = l4_off + 8 + 20;            /* the first message's length prefix */
    if (payload + 20 > end || first > s->uend)
        return malformed();
    __u16 nmsgs = bpf_ntohs(*(__u16 *)(payload + 18));
    if ((__u32)nmsgs * 2 > s->uend - first)
        return malformed();                   /* not even room for the length prefixes */
    if (nmsgs > CAMUS_MAX_MSGS) {
        count(CAMUS_STAT_OVERFLOW);           /* more than we classify: the stack gets the batch */
        return XDP_PASS;
    }
    s->nmsgs = nmsgs;
    s->index = 0;
    s->off = (payload + 20) - data;
    if (nmsgs == 0)
        return CAMUS_FINISH(ctx, s);
    progs.call(ctx, 0);
    return malformed();                        /* tail call failed: not loaded properly */
#else
    void *msg = payload;
    if (msg + CAMUS_MSG_BYTES > end || l4_off + 8 + CAMUS_MSG_BYTES > s->uend)
        return malformed();
    s->nmsgs = 1;
    if (CAMUS_MSG_TYPE_OK(msg)) {
        camus_message_fields(s->v, msg);
        CAMUS_READ_TOPICS(s->v, msg, end, ulen - 8, camus_bank(s->root));
        deliver(s, 0);
    } else {
        s->empty++;
        s->skipped++;
        s->msg_state[0] = 0;
    }
    return CAMUS_FINISH(ctx, s);
#endif

other:
    count(CAMUS_STAT_OTHER);
    return XDP_PASS;
}

#if CAMUS_PORT_WORDS > 4
/* Tail-called at a packet's end (wide port sets: wide_union above). */
int camus_finish(struct xdp_md *ctx) {
    struct camus_scratch *s = get_scratch();
    if (!s)
        return XDP_PASS;
    wide_union(s);
    return finish(ctx, s);
}
#endif

/*@CAMUS_TC_C@*/
