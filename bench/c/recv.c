/* camus_recv: a subscriber's receiver. Reads with recvmmsg and records every datagram (UDP
 * socket) or frame (packet socket) with its kernel receive timestamp (SO_TIMESTAMPNS), so the
 * receiver is never the bottleneck and latency is measured by the kernel, not by Python.
 *
 *   camus_recv udp IP PORT OUT SECONDS IDLE_SECONDS
 *   camus_recv packet IFACE OUT SECONDS IDLE_SECONDS
 *
 * OUT: records of u64 ts_ns, u32 length, bytes (little-endian). Prints "ready" once bound and
 * "received N" at the end. Stops after SECONDS, or IDLE_SECONDS without traffic once some came,
 * or on SIGTERM/SIGINT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define SNAP 2048

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int udp = argc == 7 && !strcmp(argv[1], "udp");
    int pkt = argc == 6 && !strcmp(argv[1], "packet");
    if (!udp && !pkt) {
        fprintf(stderr, "usage: %s udp IP PORT OUT SECONDS IDLE | packet IFACE OUT SECONDS IDLE\n", argv[0]);
        return 2;
    }
    const char *out_path = argv[udp ? 4 : 3];
    double secs = atof(argv[udp ? 5 : 4]), idle = atof(argv[udp ? 6 : 5]);
    int s;
    if (udp) {
        s = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    } else {
        s = socket(AF_PACKET, SOCK_RAW, htons(0x0003 /* ETH_P_ALL */));
        struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(0x0003),
                                  .sll_ifindex = if_nametoindex(argv[2])};
        if (!sll.sll_ifindex) { fprintf(stderr, "no interface %s\n", argv[2]); return 1; }
        if (bind(s, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); return 1; }
    }
    int one = 1, rcvbuf = 64 << 20;
    setsockopt(s, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {0, 100000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    FILE *out = fopen(out_path, "wb");
    if (!out) { perror(out_path); return 1; }
    setvbuf(out, NULL, _IOFBF, 1 << 20);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    static uint8_t bufs[BATCH][SNAP];
    static char ctrl[BATCH][64];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    printf("ready\n");
    fflush(stdout);
    double start = mono(), last = 0;
    unsigned long total = 0;
    while (!stop) {
        double t = mono();
        if (t - start > secs || (last > 0 && t - last > idle)) break;
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = SNAP;
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = ctrl[i];
            msgs[i].msg_hdr.msg_controllen = sizeof ctrl[i];
        }
        int r = recvmmsg(s, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (r <= 0) continue;
        last = mono();
        for (int i = 0; i < r; i++) {
            uint64_t ts = 0;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                    struct timespec tsp;
                    memcpy(&tsp, CMSG_DATA(c), sizeof tsp);
                    ts = (uint64_t)tsp.tv_sec * 1000000000ull + tsp.tv_nsec;
                }
            uint32_t len = msgs[i].msg_len > SNAP ? SNAP : msgs[i].msg_len;
            fwrite(&ts, 8, 1, out);
            fwrite(&len, 4, 1, out);
            fwrite(bufs[i], 1, len, out);
        }
        fflush(out);                      /* the runner watches the file grow to see traffic end */
        total += r;
    }
    fclose(out);
    printf("received %lu\n", total);
    return 0;
}
