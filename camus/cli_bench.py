"""`camus-xdp bench run / report`: camus-xdp against userspace brokers, analysed on Spark."""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import click

from camus.bench.brokers import BROKERS


@click.group()
def bench() -> None:
    """Benchmarks: camus-xdp side by side with userspace brokers (root; a namespace lab).

    \b
    camus-xdp bench run --broker all                  # every broker, 8 subscribers, 1K and 100K subscriptions
    camus-xdp bench run --broker xdp --broker c --subscriptions 1000 --duration 3
    camus-xdp bench report runs/bench-20261121-2300   # re-run the Spark analysis and the report
    """


@bench.command("run")
@click.option("--broker", "brokers", multiple=True, default=("all",), show_default=True,
              type=click.Choice(BROKERS + ("all",)),
              help="Broker(s) to measure; repeat the option, or 'all'.")
@click.option("--subscribers", multiple=True, type=click.IntRange(1, 64), default=(8,), show_default=True,
              help="Subscriber namespaces (repeat for several lab sizes).")
@click.option("--subscriptions", multiple=True, type=click.IntRange(1), default=(1000, 100_000),
              show_default=True, help="ITCH subscriptions spread over the subscribers (repeatable).")
@click.option("--messages", type=click.IntRange(1000), default=1_000_000, show_default=True,
              help="Messages in the feed (each sent once per phase).")
@click.option("--duration", type=click.FloatRange(0.5), default=5.0, show_default=True,
              help="Cap of the throughput phase, seconds (the feed is sent as fast as possible).")
@click.option("--burst-rate", type=click.IntRange(0), default=0, show_default=True,
              help="Feed msgs/s of the throughput phase; 0: as fast as the sender goes. The sender shares its CPU "
                   "with the receivers, so its full speed depends on how much the broker delivers: a fixed rate "
                   "offers every broker the same load.")
@click.option("--latency-rate", type=click.IntRange(100), default=20_000, show_default=True,
              help="Messages/s in the latency phase.")
@click.option("--latency-seconds", type=click.FloatRange(0.5), default=3.0, show_default=True,
              help="Length of the latency phase.")
@click.option("--interesting", "interesting_share", type=click.FloatRange(0.0, 1.0), default=0.05,
              show_default=True, help="Share of messages on subscribed symbols (paper: 0.05 or 0.005).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the feed and the subscriptions.")
@click.option("--search/--no-search", default=True, show_default=True,
              help="Also find the highest feed rate each broker keeps up with: loss under 0.1% and p99 "
                   "under 10 ms (5 probes of 2 s).")
@click.option("--sender", type=click.Choice(["xdp", "c"]), default="xdp", show_default=True,
              help="The feed's publisher: xdp sends XDP live frames from the kernel (millions of frames/s, "
                   "bench/xdp_sender.py); c is the AF_PACKET sender (bench/c/send.c), a cross-check.")
@click.option("--fanout", type=click.Choice(["auto", "xdp", "tc"]), default="auto", show_default=True,
              help="How camus-xdp makes a packet's copies (attach --fanout).")
@click.option("--split-cpus", is_flag=True,
              help="The broker alone on CPU 1 (its processes, its feed's NAPI as a kernel thread), the sender "
                   "and the receivers (their veths' NAPI threads too) on CPU 0: the sender is not slowed to the "
                   "broker's pace and the receivers' work is neither charged to the broker nor competing with "
                   "it (bench/cpus.py).")
@click.option("--lab-prefix", default="", metavar="NAME",
              help="Names of the run's lab: namespaces NAME-pub, NAME-s1.., interfaces NAME-brk.. (1-8 "
                   "characters a-z0-9). Default: cb + this process's id in hex, so two runs, or a run beside "
                   "another lab, never collide; a lab left by a killed run is removed by the next one.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Run directory (default runs/bench-YYYYmmdd-HHMMSS).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master for the analysis.")
def run(brokers, subscribers, subscriptions, messages, duration, burst_rate, latency_rate, latency_seconds,
        interesting_share, seed, search, sender, fanout, split_cpus, lab_prefix, out_dir, master) -> None:
    """Run the brokers on one lab with one feed; analyse the captures on Spark; report.

    Ends with one JSON line of headline figures (delivered messages/s, p99 latency,
    ratio_xdp_to_<broker>). Needs root (namespaces, XDP).
    """
    import os
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from camus.bench.bench_run import BenchConfig, run_bench
    from camus.bench.analysis import run_analysis
    if lab_prefix and not re.fullmatch(r"[a-z0-9]{1,8}", lab_prefix):
        click.echo(f"error: --lab-prefix {lab_prefix!r}: 1-8 characters a-z 0-9 (interface names are "
                   "NAME-s64b, at most 15 characters)", err=True)
        sys.exit(1)
    if os.geteuid() != 0:
        click.echo("error: the benchmark builds network namespaces and attaches XDP: run it as root", err=True)
        sys.exit(1)
    chosen = list(BROKERS) if "all" in brokers else list(dict.fromkeys(brokers))
    out = Path(out_dir or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and any(out.iterdir()):
        click.echo(f"error: {out} exists and is not empty; choose another --out", err=True)
        sys.exit(1)
    cfg = BenchConfig(brokers=chosen, out=out, subscribers=list(subscribers), subscriptions=list(subscriptions),
                      messages=messages, duration=duration, burst_rate=burst_rate, latency_rate=latency_rate,
                      latency_seconds=latency_seconds, interesting_share=interesting_share, seed=seed,
                      search=search, sender=sender, fanout=fanout, split_cpus=split_cpus,
                      lab_prefix=lab_prefix)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task("starting", total=1.0)
        try:
            run_bench(cfg, lambda what, frac: bar.update(task, description=what, completed=frac))
        except (RuntimeError, OSError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        bar.update(task, description="Spark analysis", completed=1.0)
        head = run_analysis(out, master)
    _print_headline(out, head)


@bench.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
def report(run_dir: str, master: str) -> None:
    """Re-run the Spark analysis of RUN_DIR and rewrite its report."""
    from camus.bench.analysis import check_run_dir, run_analysis
    try:
        check_run_dir(Path(run_dir))
    except (ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    head = run_analysis(Path(run_dir), master)
    _print_headline(Path(run_dir), head)


def _print_headline(out: Path, head: dict) -> None:
    from camus.bench.report import headline_table
    click.echo("\n".join(headline_table(head)))
    click.echo(f"report: {out / 'results' / 'report.md'} (and report.html, plots/)")
    flat = {"run_dir": str(out), "subscribers": head.get("subscribers")}
    for b, cells in head.get("brokers", {}).items():
        for subs, c in cells.items():
            flat[f"{b}_msgs_per_s@{subs}"] = round(c["delivered_msgs_per_s"]) if c.get("delivered_msgs_per_s") else None
            flat[f"{b}_p99_us@{subs}"] = c.get("p99_us")
            if c.get("max_lossless_msgs_per_s"):
                flat[f"{b}_max_lossless_msgs_per_s@{subs}"] = c["max_lossless_msgs_per_s"]
            if c.get("cpu_ns_per_msg"):
                flat[f"cpu_ns_per_msg_{b}@{subs}"] = round(c["cpu_ns_per_msg"])
    flat.update({k: v for k, v in head.items()
                 if k.startswith(("ratio_xdp_to_", "lossless_ratio_xdp_to_", "cpu_ratio_xdp_to_"))})
    click.echo(json.dumps(flat))


COMMANDS: list[click.Command] = [bench]
