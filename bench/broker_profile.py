"""Where the broker's CPU goes during a broker benchmark: perf on the broker's CPU, samples of its
NAPI threads by kernel function.

    sudo python bench/broker_profile.py -- --broker xdp --subscriptions 100000 --messages 2000000 \\
        --no-search --split-cpus --fanout xdp --burst-rate 1000000
    sudo python bench/broker_profile.py --top 30 -- --broker c --subscriptions 1000 --split-cpus ...

Everything after `--` goes to `camus-xdp bench run`, which must have `--split-cpus`: then the
broker's feed interface is polled by a NAPI kernel thread alone on CPU 1 (bench/cpus.py), and
that thread's time is what the benchmark charges camus-xdp (its XDP and TC programs, the copies,
their transmit and the wake-ups of the receivers). `perf record -e cpu-clock -C 1 -g` runs for the
whole benchmark; only samples whose call chain passes through `napi_threaded_poll` are counted,
so the compile, the userspace broker's process and the Spark analysis on that CPU are left out
(both phases, throughput and latency, are in). Printed: the functions the samples landed in with
their share, and for the first few the call chain most of their samples came through (to tell
a `memcpy` of a broadcast clone from one in a helper). The benchmark's own report is written as
usual; its last JSON line is repeated. BPF programs appear as bpf_prog_<tag>_<name> (JIT symbols:
net.core.bpf_jit_kallsyms is set to 1 for the run and restored). Needs root and perf.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

NAPI_FRAME = "napi_threaded_poll"
KALLSYMS = Path("/proc/sys/net/core/bpf_jit_kallsyms")
CHAIN_FRAMES = 6                 # frames of a call chain shown (the sampled function first)


@dataclass
class NapiProfile:
    samples: int = 0                                     # samples in NAPI threads
    by_function: Counter = field(default_factory=Counter)
    chains: dict[str, Counter] = field(default_factory=dict)   # function -> its callers' chains


def napi_profile(script: str) -> NapiProfile:
    """Samples of `perf script -F tid,ip,sym` output whose chain passes through a NAPI thread's
    poll loop, by the function each landed in. A sample is a line with the thread id, then one
    line per frame (address, symbol), then a blank line."""
    prof = NapiProfile()

    def take(frames: list[str]) -> None:
        if not frames or not any(NAPI_FRAME in f for f in frames):
            return
        prof.samples += 1
        prof.by_function[frames[0]] += 1
        prof.chains.setdefault(frames[0], Counter())[" < ".join(frames[1:CHAIN_FRAMES])] += 1

    frames: list[str] = []
    for line in script.splitlines():
        words = line.split()
        if len(words) == 1 and words[0].isdigit():        # a new sample's thread id
            take(frames)
            frames = []
        elif len(words) >= 2:
            frames.append(words[1])
    take(frames)
    return prof


def render(prof: NapiProfile, top: int, chains: int = 5) -> str:
    if not prof.samples:
        return "no samples in NAPI threads (was --split-cpus given, and did any feed arrive?)"
    lines = [f"{prof.samples:,} samples in the broker CPU's NAPI threads (perf cpu-clock, 4 kHz):", ""]
    for name, n in prof.by_function.most_common(top):
        lines.append(f"{n:>8,} {100 * n / prof.samples:5.1f}%  {name}")
    lines += ["", "through (most samples of each):"]
    for name, _ in prof.by_function.most_common(chains):
        chain, n = prof.chains[name].most_common(1)[0]
        lines.append(f"  {name} < {chain}  ({n:,})")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=20, help="functions to list")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then `camus-xdp bench run` options")
    args = ap.parse_args()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    if "--split-cpus" not in bench_args:
        ap.error("the benchmark needs --split-cpus (without it the broker has no NAPI thread of its own)")
    if shutil.which("perf") is None:
        print("broker_profile: perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 1
    camus = shutil.which("camus-xdp") or str(Path(sys.executable).parent / "camus-xdp")
    old_kallsyms = KALLSYMS.read_text() if KALLSYMS.exists() else None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        try:
            if old_kallsyms is not None:
                KALLSYMS.write_text("1\n")
            run = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-C", "1", "-g", "-o", str(data),
                                  "--", camus, "bench", "run", *bench_args], capture_output=True, text=True)
        finally:
            if old_kallsyms is not None:
                KALLSYMS.write_text(old_kallsyms)
        if run.returncode != 0:
            print(f"broker_profile: the benchmark failed:\n{(run.stdout + run.stderr)[-3000:]}", file=sys.stderr)
            return 1
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym"],
                                capture_output=True, text=True).stdout
    print(f"command: camus-xdp bench run {' '.join(bench_args)}\n")
    print(render(napi_profile(script), args.top))
    last = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if last:
        print("\n" + last[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
