"""Benchmark feeds: ITCH Add Order messages in MoldUDP64 (1-12 per packet), with Zipf symbols and
a configurable share of "interesting" messages (symbols somebody subscribed to), INT reports and
Siena-style events. Every message carries its sequence number (ITCH: the order reference number)
and a send timestamp (ITCH: the 48-bit timestamp field, stamped by the sender as it goes out).

ILA datagrams and hICN interests (the IPv6 apps) are message dicts like INT reports: any spec's
messages become frames with `write_spec_frames`.

Frames are written in the C sender's file format (`bench/c/send.c`), so sending needs no Python.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

from camus.compiler.codec.packets import mold_messages, udp_frame

from .workloads import symbols

ADD_ORDER = struct.Struct("!cHH6sQcI8sI")        # 36 bytes: ITCH 5.0 Add Order
TIMESTAMP_OFFSET = 5                              # bytes into the message
ORDER_REF_OFFSET = 11
STOCK_OFFSET = 24
PRICE_OFFSET = 32
MOLD_HEADER = 20
ETH_IP_UDP = 14 + 20 + 8


@dataclass(frozen=True)
class FeedConfig:
    messages: int = 100_000
    interesting_share: float = 0.05         # the paper's 5% (or 0.5%) mix
    interesting: tuple[str, ...] = tuple(symbols(100))   # the symbols subscriptions name
    noise_symbols: int = 900
    zipf_s: float = 1.0
    max_per_packet: int = 12
    price_max: int = 1000
    seed: int = 1


@dataclass
class Feed:
    messages: list[tuple[int, str, int, int, str]]   # (seq, stock, price, shares, side)
    packets: list[list[int]]                          # message indexes per packet
    config: FeedConfig


def _zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


def itch_feed(cfg: FeedConfig) -> Feed:
    rng = random.Random(cfg.seed)
    noise = [f"N{i:04d}" for i in range(cfg.noise_symbols)]
    w_int, w_noise = _zipf_weights(len(cfg.interesting), cfg.zipf_s), _zipf_weights(len(noise), cfg.zipf_s)
    msgs = []
    for seq in range(1, cfg.messages + 1):
        pool, w = (cfg.interesting, w_int) if rng.random() < cfg.interesting_share or not noise else (noise, w_noise)
        msgs.append((seq, rng.choices(pool, w)[0], rng.randint(1, cfg.price_max), rng.randint(1, 5000),
                     rng.choice("BS")))
    packets, i = [], 0
    while i < len(msgs):
        k = min(rng.randint(1, cfg.max_per_packet), len(msgs) - i)
        packets.append(list(range(i, i + k)))
        i += k
    return Feed(msgs, packets, cfg)


def add_order(seq: int, stock: str, price: int, shares: int, side: str, ts_ns: int = 0) -> bytes:
    return ADD_ORDER.pack(b"A", 0, 0, (ts_ns & 0xFFFFFFFFFFFF).to_bytes(6, "big"), seq, side.encode(), shares,
                          stock.encode().ljust(8, b" ")[:8], price)


def mold_payload(feed: Feed, packet: list[int], sequence: int) -> bytes:
    out = bytearray(b"CAMUSBENCH" + sequence.to_bytes(8, "big") + len(packet).to_bytes(2, "big"))
    for i in packet:
        body = add_order(*feed.messages[i])
        out += len(body).to_bytes(2, "big") + body
    return bytes(out)


def write_frames(feed: Feed, path: Path, *, src_ip: str, dst_ip: str, src_mac: bytes, dst_mac: bytes,
                 port: int) -> Path:
    """The feed as the C sender's frame file: each frame with the offsets of its messages'
    timestamp fields, which the sender stamps as the frame leaves."""
    with path.open("wb") as f:
        seq = 1
        for pk in feed.packets:
            frame = udp_frame(mold_payload(feed, pk, seq), port, src_ip=src_ip, dst_ip=dst_ip,
                              src_mac=src_mac, dst_mac=dst_mac)
            stamps = [ETH_IP_UDP + MOLD_HEADER + j * (2 + ADD_ORDER.size) + 2 + TIMESTAMP_OFFSET
                      for j in range(len(pk))]
            f.write(struct.pack("<HB", len(frame), len(stamps)) + struct.pack(f"<{len(stamps)}H", *stamps) + frame)
            seq += len(pk)
    return path


def parse_mold(payload: bytes) -> list[bytes]:
    """The messages of a MoldUDP64 payload (stops at the first length that does not fit)."""
    return mold_messages(payload)


def message_seq_ts(msg: bytes) -> tuple[int, int]:
    """(sequence number, 48-bit send timestamp) of an Add Order message."""
    return (int.from_bytes(msg[ORDER_REF_OFFSET:ORDER_REF_OFFSET + 8], "big"),
            int.from_bytes(msg[TIMESTAMP_OFFSET:TIMESTAMP_OFFSET + 6], "big"))


def rules_for(subscriptions: int, subscribers: int, seed: int = 1) -> list[str]:
    """ITCH subscriptions spread over the subscribers (port p = subscriber p)."""
    from .workloads import itch_rules
    return itch_rules(subscriptions, seed=seed, n_hosts=subscribers)


# -- INT reports and Siena-style events: any spec's messages as sender frames ------------------

def int_reports(n: int, seed: int = 1, switches: int = 16) -> list[dict[str, int]]:
    """INT reports (apps/int/int.p4): hop latency mostly small with a slow tail, queue depth,
    the reported flow's destination in 10.0.0.0/8."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        slow = rng.random() < 0.05
        out.append({"int_report.switch_id": rng.randint(1, switches),
                    "int_report.hop_latency": rng.randint(100_000, 500_000) if slow else rng.randint(500, 50_000),
                    "int_report.queue_occupancy": int(rng.expovariate(1 / 800)),
                    "int_report.flow_dst": (10 << 24) | rng.randrange(1 << 24)})
    return out


def siena_events(n: int, spec, seed: int = 1, n_attrs: int = 6) -> list[dict[str, int]]:
    """Siena-style attribute events in the value ranges of `workloads.siena_rules`."""
    from camus.compiler.codec.packets import message_from_text
    from .workloads import siena_message, siena_schema
    schema, rng = siena_schema(n_attrs, seed=2), random.Random(seed)
    return [message_from_text(spec, siena_message(schema, rng)) for _ in range(n)]


# -- the IPv6 apps: ILA datagrams and hICN interests ----------------------------------------------

ILA_SIR = 0x20010DB805EA0000          # apps/ila: the SIR prefix (top 64 bits)
HICN_NAMES = 0xB0010000               # apps/hicn: names b001:0:<name>::/64 (top 32 bits of the prefix)


def ila_identifier(i: int) -> int:
    """Task i's identifier, as apps/ila names them: 0:0:1:x (x = i + 1) and up."""
    return 0x10000 + i + 1


def ila_datagrams(n: int, tasks: int, seed: int = 1, unknown_share: float = 0.05) -> list[dict[str, int]]:
    """Datagrams to SIR addresses: Zipf over the known tasks, a share to identifiers no rule names."""
    rng = random.Random(seed)
    weights = _zipf_weights(tasks, 1.0)
    known = rng.choices(range(tasks), weights=weights, k=n)
    return [{"ipv6.dst": ILA_SIR << 64 | (rng.randrange(1 << 40, 1 << 48) if rng.random() < unknown_share
                                          else ila_identifier(t))} for t in known]


def hicn_messages(n: int, names: int, seed: int = 1, data_share: float = 0.3) -> list[dict[str, int]]:
    """hICN interests (kind 1) for Zipf-popular names and their segments, and data packets (kind 2)."""
    rng = random.Random(seed)
    picked = rng.choices(range(names), weights=_zipf_weights(names, 1.0), k=n)
    return [{"hicn.kind": 2 if rng.random() < data_share else 1,
             "ipv6.dst": (HICN_NAMES << 32 | name + 1) << 64 | rng.randrange(1 << 16)} for name in picked]


def write_spec_frames(spec, messages: list[dict[str, int]], path: Path, *, src_ip: str, dst_ip: str,
                      src_mac: bytes, dst_mac: bytes, per_packet: int = 1) -> Path:
    """Any spec's messages as the C sender's frame file (no timestamp stamping: these formats
    carry no send-time field)."""
    from camus.compiler.codec.packets import build_packet, packet_addresses
    with path.open("wb") as f:
        step = per_packet if spec.framing.kind == "moldudp64" else 1
        for i in range(0, len(messages), step):
            # packet-level query fields (the IPv6 apps' destination) come from the message
            addresses = {"src_ip": src_ip, "dst_ip": dst_ip, **packet_addresses(spec, messages[i])}
            frame = build_packet(spec, messages[i:i + step], src_mac=src_mac, dst_mac=dst_mac, sequence=i + 1,
                                 **addresses)
            f.write(struct.pack("<HB", len(frame), 0) + frame)
    return path
