/* camus-xdp: the bit-vector stage in the kernel (included by camus_xdp.c).
 *
 * One interval lookup per query field (an ordinary range/radix table whose "next states" stand
 * for bitmap ids; an unconstrained field has one interval; the tables' descriptors are inline
 * in the bank's bv_segs value), then the segments (runs of terms with the same leaf inside one
 * word; terms sorted by leaf at compile time) leaf by leaf: a segment's word ANDed over the
 * fields and masked; the first matching segment of a leaf ORs in the leaf's ports and flags
 * (copied into the segments), counts its per-rule hit and jumps past the leaf's other segments.
 * Work per message: field lookups + (matching leaves + unmatched segments) x fields loads.
 * Every loop has a constant bound (CAMUS_BV_WORDS, CAMUS_MAX_BV_SEGS); the sizes in use come
 * from the root's descriptor, so a new rule set never reloads the program. Every query field
 * has a table (root+1+i for field i), in field order.
 */
struct camus_bv_bits {
    __u64 w[CAMUS_BV_WORDS];
};
BPF_ARRAY(bv_bits, struct camus_bv_bits, CAMUS_MAX_BV_BITMAPS);

/* The per-CPU work area. Values the verifier must see as unknown are read back from here: a
 * loop bound or cursor held as a known constant would be narrowed by each loop exit, and the
 * verifier would then follow every exit point separately through the rest of the program. */
struct camus_bv_work {
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
    __u64 w[CAMUS_BV_WORDS];         /* the fields beyond CAMUS_BV_LOOP_FIELDS, ANDed per word */
#endif
    __u32 bid[CAMUS_N_FIELDS];       /* each field's bitmap for this message */
    __u32 words;
    __u64 zero;                      /* 0, read back as a value the verifier does not know */
};
#define CAMUS_BV_PREFIX_LEAVES 64
#define CAMUS_BV_PREFIX_WORDS 4
struct camus_bv_pleaf {          /* a leaf of the prefix, in group order */
    __u64 tbit;                  /* its settled bit: the top bit of its group */
    __u32 flags;
    __u32 leaf;
    __u64 ports[CAMUS_PORT_WORDS];
};
struct camus_bv_segs {           /* one bank's stage in one value: no lookup per field or segment */
    __u64 tops;                  /* the prefix: every leaf's settled bit (0: no prefix) */
    __u64 rest;                  /* the groups' other bits */
    __u64 all_ports[CAMUS_PORT_WORDS];         /* every prefix leaf united: all settled at once */
    __u32 all_flags;
    __u32 pwords;                /* prefix words */
    __u32 nleaves;               /* entries of pl */
    __u32 counted;               /* a leaf has per-rule counters: settle leaf by leaf */
    struct camus_desc fd[CAMUS_N_FIELDS];      /* field i's interval table (copy of desc[root+1+i]) */
    struct camus_bv_pleaf pl[CAMUS_BV_PREFIX_LEAVES];
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

static __always_inline __u32 bv_field_bitmap(struct camus_desc *root, struct camus_desc *d, __u32 s, __u64 *v) {
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
    __u32 bank = (__u32)(root->mult >> 32);
    struct camus_bv_segs *segs = bv_segs.lookup(&bank);
    if (!segs)
        return 0;
    __u32 first = (root_state & CAMUS_STATE_MASK) + 1;
    #pragma nounroll
    for (int i = 0; i < CAMUS_N_FIELDS; i++)
        acc->bid[i] = bv_field_bitmap(root, &segs->fd[i], first + i, v);
    /* 2. The bitmaps themselves (constant indices: the pointers stay known to the verifier). */
    struct camus_bv_bits *f[CAMUS_N_FIELDS];
    #pragma unroll
    for (int i = 0; i < CAMUS_N_FIELDS; i++) {
        __u32 bid = acc->bid[i];
        f[i] = bv_bits.lookup(&bid);
        if (!f[i])
            return 0;
    }
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
    /* Many fields: those beyond the loop's share are ANDed once per word first (the verifier
     * walks the segment loop CAMUS_MAX_BV_SEGS times; this one CAMUS_BV_WORDS times). */
    acc->words = root->count;
    #pragma nounroll
    for (int w = 0; w < CAMUS_BV_WORDS; w++) {
        if (w >= *(volatile __u32 *)&acc->words)
            break;
        __u32 k = bv_index(w, CAMUS_BV_WORDS);
        __u64 a = f[CAMUS_BV_LOOP_FIELDS]->w[k];
        #pragma unroll
        for (int i = CAMUS_BV_LOOP_FIELDS + 1; i < CAMUS_N_FIELDS; i++)
            a &= f[i]->w[k];
        acc->w[k] = a;
    }
#endif
    acc->zero = 0;
    __u64 unknown0 = *(volatile __u64 *)&acc->zero;
    #pragma unroll
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        out->ports[w] = unknown0;
    out->flags = (__u32)unknown0;
    /* 3. The prefix (structure/bitvector.term_order): every leaf owns a group of bits in each
     * prefix word, its likeliest terms. One AND over the fields per word, then a group with a
     * bit left sets its top bit (the add carries into it from any lower bit, never past it):
     * `done` gets one bit per leaf, and most messages that match most leaves settle them all
     * in a word or two. */
    __u64 done = unknown0, tops = segs->tops;
    __u32 pwords = segs->pwords;
    #pragma unroll
    for (int w = 0; w < CAMUS_BV_PREFIX_WORDS && w < CAMUS_BV_WORDS; w++) {
        if (w >= pwords || done == tops)
            break;
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
        __u64 x = acc->w[w];
#else
        __u64 x = ~(__u64)0;
#endif
        #pragma unroll
        for (int i = 0; i < CAMUS_BV_LOOP_FIELDS; i++)
            x &= f[i]->w[w];
        done |= (((x & ~tops) + segs->rest) | x) & tops;
    }
    if (done && done == tops && !segs->counted) {      /* every leaf: their union, made ahead */
        #pragma unroll
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] = segs->all_ports[w];
        out->flags = segs->all_flags & (CAMUS_LEAF_DROP | CAMUS_LEAF_CALL | CAMUS_LEAF_PORTS);
    } else if (done) {
        __u32 nleaves = segs->nleaves;
        #pragma nounroll
        for (int g = 0; g < CAMUS_BV_PREFIX_LEAVES; g++) {
            if (g >= nleaves)
                break;
            struct camus_bv_pleaf *pl = &segs->pl[g];
            if (!(done & pl->tbit))
                continue;
            #pragma unroll
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                out->ports[w] |= pl->ports[w];
            out->flags |= pl->flags & (CAMUS_LEAF_DROP | CAMUS_LEAF_CALL | CAMUS_LEAF_PORTS);
            if (pl->flags & CAMUS_LEAF_COUNTED)
                count_hit(pl->leaf);
        }
    }
    /* 4. The rest, leaf by leaf (segments sorted by leaf, then word), for the leaves the prefix
     * left: a segment's terms match where every field's bitmap has their bits; the first
     * matching segment of a leaf unites its ports and flags, counts its per-rule hit and jumps
     * past the leaf's other segments (`next`). The cursor and the results start from zeros the
     * verifier cannot see as zeros (and the segment count comes from the descriptor in memory),
     * so a matched and an unmatched iteration leave alike states and it prunes one of them at
     * the loop head instead of walking both through every later iteration. */
    __u64 all = tops ? tops : ~(__u64)0;        /* without a prefix no leaf has a bit */
    __u32 j = (__u32)unknown0;
    __u32 nsegs = done == all ? 0 : (__u32)root->mult;
    #pragma nounroll
    for (int it = 0; it < CAMUS_MAX_BV_SEGS; it++) {
        if (j >= nsegs)
            break;
        struct camus_bv_seg *sg = &segs->s[bv_index(j, CAMUS_MAX_BV_SEGS)];
        if (sg->lbit & done) {          /* the prefix settled this leaf */
            j = bv_index(sg->next, 2 * CAMUS_MAX_BV_SEGS);
            continue;
        }
        /* The segment's word ANDed over the fields. (Keeping the last word's AND for the next
         * segment would save it when a leaf's last word is the next one's first, but the branch
         * doubles the verifier's paths per iteration: 2,048 segments no longer verify.) */
        __u32 k = bv_index(sg->word, CAMUS_BV_WORDS);
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
        __u64 a_word = acc->w[k];
#else
        __u64 a_word = ~(__u64)0;
#endif
        #pragma unroll
        for (int i = 0; i < CAMUS_BV_LOOP_FIELDS; i++)
            a_word &= f[i]->w[k];
        /* Both ways j is masked to the same range, so the verifier's states at the loop head
         * stay alike however many segments were skipped (nsegs <= CAMUS_MAX_BV_SEGS). */
        if (!(a_word & sg->mask)) {
            j = bv_index(j + 1, 2 * CAMUS_MAX_BV_SEGS);
            continue;
        }
        out->ports[0] |= sg->ports[0];
        if (sg->flags & CAMUS_LEAF_WIDE) {   /* ports 64 and up: rare, and 3 words more per match */
            #pragma unroll
            for (int w = 1; w < CAMUS_PORT_WORDS; w++)
                out->ports[w] |= sg->ports[w];
        }
        out->flags |= sg->flags & (CAMUS_LEAF_DROP | CAMUS_LEAF_CALL | CAMUS_LEAF_PORTS);
        if (sg->flags & CAMUS_LEAF_COUNTED)     /* a matching leaf once per message */
            count_hit(sg->leaf);
        done |= sg->lbit;
        if (done == all)                /* every leaf settled */
            break;
        j = bv_index(sg->next, 2 * CAMUS_MAX_BV_SEGS);
    }
    if (out->flags & CAMUS_LEAF_DROP) {  /* an explicit drop wins over forwarding */
        #pragma unroll
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] = 0;
        out->flags &= ~CAMUS_LEAF_PORTS;
    }
    return 1;
}
