/* camus-xdp: the bit-vector stage in the kernel (included by camus_xdp.c).
 *
 * The prefix is port columns or planes (structure/bv_layout.py chooses). Port columns: each
 * word holds one term per port at the port's own bit, so its AND over the fields is the ports
 * it delivers; groups of 64 ports end early once their ports are delivered.
 *
 * One interval lookup per query field (a direct-index, radix or range table whose "next
 * states" stand for bitmap ids; an unconstrained field has one interval; the tables'
 * descriptors are inline in the bank's bv_segs value). Then the prefix (structure/bv_layout.
 * term_order): in planes of up to 64 leaves, each leaf owns a group of bits in every word of
 * its plane; one AND over the fields per word and one add settle a whole plane's leaves at
 * once, united ahead when all are settled, else bit by bit. Then, only for leaves the prefix
 * left, the segments (runs of terms with the same leaf inside one word, sorted by leaf) leaf by
 * leaf: a segment's word ANDed over the fields and masked; the first matching segment of a leaf
 * ORs in its ports and flags (copied into the segment), counts its per-rule hit and jumps past
 * the leaf's other segments. Every loop has a constant bound; the sizes in use come from the
 * root's descriptor and the stage value, so a new rule set never reloads the program. Every
 * query field has a table (root+1+i for field i), in field order.
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
    __u64 done[CAMUS_BV_PLANES];     /* per prefix plane: the leaves settled */
    __u64 unite[CAMUS_BV_PLANES];    /* of those, the ones still to unite one by one */
    __u64 col[CAMUS_PORT_WORDS];     /* the ports the port columns delivered so far */
    __u64 open[CAMUS_PORT_WORDS];    /* ports with a run the columns did not deliver, still to test */
    __u64 rbit;                      /* the port whose run is being tested (its bit in its word) */
    __u32 rgroup, rcur, rend;        /* its port word; its next piece and the end of its pieces */
    __u32 plane;                     /* the plane they are being united from */
    __u32 words;
    __u64 zero;                      /* 0, read back as a value the verifier does not know */
};
struct camus_bv_segs {           /* one bank's stage in one value: no lookup per field or segment */
    __u32 nplanes;
    __u32 walk_all;              /* a leaf in no plane: the walk always runs */
    __u32 ncols;                 /* port-column word quads (the prefix is planes or columns) */
    __u32 nruns;                 /* port-run pieces */
    __u64 runmask[CAMUS_PORT_WORDS];           /* ports with a run */
    struct camus_bv_prun pr[CAMUS_PORT_WORDS * 64];   /* per port word, by de Bruijn index of the port's bit */
    struct camus_bv_plane pn[CAMUS_BV_PLANES];
    struct camus_desc fd[CAMUS_N_FIELDS];      /* field i's interval table (copy of desc[root+1+i]) */
    struct camus_bv_pleaf pl[CAMUS_BV_PLANES * CAMUS_BV_PLANE_LEAVES];
    struct camus_bv_seg s[CAMUS_MAX_BV_SEGS];
    struct camus_bv_col c[CAMUS_MAX_BV_COLS];
    struct camus_bv_run r[CAMUS_MAX_BV_RUNS];
};
BPF_ARRAY(bv_segs, struct camus_bv_segs, 2);
BPF_PERCPU_ARRAY(bv_acc, struct camus_bv_work, 1);

/* i & (n - 1) that the compiler cannot drop (it knows i < n, the verifier does not once clang
 * has rewritten the loop around a run-time trip count). n is a power of two. */
static __always_inline __u32 bv_index(__u32 i, __u32 n) {
    asm volatile("" : "+r"(i));
    return i & (n - 1);
}

static __always_inline __u32 bv_field_bitmap(struct camus_desc *root, struct camus_desc *d, __u64 *v) {
    /* A field's interval table is direct-indexed (a narrow domain: one load), a radix table,
     * or an 8-ary search tree for starts too clustered for one (ebpf_tables): never LPM or
     * exact. */
    __u64 key = v[d->var & (CAMUS_VAR_SLOTS - 1)];
    __u32 nxt;
    if (d->kind == CAMUS_KIND_DIRECT) {
        __u32 i = d->base + (__u32)(key < d->count ? key : d->count);
        struct camus_rnode *n = rnodes.lookup(&i);
        nxt = n ? n->below : 0;
    } else {
        nxt = d->kind == CAMUS_KIND_RADIX ? radix_next(d, key) : range_next(d, key);
    }
    return root->base + ((nxt & CAMUS_STATE_MASK) - (root->default_next & CAMUS_STATE_MASK));
}

/* Word k of the matched-terms bitmap: the fields' bitmaps ANDed (those beyond the loop's share
 * were ANDed per word ahead, into acc->w). */
static __always_inline __u64 bv_word(struct camus_bv_work *acc, struct camus_bv_bits **f, __u32 k) {
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
    __u64 x = acc->w[k];
#else
    __u64 x = ~(__u64)0;
#endif
    #pragma unroll
    for (int i = 0; i < CAMUS_BV_LOOP_FIELDS; i++)
        x &= f[i]->w[k];
    return x;
}

/* Words k to k + 3 (k a multiple of 4) of the matched-terms bitmap, ORed: a port-column quad
 * (each field's bitmap pointer loaded once for the four words). */
static __always_inline __u64 bv_quad(struct camus_bv_work *acc, struct camus_bv_bits **f, __u32 k) {
#if CAMUS_N_FIELDS > CAMUS_BV_LOOP_FIELDS
    __u64 x = acc->w[k], y = acc->w[k + 1], z = acc->w[k + 2], u = acc->w[k + 3];
#else
    __u64 x = ~(__u64)0, y = ~(__u64)0, z = ~(__u64)0, u = ~(__u64)0;
#endif
    #pragma unroll
    for (int i = 0; i < CAMUS_BV_LOOP_FIELDS; i++) {
        struct camus_bv_bits *b = f[i];
        x &= b->w[k];
        y &= b->w[k + 1];
        z &= b->w[k + 2];
        u &= b->w[k + 3];
    }
    return x | y | z | u;
}

/* Unite a leaf's (or a plane's) ports and delivery flags into the message's result. */
static __always_inline void bv_unite(struct camus_bv_out *out, __u64 *ports, __u32 flags) {
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        out->ports[w] |= ports[w];
    out->flags |= flags & (CAMUS_LEAF_DROP | CAMUS_LEAF_CALL | CAMUS_LEAF_PORTS);
}

/* A leaf's ports into the result. With more than 4 port words a leaf whose ports share one word
 * (most: a subscriber's filter forwards to its port) holds that word first and its index in the
 * flags: one OR, not one per word (a message matching hundreds of leaves over 1,024 ports took
 * 3 us with a loop each). Narrow programs keep their ports in word 0 unless WIDE. */
static __always_inline void bv_unite_leaf(struct camus_bv_out *out, __u64 *ports, __u32 flags) {
#if CAMUS_PORT_WORDS > 4
    if (flags & CAMUS_LEAF_WIDE) {
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] |= ports[w];
    } else {
        out->ports[(flags >> CAMUS_ONE_WORD_SHIFT) & (CAMUS_PORT_WORDS - 1)] |= ports[0];
    }
#else
    out->ports[0] |= ports[0];
    if (flags & CAMUS_LEAF_WIDE) {   /* ports 64 and up: rare, and 3 words more per match */
        #pragma unroll
        for (int w = 1; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] |= ports[w];
    }
#endif
    out->flags |= flags & (CAMUS_LEAF_DROP | CAMUS_LEAF_CALL | CAMUS_LEAF_PORTS);
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
        acc->bid[i] = bv_field_bitmap(root, &segs->fd[i], v);
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
    CAMUS_EACH_WORD
    for (int w = 0; w < CAMUS_PORT_WORDS; w++)
        out->ports[w] = unknown0;
    out->flags = (__u32)unknown0;
    /* 3a. Port columns (structure/bv_layout.column_order), group after group of 64 ports: a
     * word's AND over the fields is the ports it delivers, united as it is (its bits are only
     * where terms are), four words at a time; a group ends once every port with a term in its
     * later words is delivered. The cursor starts from a zero the
     * verifier cannot see as one, so a skipping and a matching iteration prune alike. */
#if CAMUS_BV_COLUMNS
    __u32 ncols = segs->ncols;
    if (ncols) {
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            acc->col[w] = unknown0;
        __u32 c = (__u32)unknown0;
        #pragma nounroll
        for (int it = 0; it < CAMUS_MAX_BV_COLS; it++) {
            if (c >= ncols)
                break;
            struct camus_bv_col *e = &segs->c[bv_index(c, CAMUS_MAX_BV_COLS)];
            __u32 g = e->group & (CAMUS_PORT_WORDS - 1);
            __u64 need = e->need;
            if (!(need & ~acc->col[g])) {
                c = bv_index(e->next, 2 * CAMUS_MAX_BV_COLS);
                continue;
            }
            acc->col[g] |= bv_quad(acc, f, bv_index(e->word, CAMUS_BV_WORDS) & ~3U);
            c = bv_index(c + 1, 2 * CAMUS_MAX_BV_COLS);
        }
        /* 3b. The runs of the ports the columns did not deliver (a port's terms past its
         * column): one piece (a word of a run) per iteration, the next open port taken when the
         * current one is done (the lowest open bit of the port word at hand, its de Bruijn
         * index -> its pieces; an empty port word passes to the next), a port's remaining pieces
         * skipped once one matches. The cursor
         * lives in the work area, read back as values the verifier does not know, so every
         * iteration has one AND of a word and the verifier's paths meet at the loop head. */
        if (segs->nruns) {
            CAMUS_EACH_WORD
            for (int w = 0; w < CAMUS_PORT_WORDS; w++)
                acc->open[w] = segs->runmask[w] & ~acc->col[w];
            acc->rcur = 0;
            acc->rend = 0;
            acc->rgroup = 0;
            #pragma nounroll
            for (int it = 0; it < CAMUS_MAX_BV_RUNS + CAMUS_PORT_WORDS; it++) {
                if (*(volatile __u32 *)&acc->rcur >= *(volatile __u32 *)&acc->rend) {
                    __u32 g = *(volatile __u32 *)&acc->rgroup & (CAMUS_PORT_WORDS - 1);
                    __u64 o = acc->open[g];
                    if (!o) {                   /* this port word is done: the next one */
                        if (g + 1 >= CAMUS_PORT_WORDS)
                            break;
                        acc->rgroup = g + 1;
                        continue;
                    }
                    __u64 low = o & -o;
                    acc->open[g] = o ^ low;
                    struct camus_bv_prun *pr = &segs->pr[(g << 6) | (((low * CAMUS_DEBRUIJN) >> 58) & 63)];
                    acc->rbit = low;
                    acc->rgroup = g;
                    acc->rcur = pr->first;
                    acc->rend = pr->first + pr->n;
                }
                __u32 cur = *(volatile __u32 *)&acc->rcur;
                struct camus_bv_run *r = &segs->r[bv_index(cur, CAMUS_MAX_BV_RUNS)];
                if (bv_word(acc, f, bv_index(r->word, CAMUS_BV_WORDS)) & r->mask) {
                    acc->col[*(volatile __u32 *)&acc->rgroup & (CAMUS_PORT_WORDS - 1)] |= acc->rbit;
                    acc->rcur = *(volatile __u32 *)&acc->rend;
                } else {
                    acc->rcur = cur + 1;
                }
            }
        }
        __u64 any = 0;
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++) {
            out->ports[w] = acc->col[w];
            any |= acc->col[w];
        }
        if (any)
            out->flags = CAMUS_LEAF_PORTS;
    }
#endif
    /* 3. The prefix (structure/bv_layout.term_order), plane by plane: every leaf of a plane
     * owns a group of bits in each of the plane's words, its likeliest terms. One AND over the
     * fields per word, then a group that kept a bit sets its top bit (the add carries into it
     * from any lower bit, never past it): one settled bit per leaf, and most messages that
     * match most leaves settle a plane in a word or two. A plane all settled takes its union
     * made ahead, else its settled leaves are united (and counted) one by one. */
    __u32 nplanes = segs->nplanes, open = segs->walk_all, by_leaf = 0;
    #pragma nounroll
    for (int p = 0; p < CAMUS_BV_PLANES; p++) {
        if (p >= nplanes)
            break;
        __u32 q = bv_index(p, CAMUS_BV_PLANES);       /* p, as the verifier can bound it */
        struct camus_bv_plane *pn = &segs->pn[q];
        __u64 done = unknown0, tops = pn->tops, rest = pn->rest;
        __u32 words = pn->words, first = pn->first_word;
        #pragma unroll
        for (int w = 0; w < CAMUS_BV_PLANE_WORDS; w++) {
            if (w >= words || done == tops)
                break;
            __u64 x = bv_word(acc, f, bv_index(first + w, CAMUS_BV_WORDS));
            done |= (((x & ~tops) + rest) | x) & tops;
        }
        if (done != tops)
            open = 1;
        if (done == tops && !pn->counted) {           /* the plane's union, made ahead */
            bv_unite(out, pn->all_ports, pn->all_flags);
            acc->unite[q] = 0;
        } else {
            acc->unite[q] = done;                     /* settled leaves to unite one by one */
            by_leaf |= done != 0;
        }
        acc->done[q] = done;
    }
    if (by_leaf) {      /* the settled leaves still to unite, bit by bit, plane by plane: the
                         * lowest set bit, its de Bruijn index, the plane's table -> the leaf.
                         * The plane and the bits left live in the work area, read back as
                         * values the verifier does not know, so iterations prune alike. */
        acc->plane = 0;
        #pragma nounroll
        for (int it = 0; it < CAMUS_BV_PLANES * (CAMUS_BV_PLANE_LEAVES + 1); it++) {
            __u32 q = *(volatile __u32 *)&acc->plane & (CAMUS_BV_PLANES - 1);
            __u64 x = *(volatile __u64 *)&acc->unite[q];
            if (!x) {
                __u32 nxt = *(volatile __u32 *)&acc->plane + 1;
                if (nxt >= nplanes || nxt >= CAMUS_BV_PLANES)
                    break;
                acc->plane = nxt;
                continue;
            }
            __u64 low = x & -x;
            acc->unite[q] = x ^ low;
            __u32 g = segs->pn[q].grp[((low * CAMUS_DEBRUIJN) >> 58) & 63];
            struct camus_bv_pleaf *pl = &segs->pl[bv_index(g, CAMUS_BV_PLANES * CAMUS_BV_PLANE_LEAVES)];
#if CAMUS_PORT_WORDS > 4
            bv_unite_leaf(out, pl->ports, pl->flags);
#else
            bv_unite(out, pl->ports, pl->flags);
#endif
            if (pl->flags & CAMUS_LEAF_COUNTED)
                count_hit(pl->leaf);
        }
    }
    /* 4. The rest, leaf by leaf (segments sorted by leaf, then word), unless the prefix settled
     * every leaf: a leaf its plane settled is skipped; a segment's terms match where every
     * field's bitmap has their bits; the first matching segment of a leaf unites its ports and
     * flags, counts its per-rule hit and jumps past the leaf's other segments (`next`). The
     * cursor and the results start from zeros the verifier cannot see as zeros (and the segment
     * count comes from the descriptor in memory), so a matched and an unmatched iteration leave
     * alike states and it prunes one of them at the loop head instead of walking both through
     * every later iteration. */
    __u32 j = (__u32)unknown0;
    __u32 nsegs = open ? (__u32)root->mult : 0;
    #pragma nounroll
    for (int it = 0; it < CAMUS_MAX_BV_SEGS; it++) {
        if (j >= nsegs)
            break;
        struct camus_bv_seg *sg = &segs->s[bv_index(j, CAMUS_MAX_BV_SEGS)];
        if (sg->lbit & acc->done[(sg->flags >> CAMUS_SEG_PLANE_SHIFT) & (CAMUS_BV_PLANES - 1)]) {
            j = bv_index(sg->next, 2 * CAMUS_MAX_BV_SEGS);
            continue;
        }
        /* The segment's word ANDed over the fields. (Keeping the last word's AND for the next
         * segment would save it when a leaf's last word is the next one's first, but the branch
         * doubles the verifier's paths per iteration: 2,048 segments no longer verify.) */
        __u64 a_word = bv_word(acc, f, bv_index(sg->word, CAMUS_BV_WORDS));
        /* Both ways j is masked to the same range, so the verifier's states at the loop head
         * stay alike however many segments were skipped (nsegs <= CAMUS_MAX_BV_SEGS). */
        if (!(a_word & sg->mask)) {
            j = bv_index(j + 1, 2 * CAMUS_MAX_BV_SEGS);
            continue;
        }
        bv_unite_leaf(out, sg->ports, sg->flags);
        if (sg->flags & CAMUS_LEAF_COUNTED)     /* a matching leaf once per message */
            count_hit(sg->leaf);
        j = bv_index(sg->next, 2 * CAMUS_MAX_BV_SEGS);
    }
    if (out->flags & CAMUS_LEAF_DROP) {  /* an explicit drop wins over forwarding */
        CAMUS_EACH_WORD
        for (int w = 0; w < CAMUS_PORT_WORDS; w++)
            out->ports[w] = 0;
        out->flags &= ~CAMUS_LEAF_PORTS;
    }
    return 1;
}
