"""`camus-xdp update` with one line of the rules file changed, whole process, as a user runs it.

    sudo python bench/cli_update_bench.py [-n 100000] [--updates 20] [--seed 1] [--agent]

A veth pair gets N ITCH rules (`stock == S and price > P : fwd(H)`, 100 symbols, 200 hosts)
attached in generic mode (`camus-xdp attach`, timed): first with empty caches (BCC builds the
program, the rules are compiled), then again after `detach` (the program and the compile loaded
from the caches attach keeps). With
`--agent`, a host agent (`camus-xdp agent`, no controller) then holds the interface and each
update is handed to it. Then `--updates` times: one random line of
the file is changed, or a line added, or removed (in turn), and `camus-xdp update IF --rules
FILE` runs as its own process, timed from start to exit; then the same file again (a refresh).
At the end the kernel's classification of 400 random messages (the pinned program run by
BPF_PROG_TEST_RUN) is checked against the reference interpreter on the final file. Commands run
with Python's bytecode cache on, as an installed camus-xdp does. The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"
IF_A, IF_B = "cxub-a", "cxub-b"


CACHE_ENV: dict[str, str] = {}       # CAMUS_XDP_CACHE for the commands: a cold program cache first


def _cli(*args: str) -> tuple[float, str]:
    """Run `camus-xdp ARGS` as a process of its own; (seconds from start to exit, stdout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | CACHE_ENV
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", *args],
                          capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"camus-xdp {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return seconds, done.stdout


def _edit(lines: list[str], k: int, rng: random.Random, syms: list[str]) -> None:
    rule = f"stock == {rng.choice(syms)} and price > {rng.randint(1, 999)} : fwd({rng.randint(1, 200)})"
    if k % 3 == 0:
        lines[rng.randrange(len(lines))] = rule
    elif k % 3 == 1:
        lines.insert(rng.randrange(len(lines)), rule)
    else:
        lines.pop(rng.randrange(len(lines)))


def _check(path: Path, rng: random.Random, syms: list[str]) -> int:
    """Messages the kernel classifies otherwise than the interpreter (0 expected)."""
    from camus.compiler.codec.packets import message_from_text
    from camus.compiler.compile import CompileOptions, compile_files
    from camus.compiler.language.spec_parser import load_spec
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.compiler.structure.slicing import sort_ports
    from camus.lab.pinned_run import port_bits_of
    spec = load_spec(SPEC)
    c = compile_files(str(SPEC), str(path), CompileOptions(count_rules=64))
    ip = PipelineInterpreter(c.pipeline)
    msgs = [f"stock={rng.choice(syms)} price={rng.randint(0, 1000)}" for _ in range(400)]
    want = [tuple(sorted(ip.run(message_from_text(spec, m)).actions.ports)) for m in msgs]
    try:      # the live path's port bits: the ports of its last whole write (a delta adds none)
        import pickle
        from camus.dataplane.installed import live_state_path
        names = pickle.loads(live_state_path(IF_A).read_bytes()).parts["ports"]
    except FileNotFoundError:     # written by a whole compile: the rules' ports in order
        names = sort_ports({p for leaf in c.pipeline.leaves.values() for p in leaf.ports})
    got = [tuple(sorted(names[b] for b in bits)) for bits in port_bits_of(IF_A, spec, msgs)]
    return sum(1 for w, g in zip(want, got) if w != g)


def _start_agent(tmp: Path) -> subprocess.Popen:
    """`camus-xdp agent IF_A` (no controller), once it holds the attached tables for deltas."""
    import urllib.request
    from camus.bench.p4rt_bench import free_port
    (tmp / "agent.token").write_text("bench\n")
    listen = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-c", "from camus.cli import main; main()", "agent", IF_A,
                             "--spec", str(SPEC), "--listen", listen,
                             "--token-file", str(tmp / "agent.token")], stderr=subprocess.DEVNULL,
                            env=os.environ | CACHE_ENV)
    ask = urllib.request.Request(f"http://{listen}/v1/status", headers={"Authorization": "Bearer bench"})
    end = time.monotonic() + 600
    while True:
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit("the host agent did not start")
        try:
            with urllib.request.urlopen(ask, timeout=5) as r:
                if json.loads(r.read())["live"]:
                    return proc
        except OSError:
            pass
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=100_000, help="rules attached (default 100000)")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--agent", action="store_true",
                    help="updates through a host agent holding the interface (`camus-xdp agent`), started "
                         "after the attach")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (it attaches XDP to a veth pair)", file=sys.stderr)
        return 1
    from camus.bench.workloads import itch_rules, symbols
    rng = random.Random(args.seed)
    syms = symbols(100)
    lines = itch_rules(args.n, args.seed)
    subprocess.run(["ip", "link", "del", IF_A], capture_output=True)
    subprocess.run(["ip", "link", "add", IF_A, "type", "veth", "peer", "name", IF_B], check=True)
    agent: subprocess.Popen | None = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.txt"
        path.write_text("\n".join(lines) + "\n")
        try:
            for dev in (IF_A, IF_B):
                subprocess.run(["ip", "link", "set", dev, "up"], check=True)
            CACHE_ENV["CAMUS_XDP_CACHE"] = str(Path(tmp) / "programs")      # empty: the program is built
            first_s, _ = _cli("attach", IF_A, "--spec", str(SPEC), "--rules", str(path), "--mode", "generic")
            _cli("detach", IF_A)
            kept = Path(tmp) / "compiled"      # attach's child keeps the compile after the live state
            end = time.monotonic() + 300
            while not any(kept.glob("*.pickle")) and time.monotonic() < end:
                time.sleep(0.05)
            attach_s, _ = _cli("attach", IF_A, "--spec", str(SPEC), "--rules", str(path), "--mode", "generic")
            print(f"attach of {args.n:,} rules: {first_s:.2f} s the first time (BCC builds the program), "
                  f"{attach_s:.2f} s again after detach (from the program cache)", flush=True)
            if args.agent:
                agent = _start_agent(Path(tmp))
            times, paths = [], []
            for k in range(args.updates):
                _edit(lines, k, rng, syms)
                path.write_text("\n".join(lines) + "\n")
                seconds, out = _cli("update", IF_A, "--rules", str(path), "--json")
                doc = json.loads(out)
                if doc.get("agent") != args.agent:
                    raise SystemExit(f"the update ran {'in' if args.agent else 'out of'} the command's own process")
                times.append(seconds)
                paths.append(doc["path"])
                print(f"  update {k + 1:>3} ({['changed', 'added', 'removed'][k % 3]} a line): {seconds:.2f} s, "
                      f"{doc['path']}, {doc['ms']:.0f} ms inside", flush=True)
            refresh_s, _ = _cli("update", IF_A, "--rules", str(path))
            wrong = _check(path, rng, syms)
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=60)
            subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "detach", IF_A],
                           capture_output=True)
            subprocess.run(["ip", "link", "del", IF_A], capture_output=True)
    ordered = sorted(times)
    result = {"bench": "cli_update", "command": f"cli_update_bench.py -n {args.n} --updates {args.updates}"
              + (" --agent" if args.agent else ""),
              "rules": args.n, "attach_first_s": round(first_s, 2), "attach_s": round(attach_s, 2),
              "agent": args.agent,
              "update_s_p50": round(statistics.median(times), 3),
              "update_s_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
              "update_s_max": round(max(times), 3), "paths": {p: paths.count(p) for p in sorted(set(paths))},
              "refresh_s": round(refresh_s, 3), "messages_classified_wrong": wrong}
    print(f"one line changed, whole process: p50 {result['update_s_p50']:.2f} s, p90 {result['update_s_p90']:.2f} s, "
          f"max {result['update_s_max']:.2f} s; refresh {refresh_s:.2f} s; {wrong} of 400 messages wrong")
    print(json.dumps(result))
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
