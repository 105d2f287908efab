/* camus_send: the benchmark publisher. Sends prepared frames once each, in order, from an
 * AF_PACKET socket with sendmmsg, at a fixed rate or as fast as it can, and stamps the send
 * time (ns, low 48 bits, big-endian) into every message's timestamp field just before the
 * batch leaves. No Python in the hot path.
 *
 *   camus_send IFACE FRAMES RATE_PPS MAX_SECONDS
 *
 * FRAMES: records of u16 frame length, u8 number of stamp offsets, u16 offsets..., frame bytes
 * (little-endian lengths). Prints "sent N frames in S s" to stdout. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32

struct frame { uint8_t *data; uint16_t len; uint8_t nstamp; uint16_t *stamps; };

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s IFACE FRAMES RATE_PPS MAX_SECONDS\n", argv[0]);
        return 2;
    }
    double rate = atof(argv[3]), max_s = atof(argv[4]);
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    struct stat sb;
    fstat(fileno(f), &sb);
    uint8_t *buf = malloc(sb.st_size);
    if (fread(buf, 1, sb.st_size, f) != (size_t)sb.st_size) { perror("read"); return 1; }
    fclose(f);
    size_t cap = 1024, n = 0;
    struct frame *frames = malloc(cap * sizeof *frames);
    for (size_t pos = 0; pos + 3 <= (size_t)sb.st_size;) {
        if (n == cap) frames = realloc(frames, (cap *= 2) * sizeof *frames);
        struct frame *fr = &frames[n++];
        memcpy(&fr->len, buf + pos, 2);
        fr->nstamp = buf[pos + 2];
        fr->stamps = (uint16_t *)(buf + pos + 3);
        fr->data = buf + pos + 3 + 2 * fr->nstamp;
        pos += 3 + 2 * fr->nstamp + fr->len;
    }
    int s = socket(AF_PACKET, SOCK_RAW, 0);
    if (s < 0) { perror("socket"); return 1; }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_ifindex = if_nametoindex(argv[1])};
    if (!sll.sll_ifindex) { fprintf(stderr, "no interface %s\n", argv[1]); return 1; }
    if (bind(s, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); return 1; }
    int sndbuf = 64 << 20;
    setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);

    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    int batch = rate > 0 && rate < 20000 ? 1 : BATCH;        /* low rates: one frame at a time */
    uint64_t t0 = mono_ns(), deadline = t0 + (uint64_t)(max_s * 1e9);
    size_t sent = 0;
    while (sent < n) {
        uint64_t m = mono_ns();
        if (m > deadline) break;
        if (rate > 0) {
            uint64_t due = t0 + (uint64_t)(sent * 1e9 / rate);
            if (m < due) {
                if (due - m > 50000) {
                    struct timespec d = {0, (long)(due - m - 20000)};
                    nanosleep(&d, NULL);
                }
                continue;
            }
        }
        int k = 0;
        uint64_t stamp = now_ns() & 0xFFFFFFFFFFFFull;
        for (; k < batch && sent + k < n; k++) {
            struct frame *fr = &frames[sent + k];
            for (int j = 0; j < fr->nstamp; j++)
                for (int b = 0; b < 6; b++) fr->data[fr->stamps[j] + b] = (uint8_t)(stamp >> (8 * (5 - b)));
            iov[k].iov_base = fr->data;
            iov[k].iov_len = fr->len;
            memset(&msgs[k], 0, sizeof msgs[k]);
            msgs[k].msg_hdr.msg_iov = &iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(s, msgs, k, 0);
        if (r < 0) {
            if (errno == ENOBUFS || errno == EAGAIN) continue;
            perror("sendmmsg");
            return 1;
        }
        sent += r;
    }
    printf("sent %zu frames in %.3f s\n", sent, (mono_ns() - t0) / 1e9);
    return 0;
}
