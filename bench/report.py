"""The benchmark report: a Markdown and an HTML page with the headline table, the full table per
broker and phase, per-subscriber precision/recall, and matplotlib plots (throughput against
subscriptions and subscribers, latency CDFs, camus-xdp against each broker)."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

ORDER = ["xdp", "c", "py", "mosquitto", "nats", "redis"]
LABEL = {"xdp": "camus-xdp", "c": "C broker (same tables)", "py": "Python broker (same tables)",
         "mosquitto": "mosquitto (MQTT)", "nats": "nats-server", "redis": "redis pub/sub"}


def _fmt(v: Any, kind: str = "") -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{100 * v:.2f}%"
    if kind == "rate":
        return f"{v:,.0f}"
    if kind == "us":
        return f"{v:,.1f}"
    if isinstance(v, float):
        return f"{v:,.3f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _brokers(rows: list[dict]) -> list[str]:
    seen = {r["broker"] for r in rows}
    return [b for b in ORDER if b in seen] + sorted(seen - set(ORDER))


def headline_table(head: dict) -> list[str]:
    subs_list = sorted({int(s) for cells in head.get("brokers", {}).values() for s in cells})
    cols = []
    lossless = any("max_lossless_msgs_per_s" in c for cells in head.get("brokers", {}).values()
                   for c in cells.values())
    for s in subs_list:
        cols += [f"delivered msgs/s @{s:,}", f"loss @{s:,}", f"p99 µs @{s:,}", f"xdp ratio @{s:,}"]
        if lossless:
            cols += [f"max lossless feed msgs/s @{s:,}", f"xdp ratio (lossless) @{s:,}"]
    lines = ["| broker | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
    for b in [x for x in ORDER if x in head.get("brokers", {})]:
        cells = head["brokers"][b]
        row = []
        for s in subs_list:
            c = cells.get(str(s), {})
            ratio = head.get("ratios", {}).get(f"ratio_xdp_to_{b}@{s}")
            row += [_fmt(c.get("delivered_msgs_per_s"), "rate"), _fmt(c.get("loss"), "pct"), _fmt(c.get("p99_us"), "us"),
                    "1 (itself)" if b == "xdp" else (f"{ratio:.2f}x" if ratio else "–")]
            if lossless:
                lr = head.get("lossless_ratios", {}).get(f"ratio_xdp_to_{b}@{s}")
                row += [_fmt(c.get("max_lossless_msgs_per_s"), "rate"),
                        "1 (itself)" if b == "xdp" else (f"{lr:.2f}x" if lr else "–")]
        lines.append(f"| {LABEL.get(b, b)} | " + " | ".join(row) + " |")
    return lines


def draw_metric(ax: Any, rows: list[dict], metric: str, ylabel: str, x: str, fixed: str, value: int,
                xscale: str, title: str) -> str:
    """One broker comparison on `ax`: lines over `x` when the run measured several values of it,
    else bars (one per broker, labelled with the value, the axis from 0): a single
    subscription count drawn as lines was a lone dot per broker on log axes. Returns the kind."""
    series = {b: sorted((r[x], r[metric]) for r in rows if r["broker"] == b and r[fixed] == value and r.get(metric))
              for b in _brokers(rows)}
    series = {b: pts for b, pts in series.items() if pts}
    xs = {p[0] for pts in series.values() for p in pts}
    if len(xs) <= 1:
        names = [LABEL.get(b, b) for b in series]
        bars = ax.bar(range(len(series)), [pts[0][1] for pts in series.values()], color=[f"C{i}" for i in
                                                                                         range(len(series))])
        ax.bar_label(bars, labels=[_fmt(pts[0][1], "rate") for pts in series.values()], fontsize=7)
        ax.set_xticks(range(len(series)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylim(bottom=0)
        at = f"{x} = {next(iter(xs)):,}" if xs else "no data"
        ax.set(ylabel=ylabel, title=f"{title}, {at}")
        ax.grid(True, axis="y", alpha=.3)
        return "bars"
    for b, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=LABEL.get(b, b))
    ax.set(xscale=xscale, yscale="log", xlabel=x, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=.3)
    return "lines"


def _plots(run_dir: Path, summary: list[dict], cdf: list[dict]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = run_dir / "results" / "plots"
    out.mkdir(parents=True, exist_ok=True)
    made = []
    thr = [dict(r, delivered_msgs_per_s=r.get("wanted_msgs_per_s") or r["delivered_msgs_per_s"])
           for r in summary if r["phase"] == "throughput" and r["delivered_msgs_per_s"]]
    def plot(metric: str, ylabel: str, x: str, fixed: str, value: int, name: str, xscale: str, title: str) -> None:
        fig, ax = plt.subplots(figsize=(7, 4))
        draw_metric(ax, thr, metric, ylabel, x, fixed, value, xscale, title)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append(name)

    # throughput, and CPU per delivered message (process + softirq: the method in the report)
    metrics = (("delivered_msgs_per_s", "delivered messages/s", "throughput", "Throughput"),
               ("cpu_ns_per_msg", "CPU ns per delivered message", "cpu", "CPU per delivered message"))
    if thr:
        n = max(r["subscribers"] for r in thr)
        m = max(r["subscriptions"] for r in thr)
        for metric, ylabel, stem, title in metrics:
            if not any(r.get(metric) for r in thr):
                continue
            plot(metric, ylabel, "subscriptions", "subscribers", n, f"{stem}_vs_subscriptions.png", "log",
                 f"{title} vs subscriptions ({n} subscribers)")
            if len({r["subscribers"] for r in thr}) > 1:
                plot(metric, ylabel, "subscribers", "subscriptions", m, f"{stem}_vs_subscribers.png", "linear",
                     f"{title} vs subscribers ({m:,} subscriptions)")
    lat = [r for r in cdf if r["phase"] == "latency" and r["latency_us"] is not None]
    if lat:
        n = max(r["subscribers"] for r in lat)
        for m in sorted({r["subscriptions"] for r in lat}):
            fig, ax = plt.subplots(figsize=(7, 4))
            for b in _brokers(lat):
                pts = sorted((r["fraction"], r["latency_us"]) for r in lat
                             if r["broker"] == b and r["subscriptions"] == m and r["subscribers"] == n)
                if pts:
                    ax.plot([p[1] for p in pts], [p[0] for p in pts], label=LABEL.get(b, b))
            ax.set(xscale="log", xlabel="latency (µs, publisher send to subscriber kernel receive)",
                   ylabel="fraction of messages", title=f"Latency CDF ({n} subscribers, {m:,} subscriptions)")
            ax.legend(fontsize=8)
            ax.grid(True, which="both", alpha=.3)
            fig.tight_layout()
            name = f"latency_cdf_{m}.png"
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            made.append(name)
    return made


def _throughput_rate(cfg: dict) -> str:
    """How fast the throughput phase's feed was sent (`bench run --burst-rate`; 0 or absent: full speed)."""
    rate = cfg.get("burst_rate") or 0
    return f"{rate:,} messages/s" if rate else "the sender's full speed"


def _placement(cfg: dict) -> str:
    """Where the run put its work and how camus-xdp copied packets (the figures depend on both)."""
    cpus = ("broker alone on CPU 1, sender and receivers on CPU 0 (--split-cpus)" if cfg.get("split_cpus")
            else "sender, broker and receivers sharing the CPUs")
    return f"{cpus}; camus-xdp fan-out {cfg.get('fanout', 'auto')}; sender {cfg.get('sender', 'xdp')}"


def write_report(run_dir: Path, summary: list[dict], per_sub: list[dict], cdf: list[dict], head: dict) -> Path:
    cfg = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}
    plots = _plots(run_dir, summary, cdf)
    md = ["# camus-xdp against userspace brokers", ""]
    if cfg:
        md += [f"Feed: {cfg.get('messages', 0):,} ITCH Add Order messages in MoldUDP64 packets of 1-12, "
               f"{100 * cfg.get('interesting_share', 0):.1f}% of them on subscribed symbols (Zipf); "
               f"throughput phase at {_throughput_rate(cfg)} (capped at {cfg.get('duration')} s), latency phase at "
               f"{cfg.get('latency_rate', 0):,} messages/s for {cfg.get('latency_seconds')} s; "
               f"{_placement(cfg)}.", ""]
    md += [f"## Headline ({head.get('subscribers')} subscribers)", "",
           "Delivered messages/s: messages subscribers asked for, delivered per second in the throughput phase "
           f"(the feed at {_throughput_rate(cfg)}; topic brokers' extra copies of price-filtered symbols not "
           "counted); loss in that phase; p99 latency in the latency phase (fixed rate); ratio = camus-xdp's "
           "delivered messages/s over the broker's.", ""]
    md += headline_table(head) + [""]
    md += ["## All runs", "",
           "| broker | subscribers | subscriptions | phase | sent msgs | delivered | wanted msgs/s | all copies/s | "
           "input msgs/s | packets/s | loss | precision | dup | p50 µs | p99 µs | p99.9 µs | broker CPU s/M msgs | "
           "system CPU s/M msgs | CPU ns/delivered | in BPF ns/delivered | receivers ns/delivered |",
           "| --- |" + " ---: |" * 20]
    for r in summary:
        md.append(f"| {r['broker']} | {r['subscribers']} | {r['subscriptions']:,} | {r['phase']} | "
                  f"{r['sent_messages']:,} | {r['delivered']:,} | {_fmt(r.get('wanted_msgs_per_s'), 'rate')} | "
                  f"{_fmt(r['delivered_msgs_per_s'], 'rate')} | {_fmt(r.get('input_msgs_per_s'), 'rate')} | "
                  f"{_fmt(r['packets_per_s'], 'rate')} | {_fmt(r['loss'], 'pct')} | {_fmt(r['precision'], 'pct')} | "
                  f"{r['duplicates']:,} | {_fmt(r['p50_us'], 'us')} | {_fmt(r['p99_us'], 'us')} | "
                  f"{_fmt(r['p999_us'], 'us')} | {_fmt(r['broker_cpu_s_per_mmsg'])} | "
                  f"{_fmt(r['system_cpu_s_per_mmsg'])} | {_fmt(r.get('cpu_ns_per_msg'))} | "
                  f"{_fmt(r.get('bpf_ns_per_msg'))} | {_fmt(r.get('receivers_ns_per_msg'))} |")
    md += ["", "camus-xdp works in the kernel's softirq, not in a process: its broker CPU column is 0; "
           "compare the system CPU column (the whole machine: sender, broker and receivers).", "",
           "CPU ns/delivered: (the broker's process CPU time + the machine's softirq time during the phase) / "
           "copies delivered to subscribers. XDP and TC run in softirq, so camus-xdp's cost is all there; a "
           "userspace broker pays its process time plus the softirq of its sockets. Softirq also holds the "
           "sender's and the receivers' packet work, the same for every broker, so the ratio understates the "
           "difference. In BPF ns/delivered: the part the kernel timed inside camus-xdp's own programs "
           "(kernel.bpf_stats_enabled: run_time_ns of camus_xdp and camus_tc_in, which includes the copies' "
           "egress pruning: bpf_clone_redirect runs it inline). With --split-cpus the feed interface's "
           "receive work runs in its NAPI kernel thread instead of softirq: that thread's CPU time is added, the "
           "softirq is the broker CPU's only, and the subscribers' receive work (their veths' NAPI threads and "
           "their processes, on the other CPU) is not counted; process and thread times are read from "
           "schedstat (ns), softirq from /proc/stat (10 ms ticks). Receivers ns/delivered: the lab's own cost per "
           "copy (the receivers' processes and, with --split-cpus, their veths' NAPI threads), never counted for "
           "a broker: where it is as large as the broker's, the lab, not the broker, limits the rates.", ""]
    md += ["## Per subscriber (latency phase)", "",
           "| broker | subscriptions | subscriber | expected | delivered | precision | recall |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in per_sub:
        if r["phase"] == "latency":
            md.append(f"| {r['broker']} | {r['subscriptions']:,} | {r['subscriber']} | {r['expected']:,} | "
                      f"{r['delivered']:,} | {_fmt(r['precision'], 'pct')} | {_fmt(r['recall'], 'pct')} |")
    md += ["", "## Plots", ""] + [f"![{p}](plots/{p})" for p in plots] + [""]
    out = run_dir / "results"
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.html").write_text(_html("\n".join(md)))
    return out / "report.md"


def _html(md: str) -> str:
    """A plain HTML rendering of the report's Markdown (tables, headings, images)."""
    body, in_table = [], False
    for line in md.split("\n"):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-: "):
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                body.append("<table>")
                in_table = True
            body.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.startswith("!["):
            src = line[line.index("(") + 1:-1]
            body.append(f'<img src="{html.escape(src)}" style="max-width:100%">')
        elif line:
            body.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        body.append("</table>")
    return ("<!doctype html><meta charset=utf-8><title>camus-xdp benchmark</title><style>"
            "body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>\n" + "\n".join(body) + "\n")
