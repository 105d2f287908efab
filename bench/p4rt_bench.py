"""Switch pushes over P4Runtime, measured: a P4Runtime server (the software switch's, gRPC on
loopback) and the controller's target, at N ITCH subscriptions on one switch.

    python bench/p4rt_bench.py [-n 1000 -n 10000 -n 100000] [--changes 20]

Per size: the first load (every entry), then `--changes` single-subscription changes (one added,
then that one removed, alternately; the added line is a new symbol's, then a new price threshold
inside a symbol the switch already holds, in turn), each pushed as a make-before-break delta: updates written
and wall time of the push (read back + plan + writes; the compile is not included: it is the
same for every target). Rules are compiled as `compile --target p4` compiles them (fitted to the
default switch budget). The last line is one JSON object with the figures.
"""
from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "apps" / "itch" / "itch.p4"
SERVER = """
import sys, time
from concurrent import futures
from pathlib import Path
import grpc
from camus.compiler.backends.p4.runtime import p4runtime_pb2_grpc
from camus.compiler.language.spec_parser import load_spec
from camus.controller.p4rt_server import P4RuntimeSwitch
spec_path, address = sys.argv[1], sys.argv[2]
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(P4RuntimeSwitch(1, load_spec(spec_path), Path(spec_path).read_text()),
                                                   server)
server.add_insecure_port(address)
server.start()
print("ready", flush=True)
server.wait_for_termination()
"""


def free_port() -> int:
    """A TCP port on loopback nobody listens on now (for a server this bench starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(n: int, changes: int, seed: int = 1) -> dict:
    from camus.lab.namespaces import processes
    from camus.compiler.language.spec_parser import load_spec

    spec = load_spec(SPEC)
    port = free_port()
    # the switch in its own process, as in a deployment (its objects are not the controller's)
    with processes() as procs:
        return _measure(spec, port, n, changes, seed, procs)


def _measure(spec, port: int, n: int, changes: int, seed: int, procs: list) -> dict:
    from camus.bench.workloads import itch_rules, symbols
    from camus.compiler.compile import CompileOptions, compile_rules
    import hashlib

    from camus.controller.devices import DeviceTables
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.registry import backend
    from camus.compiler.fitting import build_fitted
    from camus.compiler.incremental import IncrementalCompiler
    from camus.controller.targets import P4RuntimeTarget

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(SPEC), f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, text=True)
    procs.append(server)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    target = P4RuntimeTarget(f"127.0.0.1:{port}", 1, timeout=30.0)
    rules = [r for r in itch_rules(n, seed) if r.strip()]
    base = "\n".join(rules) + "\n"
    # compiled as `compile --target p4` compiles (strategy switch, fitted to the budget by the
    # driver), then, with the options that fit, by one incremental compiler as the controller's
    # device compiler does: its builder keeps node ids from one change to the next
    fitted = build_fitted(compile_rules(spec, base, "<bench>", CompileOptions(strategy="switch")), backend("p4"),
                          TargetOptions()).compiled
    compiler = IncrementalCompiler(spec, fitted.options)

    def tables(text: str) -> DeviceTables:
        lines = [x for x in text.splitlines() if x.strip()]
        return DeviceTables("sw", "p4", hashlib.sha256(text.encode()).hexdigest()[:16], len(lines), text,
                            compiler.compile(text, "<bench>"))

    t = tables(base)
    t0 = time.perf_counter()
    target.push("sw", t)
    first = {"seconds": time.perf_counter() - t0, "updates": sum(target.last.values()),
             "entries": len(target.written.entries) if target.written is not None else 0}
    times, sizes = [], []
    by_kind: dict[str, list[float]] = {"new symbol": [], "existing symbol": []}
    existing = symbols(100)[0]
    for k in range(changes):
        # an added line, then its removal; every other addition is inside a symbol the switch
        # already holds (a new threshold in its price chain), the others a symbol of its own
        kind = "new symbol" if (k // 2) % 2 == 0 else "existing symbol"
        line = (f"stock == ZZ{k:02d} and price > {k + 1} : fwd(7)\n" if kind == "new symbol" else
                f"stock == {existing} and price > {501 + k} : fwd(7)\n")
        text = base + (line if k % 2 == 0 else "")
        t = tables(text)
        t0 = time.perf_counter()
        target.push("sw", t)
        times.append(time.perf_counter() - t0)
        by_kind[kind].append(times[-1])
        sizes.append(sum(target.last.values()))
    target.client.close()
    return {"subscriptions": n, "entries": first["entries"], "first_load_s": round(first["seconds"], 3),
            "first_load_updates": first["updates"], "delta_updates_median": statistics.median(sizes),
            "delta_updates_max": max(sizes), "delta_push_ms_p50": round(statistics.median(times) * 1e3, 1),
            "delta_push_ms_max": round(max(times) * 1e3, 1),
            "by_change": {k: {"p50_ms": round(statistics.median(v) * 1e3, 1), "max_ms": round(max(v) * 1e3, 1)}
                          for k, v in by_kind.items() if v}}


def main() -> int:
    from camus.bench.sizes import run_sizes, size_args
    default = [1000, 10000, 100000]
    ap = size_args(__doc__, default)
    ap.add_argument("--changes", type=int, default=20)
    args = ap.parse_args()
    return run_sizes("p4rt", f"p4rt_bench.py --changes {args.changes}", args.n or default,
                     f"{'subs':>8} {'entries':>8} {'first load':>11} {'delta updates p50/max':>22} "
                     f"{'delta push p50/max':>20}",
                     lambda n: measure(n, args.changes),
                     lambda n, r: f"{n:>8,} {r['entries']:>8,} {r['first_load_s']:>9.2f} s "
                                  f"{r['delta_updates_median']:>11g} / {r['delta_updates_max']:<8} "
                                  f"{r['delta_push_ms_p50']:>9.1f} / {r['delta_push_ms_max']:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
