/* camus-xdp: topic fields (compiler/language/topics.py) as the variables the tables test.
 *
 * A topic field holds '/'- (MQTT) or '.'- (NATS) separated levels, NUL-padded. Its variables:
 *   v[first]          the number of levels
 *   v[first + 1]      1 if level 0 starts with '$' (MQTT only: wildcards skip such topics)
 *   v[lv0 + i]        level i's label (compiler/ir/labels.py; 0 when there is no level i): a
 *                     level of up to 8 bytes is its own label, its bytes as a little-endian word,
 *                     no lookup; a longer one is looked up in labels{bank, var, bytes NUL-padded}
 *                     (missing: 1 << 8), which user space writes per bank beside the tables, so
 *                     the root flip switches both
 *
 * The field is copied into a per-CPU work area first (followed by a zero word), so the scan and
 * the word reads index a map value (bounded offsets) instead of the packet; CAMUS_TOPIC_BUF / 2
 * >= the field + 8. The scan takes 8 bytes at a time: an exact zero-byte test finds the
 * separators and the end, one bit per byte. A level's key is built 8 bytes at a time:
 * a little-endian load masked to the level's remaining bytes keeps its first bytes in memory
 * order, which is the order user space writes (big-endian value = bytes in order).
 */
struct camus_label_key {                /* dataplane/maps.py label_key_type mirrors it */
    __u32 var;                           /* bank << 16 | variable */
    __u32 pad;
    __u64 w[CAMUS_LABEL_WORDS];          /* the level's bytes, NUL-padded */
};

struct camus_topic_work {
    __u8 buf[CAMUS_TOPIC_BUF];           /* the field (reads past it are masked off) */
    __u32 start[32];                     /* where each level starts (levels <= 24) */
    __u32 depth, len;                    /* loop-carried values live here, read back volatile: */
    __u32 wire;                          /* a DNS name's length in wire format (0: none), camus_dns.h */
    struct camus_label_key key;          /* the verifier then sees one state per iteration */
};

BPF_HASH(labels, struct camus_label_key, __u64, CAMUS_MAX_LABELS);
BPF_PERCPU_ARRAY(topic_work, struct camus_topic_work, 1);


/* 0x80 in every byte of x that is zero, nothing elsewhere (no false positives). */
static __always_inline __u64 zero_bytes(__u64 x) {
    __u64 low7 = 0x7F7F7F7F7F7F7F7FULL;
    return ~(((x & low7) + low7) | x | low7);
}

static __always_inline __u64 level_word(struct camus_topic_work *w, __u32 at, __u32 left) {
    __u64 word = *(__u64 *)(w->buf + (at & (CAMUS_TOPIC_BUF / 2 - 1)));
    return left < 8 ? word & ((1ULL << ((8 * left) & 63)) - 1) : word;
}

/* A topic's bytes into the work area, then a zero word; `topic` is in bounds for `nbytes` (a
 * constant; the message check did that). */
static __always_inline void camus_topic_load(struct camus_topic_work *w, const void *topic, __u32 nbytes) {
    #pragma unroll
    for (__u32 k = 0; k < CAMUS_TOPIC_BUF / 16; k++)   /* 8 bytes at a time; nbytes is constant */
        if (8 * k + 8 <= nbytes)
            *(__u64 *)(w->buf + 8 * k) = *(const __u64 *)(topic + 8 * k);
    *(__u64 *)(w->buf + ((nbytes & ~7U) & (CAMUS_TOPIC_BUF / 2 - 1))) = 0;   /* the end, then a zero word */
    *(__u64 *)(w->buf + (((nbytes & ~7U) + 8) & (CAMUS_TOPIC_BUF / 2 - 1))) = 0;
    #pragma unroll
    for (__u32 k = nbytes & ~7U; k < nbytes; k++)
        w->buf[k & (CAMUS_TOPIC_BUF / 2 - 1)] = *(const __u8 *)(topic + k);
}

#if CAMUS_DNS_NAMES
/* A DNS name (wire format, compiler/language/topics.py) into the work area as dotted text: buffer
 * byte k is wire byte k + 1, so the first label starts at 0 and each later length byte becomes
 * '.'; the root label's 0 ends the text. ASCII letters lower-cased (length bytes are below 64, so
 * never letters). Only the datagram's bytes are read (`avail` of them); the rest reads as 0.
 * Returns the text's length, or 0 for the root name and for a name that does not end within
 * `nbytes` (the field) or has a label longer than 63 bytes: those have no levels. */
static __always_inline __u32 camus_dns_load(struct camus_topic_work *w, const __u8 *name, const void *end,
                                            __u32 avail, __u32 nbytes) {
    #pragma unroll
    for (__u32 k = 0; k < CAMUS_TOPIC_BUF / 16 + 1; k++)
        *(__u64 *)(w->buf + 8 * k) = 0;
    if ((const void *)(name + 1) > end || avail == 0)
        return 0;
    __u32 at = name[0];                                 /* the buffer index of the next length byte */
    if (at == 0 || at > 63)
        return 0;
    #pragma nounroll
    for (__u32 k = 0; k + 1 < nbytes && k + 1 < avail; k++) {
        __u32 i = k;
        asm volatile("" : "+r"(i));                   /* one byte, one bounds check: not vectorized */
        const __u8 *p = name + 1 + (i & (CAMUS_TOPIC_BUF / 2 - 1));
        if ((const void *)(p + 1) > end)
            break;
        __u8 c = *p;
        w->buf[i & (CAMUS_TOPIC_BUF / 2 - 1)] = (__u8)(c - 'A') < 26 ? c + 32 : c;
    }
    #pragma nounroll
    for (__u32 i = 0; i < CAMUS_TOPIC_BUF / 4; i++) {  /* labels are at least 2 wire bytes */
        if (at + 1 >= nbytes)
            return 0;                                   /* no root label inside the field */
        __u8 n = w->buf[at & (CAMUS_TOPIC_BUF / 2 - 1)];
        if (n == 0)
            return at;
        if (n > 63)
            return 0;                                   /* a compression pointer or worse */
        w->buf[at & (CAMUS_TOPIC_BUF / 2 - 1)] = '.';
        at += n + 1;
    }
    return 0;
}
#endif

/* Fill a topic's variables from the text in the work area (`nbytes` of it at most, then NUL);
 * `reversed`: level 0 is the last one (DNS names). */
static __always_inline void camus_topic_levels(__u64 *v, struct camus_topic_work *w, __u32 nbytes, __u32 first,
                                               __u32 lv0, __u32 nlevels, __u8 sep, __u32 has_sys, __u32 bank,
                                               __u32 reversed) {
    volatile __u32 *depth = &w->depth, *len = &w->len;
    *depth = 1;
    *len = nbytes;
    w->start[0] = 0;
    __u64 seps = 0x0101010101010101ULL * sep;
    #pragma nounroll
    for (__u32 k = 0; k < CAMUS_TOPIC_BUF / 16; k++) {
        if (8 * k >= nbytes)
            break;
        __u64 word = *(__u64 *)(w->buf + ((8 * k) & (CAMUS_TOPIC_BUF / 2 - 1)));
        __u64 ends = zero_bytes(word), found = zero_bytes(word ^ seps);
        if (ends)
            found &= (ends & -ends) - 1;         /* separators before the first NUL only */
        #pragma nounroll
        for (__u32 b = 0; b < 8; b++) {
            if (!found)
                break;
            __u32 d = *depth;
            w->start[d & 31] = 8 * k + (bit_index(found & -found) >> 3) + 1;   /* levels past 31 only count */
            *depth = d + 1;
            found &= found - 1;
        }
        if (ends) {
            __u32 end = 8 * k + (bit_index(ends & -ends) >> 3);
            *len = end < nbytes ? end : nbytes;
            break;
        }
    }
    __u32 levels = *depth;
    v[first] = levels;
    if (has_sys)
        v[first + 1] = w->buf[0] == '$';
    #pragma nounroll
    for (__u32 i = 0; i < nlevels && i < 24; i++) {
        __u32 var = (lv0 + i) & (CAMUS_VAR_SLOTS - 1);
        if (i >= *depth) {
            v[var] = 0;
            continue;
        }
        __u32 j = reversed ? *depth - 1 - i : i;
        __u32 s = w->start[j & 31] & (CAMUS_TOPIC_BUF / 2 - 1);
        __u32 e = j + 1 < *depth ? w->start[(j + 1) & 31] - 1 : *len;
        __u32 n = e > s ? e - s : 0;
        if (n <= 8) {
            v[var] = n ? level_word(w, s, n) : 0;
            continue;
        }
        w->key.var = bank << 16 | (lv0 + i);
        w->key.pad = 0;
        #pragma nounroll
        for (__u32 k = 0; k < CAMUS_LABEL_WORDS; k++)
            w->key.w[k] = 8 * k < n ? level_word(w, s + 8 * k, n - 8 * k) : 0;
        __u64 *id = labels.lookup(&w->key);
        v[var] = id ? *id : 1ULL << 8;           /* a long level no rule names */
    }
}

static __always_inline struct camus_topic_work *camus_topic_work(void) {
    __u32 zero = 0;
    return topic_work.lookup(&zero);
}

/* Fill a topic's variables; `topic` is in bounds for `nbytes` (the message check did that). */
static __always_inline void camus_topic(__u64 *v, const void *topic, __u32 nbytes, __u32 first, __u32 lv0,
                                        __u32 nlevels, __u8 sep, __u32 has_sys, __u32 bank) {
    struct camus_topic_work *w = camus_topic_work();
    if (!w)
        return;
    camus_topic_load(w, topic, nbytes);
    camus_topic_levels(v, w, nbytes, first, lv0, nlevels, sep, has_sys, bank, 0);
}

#if CAMUS_DNS_NAMES
/* Fill a DNS name's variables: its depth (0: root or malformed, then no levels) and its labels
 * from the right. */
static __always_inline void camus_dns_name(__u64 *v, const __u8 *name, const void *end, __u32 avail, __u32 nbytes,
                                           __u32 first, __u32 lv0, __u32 nlevels, __u32 bank) {
    struct camus_topic_work *w = camus_topic_work();
    if (!w)
        return;
    __u32 len = camus_dns_load(w, name, end, avail, nbytes);
    w->wire = len ? len + 2 : 0;                    /* the first length byte, the text, the root label */
    if (len) {
        camus_topic_levels(v, w, len, first, lv0, nlevels, '.', 0, bank, 1);
        return;
    }
    v[first] = 0;
    #pragma nounroll
    for (__u32 i = 0; i < nlevels && i < 24; i++)
        v[(lv0 + i) & (CAMUS_VAR_SLOTS - 1)] = 0;
}
#endif
