/* camus_broker: the same-semantics userspace broker in C, the fair baseline of the eBPF
 * pub/sub paper: recvmmsg a batch of MoldUDP64 packets, classify every message with the
 * compiled tables (bench/flat_tables.py writes them), build one packet per (input packet,
 * subscriber) holding exactly that subscriber's messages, sendmmsg them.
 *
 *   camus_broker TABLES LISTEN_IP LISTEN_PORT PORTS
 *
 * PORTS: lines "port ip udp_port". Runs until SIGTERM/SIGINT, then prints
 * "packets_in P messages M packets_out O". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define MAXPORTS 257
#define MTU 2048
#define MOLD_HDR 20

typedef struct { uint64_t *lo, *hi; int32_t *next; int n; int32_t dflt; } span_t;
typedef struct { int off, size, max_state; int32_t *idx; span_t *states; } table_t;

static table_t *tables;
static int ntables, root, msgbytes, mtype_off = -1, mtype_val;
static int32_t *leaf_idx;          /* state -> offset in leaf_ports, or -1 */
static int16_t *leaf_ports;        /* count, then ports */
static int max_leaf_state;
static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

static void die(const char *what) { fprintf(stderr, "camus_broker: %s\n", what); exit(1); }

static void load_tables(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open tables");
    int version;
    if (fscanf(f, "camus-flat %d root %d msgbytes %d mtype %d %d tables %d", &version, &root, &msgbytes,
               &mtype_off, &mtype_val, &ntables) != 6) die("bad tables header");
    tables = calloc(ntables, sizeof *tables);
    for (int t = 0; t < ntables; t++) {
        int nstates;
        table_t *tb = &tables[t];
        if (fscanf(f, " table %d %d %d", &tb->off, &tb->size, &nstates) != 3) die("bad table line");
        tb->states = calloc(nstates ? nstates : 1, sizeof(span_t));
        int *ids = calloc(nstates ? nstates : 1, sizeof(int));
        for (int i = 0; i < nstates; i++) {
            span_t *sp = &tb->states[i];
            if (fscanf(f, " state %d %d %d", &ids[i], &sp->dflt, &sp->n) != 3) die("bad state line");
            sp->lo = malloc((sp->n + 1) * 8); sp->hi = malloc((sp->n + 1) * 8); sp->next = malloc((sp->n + 1) * 4);
            for (int j = 0; j < sp->n; j++)
                if (fscanf(f, " %lu %lu %d", &sp->lo[j], &sp->hi[j], &sp->next[j]) != 3) die("bad span");
            if (ids[i] > tb->max_state) tb->max_state = ids[i];
        }
        tb->idx = malloc((tb->max_state + 1) * sizeof(int32_t));
        memset(tb->idx, 0xff, (tb->max_state + 1) * sizeof(int32_t));
        for (int i = 0; i < nstates; i++) tb->idx[ids[i]] = i;
        free(ids);
    }
    int nleaves;
    if (fscanf(f, " leaves %d", &nleaves) != 1) die("bad leaves line");
    int *st = malloc((nleaves + 1) * sizeof(int)), total = 0;
    int16_t *tmp = malloc((nleaves + 1) * MAXPORTS * sizeof(int16_t));
    int *off = malloc((nleaves + 1) * sizeof(int));
    for (int i = 0; i < nleaves; i++) {
        int n;
        if (fscanf(f, " leaf %d %d", &st[i], &n) != 2 || n >= MAXPORTS) die("bad leaf line");
        off[i] = total;
        tmp[total++] = n;
        for (int j = 0; j < n; j++) {
            int p;
            if (fscanf(f, " %d", &p) != 1 || p <= 0 || p >= MAXPORTS) die("bad leaf port");
            tmp[total++] = p;
        }
        if (st[i] > max_leaf_state) max_leaf_state = st[i];
    }
    leaf_ports = tmp;
    leaf_idx = malloc((max_leaf_state + 1) * sizeof(int32_t));
    memset(leaf_idx, 0xff, (max_leaf_state + 1) * sizeof(int32_t));
    for (int i = 0; i < nleaves; i++) leaf_idx[st[i]] = off[i];
    free(st); free(off);
    fclose(f);
}

static inline uint64_t read_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static inline int classify(const uint8_t *msg) {
    int state = root;
    for (int t = 0; t < ntables; t++) {
        table_t *tb = &tables[t];
        if (state > tb->max_state || tb->idx[state] < 0) continue;
        span_t *sp = &tb->states[tb->idx[state]];
        uint64_t v = read_be(msg + tb->off, tb->size);
        int lo = 0, hi = sp->n - 1, found = -1;
        while (lo <= hi) {                 /* last span starting at or below v */
            int mid = (lo + hi) / 2;
            if (sp->lo[mid] <= v) { found = mid; lo = mid + 1; } else hi = mid - 1;
        }
        state = (found >= 0 && v <= sp->hi[found]) ? sp->next[found] : sp->dflt;
    }
    return state;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s TABLES LISTEN_IP LISTEN_PORT PORTS\n", argv[0]); return 2; }
    load_tables(argv[1]);
    struct sockaddr_in dest[MAXPORTS];
    int have[MAXPORTS] = {0};
    FILE *pf = fopen(argv[4], "r");
    if (!pf) die("cannot open ports");
    int p, up;
    char ip[64];
    while (fscanf(pf, " %d %63s %d", &p, ip, &up) == 3) {
        if (p <= 0 || p >= MAXPORTS) die("port out of range");
        memset(&dest[p], 0, sizeof dest[p]);
        dest[p].sin_family = AF_INET;
        dest[p].sin_port = htons(up);
        inet_pton(AF_INET, ip, &dest[p].sin_addr);
        have[p] = 1;
    }
    fclose(pf);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    int big = 64 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
    struct timeval tv = {0, 200000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    static uint8_t in[BATCH][MTU];
    struct mmsghdr im[BATCH];
    struct iovec iiov[BATCH];
    /* out packets: at most one per (input packet, port) */
    static uint8_t out[BATCH * 8][MTU];
    static struct mmsghdr om[BATCH * 8];
    static struct iovec oiov[BATCH * 8];
    int cursor[MAXPORTS], slot[MAXPORTS];
    unsigned long pk_in = 0, n_msgs = 0, pk_out = 0;
    printf("ready\n");
    fflush(stdout);
    while (!stop) {
        for (int i = 0; i < BATCH; i++) {
            iiov[i].iov_base = in[i]; iiov[i].iov_len = MTU;
            memset(&im[i], 0, sizeof im[i]);
            im[i].msg_hdr.msg_iov = &iiov[i]; im[i].msg_hdr.msg_iovlen = 1;
        }
        int r = recvmmsg(s, im, BATCH, MSG_WAITFORONE, NULL);
        if (r <= 0) continue;
        pk_in += r;
        int nout = 0;
        for (int i = 0; i < r; i++) {
            uint8_t *pk = in[i];
            int len = im[i].msg_len;
            if (len < MOLD_HDR) continue;
            int count = pk[18] << 8 | pk[19], pos = MOLD_HDR;
            for (int q = 0; q < MAXPORTS; q++) slot[q] = -1;
            for (int m = 0; m < count && pos + 2 <= len; m++) {
                int mlen = pk[pos] << 8 | pk[pos + 1];
                if (pos + 2 + mlen > len) break;            /* a lying length: stop here */
                const uint8_t *msg = pk + pos + 2;
                n_msgs++;
                if (mlen == msgbytes && (mtype_off < 0 || msg[mtype_off] == mtype_val)) {
                    int st = classify(msg);
                    if (st <= max_leaf_state && leaf_idx[st] >= 0) {
                        int16_t *lp = &leaf_ports[leaf_idx[st]];
                        for (int j = 1; j <= lp[0]; j++) {
                            int port = lp[j];
                            if (!have[port] || nout >= BATCH * 8) continue;
                            if (slot[port] < 0) {      /* first message for this port */
                                slot[port] = nout++;
                                memcpy(out[slot[port]], pk, MOLD_HDR);
                                cursor[port] = MOLD_HDR;
                                out[slot[port]][18] = out[slot[port]][19] = 0;
                            }
                            uint8_t *o = out[slot[port]];
                            memcpy(o + cursor[port], pk + pos, 2 + mlen);
                            cursor[port] += 2 + mlen;
                            int c = (o[18] << 8 | o[19]) + 1;
                            o[18] = c >> 8; o[19] = c & 0xff;
                            oiov[slot[port]].iov_base = o;
                            oiov[slot[port]].iov_len = cursor[port];
                            memset(&om[slot[port]], 0, sizeof om[0]);
                            om[slot[port]].msg_hdr.msg_iov = &oiov[slot[port]];
                            om[slot[port]].msg_hdr.msg_iovlen = 1;
                            om[slot[port]].msg_hdr.msg_name = &dest[port];
                            om[slot[port]].msg_hdr.msg_namelen = sizeof dest[port];
                        }
                    }
                }
                pos += 2 + mlen;
            }
        }
        for (int done = 0; done < nout;) {
            int w = sendmmsg(s, om + done, nout - done, 0);
            if (w <= 0) break;
            done += w;
            pk_out += w;
        }
    }
    printf("packets_in %lu messages %lu packets_out %lu\n", pk_in, n_msgs, pk_out);
    return 0;
}
