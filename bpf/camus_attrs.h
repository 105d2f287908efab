/* camus-xdp: generic attribute encodings after EtherType 0x9001 (compiler/codec/attrs.py).
 *
 * The spec's message header is the attribute dictionary: attribute i is its i-th field
 * (camus_attr_bytes / camus_attr_store are generated from it). CAMUS_FRAMING_ATTRS 1: (id,
 * value) pairs ended by id 0; 2: a 32-bit mask of the attributes present, then their values in
 * id order. Absent attributes read as 0. The offset is carried in the scratch and read back
 * volatile, so the verifier sees one state per iteration of these bounded loops. Returns 0 for
 * a malformed frame (unknown id, no end marker, a value past the frame).
 */
static __always_inline int camus_attr_read(__u64 *v, __u32 id, void *p, void *end, __u32 n) {
    __u64 val;
    if (n == 1) {
        if (p + 1 > end)
            return 0;
        val = *(__u8 *)p;
    } else if (n == 2) {
        if (p + 2 > end)
            return 0;
        val = bpf_ntohs(*(__u16 *)p);
    } else if (n == 4) {
        if (p + 4 > end)
            return 0;
        val = bpf_ntohl(*(__u32 *)p);
    } else if (n == 8) {
        if (p + 8 > end)
            return 0;
        val = __builtin_bswap64(*(__u64 *)p);
    } else {
        return 0;
    }
    camus_attr_store(v, id, val);
    return 1;
}

static __always_inline int camus_attrs(struct camus_scratch *s, void *data, void *start, void *end) {
    volatile __u32 *off = &s->off;
    __builtin_memset(s->v, 0, sizeof(s->v));
#if CAMUS_FRAMING_ATTRS == 2
    if (start + 4 > end)
        return 0;
    __u32 mask = bpf_ntohl(*(__u32 *)start);
    if (CAMUS_N_ATTRS < 32 && (mask >> (CAMUS_N_ATTRS & 31)))
        return 0;                              /* an attribute the dictionary does not have */
    *off = (__u32)(start - data) + 4;
    #pragma nounroll
    for (__u32 id = 1; id <= CAMUS_N_ATTRS; id++) {
        if (!((mask >> (id - 1)) & 1))
            continue;
        __u32 o = *off & 0x3FFF;
        __u32 n = camus_attr_bytes(id);
        if (!camus_attr_read(s->v, id, data + o, end, n))
            return 0;
        *off = o + n;
    }
    return 1;
#else
    *off = (__u32)(start - data);
    #pragma nounroll
    for (__u32 k = 0; k <= CAMUS_N_ATTRS; k++) {
        __u32 o = *off & 0x3FFF;
        void *p = data + o;
        if (p + 1 > end)
            return 0;
        __u32 id = *(__u8 *)p;
        if (id == 0)
            return 1;
        if (id > CAMUS_N_ATTRS)
            return 0;
        __u32 n = camus_attr_bytes(id);
        if (!camus_attr_read(s->v, id, p + 1, end, n))
            return 0;
        *off = o + 1 + n;
    }
    return 0;                                  /* more pairs than attributes: no end marker */
#endif
}
