"""Turns one bench run's JSON into the markdown table and the latency-vs-load PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _f(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}; loop: {r['loop']}; "
        f"{'quick' if r['quick'] else 'full'} run; load average at start {', '.join(_f(x) for x in m['loadavg_at_start'])}.",
        "",
        "### Open loop, GPU pod, /mutate (latency from the intended send time, ms)",
        "",
        "| offered req/s | floor p50 | floor p99 | gpu-webhook p50 | gpu-webhook p99 | gpu-webhook max | p99 ratio | client send lag p99 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for floor, ours in zip(r["open_loop"]["noop"], r["open_loop"]["gpu-webhook"], strict=True):
        lines.append(
            f"| {floor['offered_rps']} | {_f(floor['p50_ms'])} | {_f(floor['p99_ms'])} | {_f(ours['p50_ms'])} | "
            f"{_f(ours['p99_ms'])} | {_f(ours['max_ms'])} | {_f(ours['p99_ms'] / floor['p99_ms'])} | "
            f"{_f(ours['send_lag_p99_ms'])} |"
        )
    lines += [
        "",
        "### Closed loop, one worker each (16 keep-alive connections; wrk unless noted)",
        "",
        "| workload | floor req/s | gpu-webhook req/s | ratio | gpu-webhook p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, pair in r["closed_loop"].items():
        lines.append(
            f"| {key} | {pair['noop']['achieved_rps']:.0f} | {pair['gpu-webhook']['achieved_rps']:.0f} | "
            f"{_f(pair['ratio'])} | {_f(pair['gpu-webhook']['p99_ms'])} |"
        )
    s = r["scaling"]
    base = s["rules"]["5"]["achieved_rps"] if "5" in s["rules"] else s["rules"][5]["achieved_rps"]
    lines += [
        "",
        "### Scaling (closed loop, /validate unless noted)",
        "",
        "| case | req/s | relative |",
        "|---|---:|---:|",
    ]
    for total, stats in s["rules"].items():
        lines.append(
            f"| {total} rules, 5 match, GPU pod | {stats['achieved_rps']:.0f} | {_f(stats['achieved_rps'] / base)} of 5 rules |"
        )
    for containers, pair in s["containers"].items():
        lines.append(
            f"| default pack, {containers} containers (floor {pair['noop']['achieved_rps']:.0f}) | "
            f"{pair['gpu-webhook']['achieved_rps']:.0f} | {_f(pair['ratio'])} of floor |"
        )
    for workers, pair in s["workers"].items():
        lines.append(
            f"| {workers} worker(s), GPU pod /mutate (floor {pair['noop']['achieved_rps']:.0f}) | "
            f"{pair['gpu-webhook']['achieved_rps']:.0f} | {_f(pair['ratio'])} of floor |"
        )
    lines += [
        "",
        "### Server-side cost per request, no network (µs, best of 5 rounds)",
        "",
        "| workload | parse | evaluate (mutate) | serialise | mutate total | validate total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, c in r["micro"].items():
        lines.append(
            f"| {name} | {_f(c['parse'], 1)} | {_f(c['evaluate'], 1)} | {_f(c['serialise'], 1)} | "
            f"{_f(c['total'], 1)} | {_f(c['validate_total'], 1)} |"
        )
    shares = ", ".join(f"{k} {v * 100:.0f}%" for k, v in r["breakdown"].items())
    ms = r["micro_scaling"]
    lines += [
        "",
        f"evaluate() of a GPU pod by profile share (cProfile, both phases): {shares}.",
        "",
        "Micro scaling (µs per /validate request, no network): "
        + "rules (5 match) "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["rules"].items())
        + "; matching rules "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["matching"].items())
        + "; containers (default pack) "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["containers"].items())
        + ".",
        "",
        f"Peak RSS of gpu-webhook (default pack, after the open-loop runs): {r['rss_mib_default_pack']:.1f} MiB.",
    ]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    styles = {"noop": ("no-op floor", "tab:gray"), "gpu-webhook": ("gpu-webhook (default pack)", "tab:blue")}
    for kind, points in r["open_loop"].items():
        label, colour = styles[kind]
        rates = [p["offered_rps"] for p in points]
        axis.plot(rates, [p["p99_ms"] for p in points], "o-", color=colour, label=f"{label} p99")
        axis.plot(rates, [p["p50_ms"] for p in points], "s--", color=colour, alpha=0.6, label=f"{label} p50")
    axis.axhline(5.0, color="tab:red", linewidth=0.8, linestyle=":", label="p99 target 5 ms")
    axis.set_yscale("log")
    axis.set_xlabel("offered load (requests/s, open loop)")
    axis.set_ylabel("latency from intended send (ms, log)")
    axis.set_title(f"GPU pod /mutate, one worker, {r['machine']['nproc']}-CPU {r['machine']['cpu_model']}")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
