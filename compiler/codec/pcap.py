"""Reading and writing classic libpcap files (the format tcpdump -w and trafgen use)."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

_MAGICS = {0xA1B2C3D4: ("<", 1_000), 0xD4C3B2A1: (">", 1_000),
           0xA1B23C4D: ("<", 1), 0x4D3CB2A1: (">", 1)}   # microsecond / nanosecond variants


class PcapError(ValueError):
    pass


def read_pcap(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """Yield (timestamp_ns, frame bytes) for each Ethernet frame."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise PcapError(f"{path}: too short for a pcap file")
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic == 0x0A0D0D0A:
        raise PcapError(f"{path}: pcapng is not supported; convert with `editcap -F pcap`")
    if magic not in _MAGICS:
        raise PcapError(f"{path}: not a pcap file (magic 0x{magic:08x})")
    endian, ns_per_unit = _MAGICS[magic]
    linktype = struct.unpack_from(endian + "I", data, 20)[0]
    if linktype != 1:
        raise PcapError(f"{path}: link type {linktype} is not Ethernet")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, off)
        off += 16
        if off + incl > len(data):
            raise PcapError(f"{path}: truncated record at byte {off - 16}")
        yield sec * 1_000_000_000 + frac * ns_per_unit, data[off:off + incl]
        off += incl


def write_pcap(path: str | Path, frames: list[tuple[int, bytes]]) -> None:
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
    for ts_ns, frame in frames:
        out += struct.pack("<IIII", ts_ns // 1_000_000_000, ts_ns % 1_000_000_000, len(frame), len(frame))
        out += frame
    Path(path).write_bytes(bytes(out))
