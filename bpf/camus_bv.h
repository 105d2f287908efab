/* camus-xdp: the bit-vector stage in the kernel (included by camus_xdp.c).
 *
 * One interval lookup per query field (an ordinary range/radix table whose "next states" stand
 * for bitmap ids; an unconstrained field has one interval), then the fields' bitmaps ANDed into the
 * per-CPU bv_acc, then one pass over the segments (runs of terms with the same leaf, terms
 * sorted by leaf at compile time) ORs the leaves of the matching terms (their ports and flags
 * are copied into the segments), counting the per-rule hits of leaves that have counters. Work per message:
 * fields lookups + fields x words loads + segments (words + leaves) checks. Every loop has a
 * constant bound (CAMUS_BV_WORDS, CAMUS_MAX_BV_SEGS); the sizes in use come from the root's
 * descriptor, so a new rule set never reloads the program. Every query field has a table
 * (root+1+i for field i), in field order.
 */
struct camus_bv_bits {
    __u64 w[CAMUS_BV_WORDS];
};
BPF_ARRAY(bv_bits, struct camus_bv_bits, CAMUS_MAX_BV_BITMAPS);

/* The per-CPU work area: the matched-terms bitmap and the loop limits, read back from memory
 * in every iteration: a limit held in a register would be narrowed by each loop exit, and
 * the verifier would then follow every exit point separately through the rest of the
 * program (16 fields x 256 words of paths). */
struct camus_bv_work {
    __u64 w[CAMUS_BV_WORDS];
    __u32 bid[CAMUS_N_FIELDS];       /* each field's bitmap for this message */
    __u32 words;
    __u32 nsegs;
};
struct camus_bv_segs {           /* one bank's segments in one value: no lookup per segment */
    struct camus_bv_seg s[CAMUS_MAX_BV_SEGS];
};
BPF_ARRAY(bv_segs, struct camus_bv_segs, 2);
BPF_PERCPU_ARRAY(bv_acc, struct camus_bv_work, 1);

/* The matched leaves of one message, united (ports, flags); per-rule hits counted here. */
struct camus_bv_out {
    __u64 ports[CAMUS_PORT_WORDS];
    __u32 flags;
};

/* i & (n - 1) that the compiler cannot drop (it knows i < n, the verifier does not once clang
 * has rewritten the loop around a run-time trip count). n is a power of two. */
static __always_inline __u32 bv_index(__u32 i, __u32 n) {
    asm volatile("" : "+r"(i));
    return i & (n - 1);
}

static __always_inline __u32 bv_field_bitmap(struct camus_desc *root, __u32 s, __u64 *v) {
    struct camus_desc *d = desc.lookup(&s);
    if (!d)
        return CAMUS_MAX_BV_BITMAPS;              /* no such bitmap: the lookup below fails */
    __u32 nxt = step(d, s, v[d->var & (CAMUS_VAR_SLOTS - 1)]);
    return root->base + ((nxt & CAMUS_STATE_MASK) - (root->default_next & CAMUS_STATE_MASK));
}

/* Returns 1 when classified (out filled), 0 when the maps are inconsistent (nobody). */
static __always_inline int bv_classify(struct camus_desc *root, __u32 root_state, __u64 *v,
                                       struct camus_bv_out *out) {
    __u32 zero = 0;
    struct camus_bv_work *acc = bv_acc.lookup(&zero);
    if (!acc)
        return 0;
    /* 1. Each field's interval -> its bitmap id (a loop the verifier walks once per field, not
     * an unrolled copy of the range lookup per field). Every query field has an interval table
     * (the back end gives an unconstrained field one interval holding every term). */
    __u32 first = (root_state & CAMUS_STATE_MASK) + 1;
    acc->words = root->count;
    acc->nsegs = (__u32)root->mult;
    #pragma nounroll
    for (int i = 0; i < CAMUS_N_FIELDS; i++)
        acc->bid[i] = bv_field_bitmap(root, first + i, v);
    /* 2. The bitmaps themselves (constant indices: the pointers stay known to the verifier). */
    struct camus_bv_bits *f[CAMUS_N_FIELDS];
    #pragma unroll
    for (int i = 0; i < CAMUS_N_FIELDS; i++) {
        __u32 bid = acc->bid[i];
        f[i] = bv_bits.lookup(&bid);
        if (!f[i])
            return 0;
    }
    /* 3. One pass over the words, every field ANDed in registers. */
    #pragma nounroll
    for (int w = 0; w < CAMUS_BV_WORDS; w++) {
        if (w >= *(volatile __u32 *)&acc->words)
            break;
        __u32 k = bv_index(w, CAMUS_BV_WORDS);
        __u64 a = f[0]->w[k];
        #pragma unroll
        for (int i = 1; i < CAMUS_N_FIELDS; i++)
            a &= f[i]->w[k];
        acc->w[k] = a;
    }
    /* One pass over the segments, branch-free inside (the verifier walks every iteration):
     * a matching segment's ports and flags are OR-ed in under an all-ones mask. */
    __u32 bank = (__u32)(root->mult >> 32);
    struct camus_bv_segs *segs = bv_segs.lookup(&bank);
    if (!segs)
        return 0;
    __u64 p0 = 0, p1 = 0, p2 = 0, p3 = 0;
    __u32 flags = 0, last = 0;
    #pragma nounroll
    for (int j = 0; j < CAMUS_MAX_BV_SEGS; j++) {
        if (j >= *(volatile __u32 *)&acc->nsegs)
            break;
        struct camus_bv_seg *sg = &segs->s[bv_index(j, CAMUS_MAX_BV_SEGS)];
        __u64 sel = 0 - (__u64)nonzero(acc->w[sg->word & (CAMUS_BV_WORDS - 1)] & sg->mask);
        p0 |= sg->ports[0] & sel;
        p1 |= sg->ports[1] & sel;
        p2 |= sg->ports[2] & sel;
        p3 |= sg->ports[3] & sel;
        flags |= sg->flags & (__u32)sel;
        /* Per-rule counters: a matching leaf once per message (its segments are adjacent). */
        __u32 leaf_id = sg->leaf;
        __u64 fresh = sel & (0 - (__u64)nonzero(leaf_id ^ last));
        last = (last & ~(__u32)sel) | (leaf_id & (__u32)sel);
        if (fresh & sg->flags & CAMUS_LEAF_COUNTED)
            count_hit(leaf_id);
    }
    out->ports[0] = p0;
    out->ports[1] = p1;
    out->ports[2] = p2;
    out->ports[3] = p3;
    out->flags = flags;
    if (out->flags & CAMUS_LEAF_DROP) {  /* an explicit drop wins over forwarding */
        #pragma unroll
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] = 0;
        out->flags &= ~CAMUS_LEAF_PORTS;
    }
    return 1;
}
