"""Where the XDP classifier spends its time: perf samples mapped onto its JIT-compiled code.

    sudo python bench/xdp_profile.py                       # 100K ITCH subscriptions, 12 msgs/pkt
    sudo python bench/xdp_profile.py --subscriptions 10 --messages 1 --top 30
    sudo python bench/xdp_profile.py --workload siena --subscriptions 1000 --messages 1

Loads the program with the benchmark's rule set, runs packets through it with BPF_PROG_TEST_RUN
under `perf record -e cpu-clock` (this VM has no hardware PMU), dumps the JIT image of the
per-message program (`bpf_obj_get_info_by_fd`), disassembles it with objdump and prints the
instructions with the most samples, plus the hottest 40-instruction windows. perf itself cannot
annotate BPF here (it is built without libopcodes), hence this. Samples land on the instruction
*after* a slow one (a load that missed, a long dependency), so read the listing with that skid
in mind. Needs root, perf and objdump (binutils).
"""
from __future__ import annotations

import argparse
import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


class _ProgInfo(ctypes.Structure):       # the head of struct bpf_prog_info (uapi/linux/bpf.h)
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("rest", ctypes.c_uint8 * 512)]


def jit_image(prog_fd: int) -> tuple[bytes, str]:
    """The program's x86 code and its tag (perf names the symbol bpf_prog_<tag>_<name>)."""
    from camus.dataplane.testrun import libbpf
    lib = libbpf()
    lib.bpf_obj_get_info_by_fd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    info, size = _ProgInfo(), ctypes.c_uint32(ctypes.sizeof(_ProgInfo))
    if lib.bpf_obj_get_info_by_fd(prog_fd, ctypes.byref(info), ctypes.byref(size)) != 0:
        raise OSError(ctypes.get_errno(), "bpf_obj_get_info_by_fd failed")
    code = ctypes.create_string_buffer(info.jited_prog_len)
    again = _ProgInfo(jited_prog_len=info.jited_prog_len, jited_prog_insns=ctypes.addressof(code))
    size = ctypes.c_uint32(ctypes.sizeof(_ProgInfo))
    if lib.bpf_obj_get_info_by_fd(prog_fd, ctypes.byref(again), ctypes.byref(size)) != 0:
        raise OSError(ctypes.get_errno(), "bpf_obj_get_info_by_fd failed")
    return code.raw, bytes(info.tag).hex()


def disassemble(code: bytes) -> list[tuple[int, str]]:
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        out = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64", f.name],
                             capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(.*)", line)
        if m:
            rows.append((int(m.group(1), 16), m.group(2).strip()))
    return rows


def run_load(args: argparse.Namespace) -> None:
    """The child perf records: load, fill, run the packets for --seconds."""
    import random
    import time
    from camus.compiler.backends.ebpf.bitvector import sized_limits
    from camus.compiler.backends.ebpf.program import EbpfLimits
    from camus.compiler.backends.ebpf.tables import map_contents
    from camus.compiler.codec.packets import build_packet
    from camus.compiler.compile import compile_rules
    from camus.dataplane.program import XdpProgram
    from compile_bench import workload
    spec, text, make_message = workload(args.workload, args.subscriptions, 1)
    compiled = compile_rules(spec, text + "\n")
    lim = sized_limits(compiled.pipeline, EbpfLimits(max_states=1 << 20, max_exact=1 << 20),
                       len(spec.query_fields))
    prog = XdpProgram.load(spec, lim)
    prog.write(map_contents(compiled.pipeline, spec, lim))
    rng = random.Random(7)
    pkts = [build_packet(spec, [make_message(rng) for _ in range(args.messages)]) for _ in range(5)]
    for name in ("camus_xdp", "camus_msg"):   # one-message packets are classified in camus_xdp itself
        code, tag = jit_image(prog.fd(name))
        Path(f"{args.jit}.{name}").write_bytes(code)
        print(f"{name}={tag}", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for p in pkts:
            prog.run(p, 20_000)
    prog.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="itch", choices=("itch", "siena", "sensors"),
                    help="the rule set and messages (bench/compile_bench.py's workloads)")
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=12, choices=range(1, 13), metavar="1..12")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the packets run under perf")
    ap.add_argument("--top", type=int, default=25, help="instructions to list")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--jit", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_load(args)
        return 0
    for tool in ("perf", "objdump"):
        if shutil.which(tool) is None:
            print(f"xdp_profile: {tool} is not installed (apt-get install linux-perf binutils)", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        data, jit = Path(tmp) / "perf.data", Path(tmp) / "jit.bin"
        child = [sys.executable, __file__, "--child", "--jit", str(jit), "--workload", args.workload,
                 "--subscriptions", str(args.subscriptions),
                 "--messages", str(args.messages), "--seconds", str(args.seconds)]
        rec = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", str(data), "--", *child],
                             capture_output=True, text=True)
        if rec.returncode != 0:
            print(f"xdp_profile: perf record failed:\n{rec.stderr[-2000:]}", file=sys.stderr)
            return 1
        tags = dict(line.split("=") for line in rec.stdout.split())
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym,symoff"],
                                capture_output=True, text=True).stdout
        found = {name: Counter(int(m.group(1), 16) for m in re.finditer(
            re.escape(f"bpf_prog_{tag}_{name}") + r"\+0x([0-9a-f]+)", script)) for name, tag in tags.items()}
        name, offsets = max(found.items(), key=lambda kv: sum(kv[1].values()))
        if not offsets:
            print("xdp_profile: no samples in the programs (is /proc/sys/net/core/bpf_jit_kallsyms 1?)",
                  file=sys.stderr)
            return 1
        total_samples = len(script.splitlines())
        code = Path(f"{jit}.{name}").read_bytes()
        rows = disassemble(code)
    hits = [(offsets.get(off, 0), off, text) for off, text in rows]
    in_prog = sum(offsets.values())
    print(f"{args.subscriptions:,} subscriptions, {args.messages} msgs/packet: {in_prog:,} of {total_samples:,} "
          f"samples in {name} ({len(rows):,} instructions, {len(code):,} bytes of x86)")
    print("\nhottest instructions (samples, share, offset, instruction):")
    for n, off, text in sorted(hits, reverse=True)[:args.top]:
        print(f"{n:>7} {100 * n / max(1, in_prog):5.1f}%  {off:#06x}  {text}")
    print("\nhottest 40-instruction windows:")
    windows = [(sum(h[0] for h in hits[i:i + 40]), hits[i][1]) for i in range(0, len(hits), 40)]
    for n, off in sorted(windows, reverse=True)[:8]:
        print(f"{n:>7} {100 * n / max(1, in_prog):5.1f}%  from {off:#06x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
