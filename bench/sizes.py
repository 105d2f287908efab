"""The frame of the per-size benchmarks (p4rt, churn, incremental): `-n` sizes on the command
line, the command that reproduces the run, a table row per size, one JSON object last."""
from __future__ import annotations

import argparse
import json
from typing import Callable


def size_args(doc: str | None, default: list[int]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, action="append",
                    help=f"subscriptions, repeatable (default {' '.join(map(str, default))})")
    return ap


def run_sizes(name: str, command: str, sizes: list[int], header: str,
              measure: Callable[[int], dict], row: Callable[[int, dict], str]) -> int:
    """Measure each size; `command` is the reproducing command after the `-n` options."""
    script, _, rest = command.partition(" ")
    print(f"command: python bench/{script} {' '.join(f'-n {n}' for n in sizes)} {rest}".rstrip())
    print(header)
    out = []
    for n in sizes:
        r = measure(n)
        out.append(r)
        print(row(n, r), flush=True)
    print(json.dumps({name: out}))
    return 0
