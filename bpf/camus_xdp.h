/* camus-xdp: map layouts shared by the XDP program and user space (dataplane/maps.py mirrors
 * these structs with ctypes; tests/dataplane/test_layout.py compiles this header and checks
 * every size, field offset and shared constant against the Python side).
 *
 * Every table of the Pipeline IR is data, so the program depends only on the spec:
 *   desc[state]      what a state does: which variable it tests and how (exact/range/lpm)
 *   xslots[i]        exact tables: each state's open-addressing slice, indexed by a
 *                    multiplicative hash chosen at compile time (at most CAMUS_MAX_PROBE probes)
 *   rnodes[i]        range tables: each state's interval starts bucketed by
 *                    (key - lo) >> shift, one split per bucket (one lookup, one compare);
 *                    buckets holding several starts point to a sub-table in rsub[]
 *   bounds[i]        range tables the buckets cannot hold in CAMUS_RADIX_LEVELS (clustered
 *                    starts): a static 8-ary search tree (one lookup per level)
 *   lpm{state,v}     longest-prefix entries, the state as the first 32 bits of the prefix
 *   leaf[state]      what a final state delivers: a port bitmap and flags
 *   updates[state]   state variables to update when the header walk ends in `state`
 */
#ifndef CAMUS_XDP_H
#define CAMUS_XDP_H

#ifndef CAMUS_MAX_MSGS_RING
#define CAMUS_MAX_MSGS_RING 16       /* per-message port masks kept for pruning */
#endif

#define CAMUS_KIND_NONE  0   /* not a test: a leaf, or a state outside every table */
#define CAMUS_KIND_EXACT 1
#define CAMUS_KIND_RANGE 2
#define CAMUS_KIND_LPM   3
#define CAMUS_KIND_RADIX 4   /* range test through bucketed splits (the usual range kind) */
#define CAMUS_KIND_BV    5   /* the root of a bit-vector stage (camus_bv.h) */
#define CAMUS_KIND_DIRECT 6  /* bit-vector field: one range bucket per key up to count, keys past clamped */

#ifndef CAMUS_PORT_WORDS
#define CAMUS_PORT_WORDS 4   /* 64 logical ports per word: 256 per broker. A broker serving more is
                                built with more words (a power of two, at most 64: 4,096 ports;
                                compiler/backends/ebpf/program.py defines it before this header) */
#endif

/* A loop over a port set's words: unrolled for the usual 4; a loop for more (unrolled, clang
 * keeps the words in registers it spills to the stack, and the verifier then tells apart paths
 * whose spilled words differ: a broker with 1,024 ports no longer verified). */
#if CAMUS_PORT_WORDS > 4
#define CAMUS_EACH_WORD _Pragma("nounroll")
#else
#define CAMUS_EACH_WORD _Pragma("unroll")
#endif

#define CAMUS_LEAF_DROP  1   /* an explicit drop rule matched */
#define CAMUS_LEAF_CALL  2   /* custom actions: handed to the host stack */
#define CAMUS_LEAF_PORTS 4   /* at least one port (saves OR-ing the words per message) */
#define CAMUS_LEAF_COUNTED 8 /* bit-vector segments: the leaf has per-rule counters (XDP counts it) */
#define CAMUS_LEAF_WIDE 16   /* bit-vector segments: ports beyond the first 64 (else only word 0 is OR-ed) */
#define CAMUS_LEAF_ANSWER 32 /* answerDNS(a.b.c.d): XDP answers the query itself (leaf.value, camus_dns.h) */
#define CAMUS_LEAF_ILA   64  /* ila(L::): XDP writes locator L into the IPv6 destination (leaf.value, camus_ila.h) */
#define CAMUS_ONE_WORD_SHIFT 16  /* bit-vector leaves of a program with more than 4 port words, not WIDE:
                                    all their ports in one word, held first, its index here in the flags */

/* stats[] indices */
#define CAMUS_STAT_PACKETS      0   /* packets seen */
#define CAMUS_STAT_OTHER        1   /* not feed traffic: passed untouched */
#define CAMUS_STAT_MALFORMED    2   /* feed packets with bad framing */
#define CAMUS_STAT_MESSAGES     3   /* messages classified */
#define CAMUS_STAT_NO_MATCH     4   /* packets nobody subscribed to: dropped */
#define CAMUS_STAT_EXPLICIT     5   /* messages hit by a drop rule */
#define CAMUS_STAT_DELIVER      6   /* packets with at least one subscribed port */
#define CAMUS_STAT_LOCAL        7   /* packets trimmed for this host's stack */
#define CAMUS_STAT_REDIRECT     8   /* packets sent straight from XDP to their one port */
#define CAMUS_STAT_OVERFLOW     9   /* batches of more messages than classified: to the stack */
#define CAMUS_STAT_BYPASS      10   /* messages sent by the cover under overload, not filtered */
#define CAMUS_STAT_ANSWERED    11   /* DNS queries answered from XDP (sent back with XDP_TX) */
#define CAMUS_STAT_REWRITTEN   12   /* packets whose IPv6 destination got an ILA locator */
#define CAMUS_STAT_BROADCAST   13   /* packets copied to their ports by XDP broadcast (camus_fan.c) */
#define CAMUS_STAT_BROADCAST_ALL 14 /* of those, broadcast to every fan port (no group for their set):
                                       the copies for other ports were made and dropped */
#define CAMUS_STAT_CROSS_CPU   15   /* delivering packets TC met on another CPU than their XDP run (RPS
                                       turned on again?): dropped, their ring slot is that CPU's */
#define CAMUS_STAT_MAX          16

/* cfg[] indices */
#define CAMUS_CFG_ROOT          0   /* root state: flipping it switches table sets atomically */
#define CAMUS_CFG_MALFORMED     1   /* 0: drop malformed feed packets, 1: pass them */
#define CAMUS_CFG_RECORD        2   /* 1: record per-message results (tests, explain) */
#define CAMUS_CFG_NSVARS        3   /* state variables in use (0: skip the windows) */
#define CAMUS_CFG_REDIRECT      4   /* 1: one-port packets leave by XDP_REDIRECT, not TC */
#define CAMUS_CFG_BYPASS_PPS    6   /* packets/s per CPU above which messages skip exact filtering
                                       and go to every subscribed port (0: never) */
#define CAMUS_CFG_TC            5   /* 1: TC programs replicate (and count) delivering packets;
                                       0: they go to this host's stack, XDP counts their rules */
#define CAMUS_CFG_MAX           8

#define CAMUS_MAX_PROBE  4   /* exact slots: probes before a miss */

/* Transitions into a state that tests nothing more (a leaf of the diagram) carry this bit, so
 * the walk stops without reading that state's descriptor. State ids stay below 2^30. */
#define CAMUS_STATE_FINAL 0x40000000U
#define CAMUS_STATE_MASK  0x3FFFFFFFU

struct camus_desc {
    __u8  kind;
    __u8  var;               /* variable index: query field, then state variables */
    __u8  bits;              /* exact: log2 of the slice size (0: no entries); radix: shift */
    __u8  pad;
    __u32 default_next;      /* exact: the per-state `any` entry; else unused */
    __u32 base;              /* exact: first slot in xslots[]; range: root node in bounds[];
                                radix: first bucket in rnodes[] */
    __u32 count;             /* range: levels of the search tree; radix: last bucket */
    __u64 mult;              /* exact: odd multiplier of the slot hash; radix: lo */
};

struct camus_slot {
    __u64 value;
    __u32 next;
    __u32 used;
    struct camus_desc nd;    /* desc[next & CAMUS_STATE_MASK], copied: the walk goes on
                                without looking the next state up (one cache line less) */
};

#define CAMUS_FANOUT 8           /* keys per search-tree node */

struct camus_bound {         /* a node of a range state's search tree */
    __u64 keys[CAMUS_FANOUT];   /* interval starts, ascending; unused slots repeat the last */
    __u32 vals[CAMUS_FANOUT];   /* leaf level: next state; above: child node index */
    __u32 nkeys;
    __u32 leaf;
};

/* A bucket of a radix range table: keys below `split` go to `below`, the others to `above`.
 * When `above` has CAMUS_RADIX_SUB set the bucket holds several starts: its low bits index
 * rsub[], a finer table over the bucket (split is 0 then, so every key reads `above`). */
#define CAMUS_RADIX_SUB 0x80000000U

struct camus_rnode {
    __u64 split;
    __u32 below;
    __u32 above;
};

struct camus_rsub {          /* a radix table: bucket = min((key - lo) >> shift, last) */
    __u64 lo;
    __u32 base;              /* first bucket in rnodes[] */
    __u32 last;
    __u32 shift;
    __u32 pad;
};

struct camus_lpm_key {
    __u32 prefixlen;         /* 32 (the state) + prefix length of the value */
    __u8  data[12];          /* state (big endian), then the value left-aligned, big endian */
};

struct camus_leaf {
    __u64 ports[CAMUS_PORT_WORDS];
    __u32 flags;
    __u32 group;
    __u64 value;             /* CAMUS_LEAF_ANSWER: the IPv4 address to answer with; CAMUS_LEAF_ILA: the
                                locator; bytes in packet order (compiler/backends/ebpf/custom.py) */
};

struct camus_svar {          /* one state variable's tumbling window */
    struct bpf_spin_lock lock;   /* a window's reset and its adds, as one step on every CPU */
    __u32 pad;
    __u64 window;            /* index of the current window */
    __u64 count;
    __u64 sum;
};

struct camus_bypass {        /* per bank: every port a rule forwards to (the cover of all filters) */
    __u64 ports[CAMUS_PORT_WORDS];
    __u32 flags;                 /* CAMUS_LEAF_CALL when a rule has custom actions: the host's stack
                                    is part of the cover (a DNS query still reaches the resolver) */
    __u32 pad;
};

struct camus_overload {      /* per CPU: a token bucket in thousandths of a packet */
    __u64 last_ns;
    __u64 milli_tokens;
};

struct camus_svar_cfg {
    __u64 window_ns;         /* 0: one endless window */
    __u32 fn;                /* 0 count, 1 sum, 2 avg, 3 every(n): the count modulo n */
    __u32 field;             /* which query field feeds it */
    __u64 modulus;           /* every(n): n */
};

/* Bit-vector stage (compiler/structure/bitvector.py; the kernel side is bpf/camus_bv.h). The root's
 * descriptor has kind CAMUS_KIND_BV: count = 64-bit words per bitmap,
 * base = first bitmap in bv_bits[], default_next = the state id standing for bitmap 0 (the
 * fields' range tables lead to bitmap ids through state ids, so a bank shift moves them too),
 * mult = segment bank << 32 | segments. Field i's interval table is state root+1+i. */
#define CAMUS_STATE_BV 0x3FFFFFFFU   /* a message's "state" when the bit-vector stage classified it */

#define CAMUS_BV_PLANES 4
#define CAMUS_BV_PLANE_LEAVES 64
#define CAMUS_BV_PLANE_WORDS 4
#define CAMUS_SEG_PLANE_SHIFT 8          /* a segment's prefix plane, in its flags */
#define CAMUS_DEBRUIJN 0x03f79d71b4cb0a89ULL  /* (b * it) >> 58 is distinct for every single bit b */
struct camus_bv_pleaf {          /* a leaf of a prefix plane, in group order, plane after plane */
    __u64 tbit;                  /* its settled bit: the top bit of its group */
    __u32 flags;                 /* with its plane << CAMUS_SEG_PLANE_SHIFT */
    __u32 leaf;
    __u64 ports[CAMUS_PORT_WORDS];
};
struct camus_bv_plane {          /* up to 64 leaves sharing prefix words, one group of bits each */
    __u64 tops;                  /* every leaf's settled bit */
    __u64 rest;                  /* the groups' other bits */
    __u64 all_ports[CAMUS_PORT_WORDS];         /* every leaf of the plane united: all settled at once */
    __u32 all_flags;
    __u32 words;
    __u32 first_word;
    __u32 counted;               /* a leaf has per-rule counters: settle leaf by leaf */
    __u32 pad;
    __u8 grp[64];                /* de Bruijn index of a settled bit -> its leaf in pl[] */
};
#define CAMUS_MAX_BV_COLS CAMUS_BV_COLUMNS      /* port-column word quads (0: no port columns) */
struct camus_bv_col {        /* four words of port columns: bit b of group g's words is port 64 g + b */
    __u64 need;              /* the group's ports with a term in these words or later ones */
    __u32 word;              /* the first of them in the matched-terms bitmap (a multiple of 4) */
    __u16 group;             /* its port word */
    __u16 next;              /* the next group's first word (skipped to once `need` is delivered) */
};
#define CAMUS_MAX_BV_RUNS CAMUS_BV_COLUMNS      /* port-run pieces */
struct camus_bv_run {        /* a piece of one port's run: its terms inside one word */
    __u64 mask;
    __u32 word;
    __u32 pad;
};
struct camus_bv_prun {       /* a port's run: its pieces in r[] */
    __u16 first;
    __u16 n;
};
struct camus_bv_seg {        /* terms of one leaf inside one word of the matched-terms bitmap */
    __u64 mask;
    __u64 lbit;              /* the leaf's settled bit (its prefix group's top bit; 0 without a prefix) */
    __u32 word;
    __u32 flags;
    __u32 leaf;              /* the leaf state holding these terms' actions */
    __u32 next;              /* the next leaf's first segment (skipped to once this leaf matched) */
    __u64 ports[CAMUS_PORT_WORDS];   /* the leaf's ports, inline: no lookup per segment */
};

/* What one message delivers: the matched leaves united (ports, flags). */
struct camus_bv_out {
    __u64 ports[CAMUS_PORT_WORDS];
    __u32 flags;
};

struct camus_result {        /* per message, when CAMUS_CFG_RECORD is set */
    __u32 state;             /* final state (0: nobody subscribed) */
    __u32 flags;
    __u64 ports[CAMUS_PORT_WORDS];
};

/* Forwarding: XDP hands each delivering packet to TC with 8 bytes of metadata. */
#ifndef CAMUS_APP_ID
#define CAMUS_APP_ID     0           /* which of several apps on one interface (dataplane/apps.py):
                                        its TC programs take only its own metadata and copies */
#endif
#ifndef CAMUS_GEN
#define CAMUS_GEN        0           /* the program's generation on its unit (dataplane/grow.py): while a
                                        grown program replaces it, each TC filter takes its own packets */
#endif
#define CAMUS_META_MAGIC (0xCA3005E1 + CAMUS_APP_ID + (CAMUS_GEN << 8))
#define CAMUS_RING       256         /* per-CPU packets in flight between XDP and TC (> NAPI budget) */
#define CAMUS_MARK_TAG   (0xC0000000 | (CAMUS_APP_ID << 24))  /* skb->mark of a copy:
                                        tag | app << 24 | port << 16 | kept-messages mask; with
                                        more than 256 ports tag | app << 24 | ring slot << 16, and
                                        the port in skb->tc_index (camus_tc.c) */
#define CAMUS_MARK_MASK  0xFF000000
#define CAMUS_MAX_FANOUT 256         /* copies of one packet */

#define CAMUS_PORT_NONE   0
#define CAMUS_PORT_IFACE  1          /* out of a local interface, frame unchanged */
#define CAMUS_PORT_REMOTE 2          /* to a subscriber endpoint: rewrite MAC, IP, UDP port */
#define CAMUS_PORT_LOCAL  3          /* this host's stack */

struct camus_meta {
    __u32 magic;
    __u32 seq;               /* the ring slot's sequence below CAMUS_META_CPU_SHIFT, the CPU of the XDP
                                run that wrote it above: TC and the broadcast read that CPU's slot */
};
#define CAMUS_META_CPU_SHIFT 20

struct camus_pkt {                   /* ring slot: which ports each message goes to */
    __u32 nmsgs;
    __u32 local_keep;                /* TC: messages a LOCAL port keeps (memory, not a register:
                                        keeps the verifier's loop states equal) */
    __u32 call_keep;                 /* XDP: messages with custom actions, which run on this host:
                                        the stack gets them as if a LOCAL port subscribed */
    __u32 copy_keep;                 /* XDP broadcast: the messages the copy being pruned keeps
                                        (memory, as local_keep: camus_fan.c) */
    __u64 ports[CAMUS_PORT_WORDS];   /* union */
    __u32 msg_state[CAMUS_MAX_MSGS_RING];                    /* XDP: each message's final state */
    __u64 msg_ports[CAMUS_MAX_MSGS_RING][CAMUS_PORT_WORDS];  /* TC: its ports, from leaf[] */
#if CAMUS_PORT_WORDS > 4
    /* TC's cursor over the ports when there are more than 256 (camus_tc.c, tc_copies_wide) */
    __u64 cur_bits;                  /* the port word at hand: its ports not copied to yet */
    __u32 cur_w;                     /* its index */
    __u32 cur_end;                   /* the word this program run stops at */
    __u32 local_any;                 /* a LOCAL port is among the packet's */
    __u32 pad2;
    __u64 local_ports[CAMUS_PORT_WORDS];   /* those LOCAL ports */
#endif
};

/* Fan-out by XDP broadcast (camus_fan.c): the ports in the fan devmap, written with the ports.
 * Each has an interface of its own (the egress program knows a copy's port only by its
 * interface) that takes XDP frames. A broadcast copies the frame to every entry and the egress
 * program drops the copies of ports the packet does not go to, so it pays for all entries:
 * it is chosen when a packet goes to at least `min_copies` of them (user space sets it from
 * the measured cost of a broadcast copy against a TC clone), and never for other ports. A
 * packet whose port set has a group devmap (fan_groups) is broadcast through it from
 * `min_group` copies on (below, TC's copies arrive sooner: dataplane/fanout.py). */
struct camus_fan {
    __u64 mask[CAMUS_PORT_WORDS];    /* ports with an entry */
    __u32 entries;                   /* how many (0: fan-out by TC only) */
    __u32 min_copies;                /* broadcast to all entries from this many wanted */
    __u32 min_group;                 /* broadcast through a group from this many copies */
    __u32 pad;
};
#define CAMUS_MAX_FAN    64          /* fan devmap entries (a broadcast visits every slot) */
#define CAMUS_MAX_FAN_GROUPS 1024    /* devmaps of exactly one port set each (fan_groups) */

struct camus_portset {               /* fan_groups' key: a packet's ports */
    __u64 w[CAMUS_PORT_WORDS];
};

struct camus_port {
    __u32 kind;
    __u32 ifindex;
    __u8  mac[6];                    /* REMOTE: the subscriber's MAC */
    __u8  src_mac[6];                /* REMOTE: the egress interface's MAC */
    __u32 ip;                        /* REMOTE: network order */
    __u16 udp_port;                  /* REMOTE: network order */
    __u16 pad;
};

#endif
