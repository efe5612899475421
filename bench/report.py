"""Turns one bench run's JSON into the markdown table and the latency-vs-load PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _f(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    load = ", ".join(_f(x) for x in m["loadavg_at_start"])
    lines = [
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}; event loop: {r['loop']}; "
        f"{'quick' if r['quick'] else 'full'} run; load average at start {load} "
        f"(end {', '.join(_f(x) for x in m.get('loadavg_at_end', []))}).",
    ]
    lines += _real_path(r)
    if "open_loop" not in r:  # --real-path-only
        return "\n".join(lines) + "\n"
    lines += [
        "### Open loop: GPU pod, /mutate, one worker (latency from the intended send time, ms)",
        "",
        "| offered req/s | floor p50 | floor p99 | gpu-webhook p50 | gpu-webhook p99 | gpu-webhook max "
        "| p99 ratio | client send lag p99 (floor / ours) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for floor, ours in zip(r["open_loop"]["noop"], r["open_loop"]["gpu-webhook"], strict=True):
        lines.append(
            f"| {floor['offered_rps']} | {_f(floor['p50_ms'])} | {_f(floor['p99_ms'])} | {_f(ours['p50_ms'])} | "
            f"{_f(ours['p99_ms'])} | {_f(ours['max_ms'])} | {_f(ours['p99_ms'] / floor['p99_ms'])} | "
            f"{_f(floor['send_lag_p99_ms'])} / {_f(ours['send_lag_p99_ms'])} |"
        )
    lines += [
        "",
        "### Closed loop: max requests/s, one worker each (16 keep-alive connections; wrk unless noted)",
        "",
        "| workload | floor req/s | gpu-webhook req/s | ratio | floor p99 ms | gpu-webhook p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, pair in r["closed_loop"].items():
        lines.append(_pair_row(key, pair))
    s = r["scaling"]
    lines += ["", "### Containers per pod (default pack, closed loop)", "", *_pair_header()]
    for key, pair in s["containers"].items():
        count, endpoint = key.split(" ", 1)
        lines.append(_pair_row(f"{count} container(s), {endpoint}", pair))
    lines += ["", "### Worker processes (GPU pod /mutate, closed loop, wrk threads = workers)", "", *_pair_header()]
    for workers, pair in s["workers"].items():
        lines.append(_pair_row(f"{workers} worker(s)", pair))
    base = next(iter(s["rules"].values()))["achieved_rps"]
    lines += [
        "",
        "### Rules in the set (GPU pod /validate, 5 of them match, closed loop)",
        "",
        "| rules | req/s | relative to 5 rules |",
        "|---:|---:|---:|",
    ]
    for total, stats in s["rules"].items():
        lines.append(f"| {total} | {stats['achieved_rps']:.0f} | {_f(stats['achieved_rps'] / base)} |")
    if r.get("profile"):
        parts = next(iter(r["profile"].values())).get("shares", {}).keys()
        lines += [
            "",
            "### Where a server's time goes under load (py-spy samples while wrk drives it; µs per request)",
            "",
            "| part | " + " | ".join(r["profile"]) + " |",
            "|---|" + "---:|" * len(r["profile"]),
        ]
        for part in parts:
            cells = []
            for sampled in r["profile"].values():
                share = sampled.get("shares", {}).get(part, 0.0)
                per_request = 1e6 / sampled["load"]["achieved_rps"] * share
                cells.append(f"{per_request:.1f} ({share * 100:.0f}%)")
            lines.append(f"| {part} | " + " | ".join(cells) + " |")
        lines.append(
            "| total per request (1 / req/s) | "
            + " | ".join(f"{1e6 / s['load']['achieved_rps']:.1f}" for s in r["profile"].values())
            + " |"
        )
    lines += [
        "",
        "### Server-side cost per request, no network (µs, best of 5 rounds)",
        "",
        "| workload | parse | evaluate (mutate) | serialise | /mutate total | /validate total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, c in r["micro"].items():
        lines.append(
            f"| {name} | {_f(c['parse'], 1)} | {_f(c['evaluate'], 1)} | {_f(c['serialise'], 1)} | "
            f"{_f(c['total'], 1)} | {_f(c['validate_total'], 1)} |"
        )
    lines.append("")
    for name, shares in r["breakdown"].items():
        parts = ", ".join(f"{k} {v * 100:.0f}%" for k, v in shares.items())
        lines.append(f"evaluate() of {name}, both phases, own time by module (cProfile): {parts}.  ")
    ms = r["micro_scaling"]
    lines += [
        "",
        "Micro scaling, µs per /validate request without network: rules in the set (5 match) "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["rules"].items())
        + "; matching rules "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["matching"].items())
        + "; containers (default pack) "
        + ", ".join(f"{k}: {_f(v, 1)}" for k, v in ms["containers"].items())
        + ".",
        "",
        f"Peak RSS (VmHWM) after all one-worker runs: gpu-webhook {r['rss_mib_default_pack']:.1f} MiB "
        f"(default pack), floor {r['rss_mib_floor']:.1f} MiB.",
    ]
    return "\n".join(lines) + "\n"


def _real_path(r: dict[str, Any]) -> list[str]:
    """The handler-time histogram's mean and p99 per endpoint: what the apiserver waits on, minus the network."""
    found = r.get("real_path")
    if not found:
        return [""]
    lines = [
        "",
        "### A real pod create: the server's handler time (gpu_webhook_request_duration_seconds, ms)",
        "",
        "Apiserver-shaped GPU pod (defaulted, managedFields, userInfo; the validating phase's object after the "
        "registry), namespace cache on; one worker pinned to one CPU under a closed loop, best repeat by mean. "
        "Compare with apiserver_admission_webhook_admission_duration_seconds (docs/performance.md).",
        "",
        "| server | /mutate mean | /mutate p99 | /validate mean | /validate p99 | create (both, mean) "
        "| create, process CPU | /mutate req/s | /validate req/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, figures in found.items():
        mutate, validate = figures["mutate"], figures["validate"]
        lines.append(
            f"| {name} | {_f(mutate['mean_ms'], 3)} | {_f(mutate['p99_ms'], 3)} | {_f(validate['mean_ms'], 3)} | "
            f"{_f(validate['p99_ms'], 3)} | {_f(figures['create_mean_ms'], 3)} | {_f(figures['create_cpu_ms'], 3)} | "
            f"{mutate['achieved_rps']:.0f} | "
            f"{validate['achieved_rps']:.0f} |"
        )
    for new, old, where in (("after", "before", f" (before = {r.get('before')})"), ("uvloop", "asyncio", "")):
        if new in found and old in found:
            ratio = found[new]["create_mean_ms"] / found[old]["create_mean_ms"]
            cpu = found[new]["create_cpu_ms"] / found[old]["create_cpu_ms"]
            lines += [
                "",
                f"{new} / {old}: mean handler time {_f(ratio)}, process CPU per create {_f(cpu)}{where}.",
            ]
    return [*lines, ""]


def _pair_header() -> list[str]:
    return [
        "| case | floor req/s | gpu-webhook req/s | ratio | floor p99 ms | gpu-webhook p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]


def _pair_row(label: str, pair: dict[str, Any]) -> str:
    noop, ours = pair["noop"], pair["gpu-webhook"]
    return (
        f"| {label} | {noop['achieved_rps']:.0f} | {ours['achieved_rps']:.0f} | {_f(pair['ratio'])} | "
        f"{_f(noop['p99_ms'])} | {_f(ours['p99_ms'])} |"
    )


def plot(r: dict[str, Any], path: Path) -> bool:
    """The latency-vs-load PNG; False when matplotlib (the `bench` extra) is not installed."""
    try:
        import matplotlib
        import matplotlib.ticker
    except ImportError:
        return False

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
    axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.set_xlabel("offered load (requests/s, open loop)")
    axis.set_ylabel("latency from intended send (ms, log)")
    axis.set_title(f"GPU pod /mutate, one worker, {r['machine']['nproc']}-CPU {r['machine']['cpu_model']}")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True
