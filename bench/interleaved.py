"""Configurations of one operation timed in turns, and their medians as ratios to a baseline.

Each round runs every configuration once (warm call, then `iterations` timed calls), so a noisy
neighbour on the shared machine slows all of them alike; the ratios are what to read."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def time_in_turns(runs: Mapping[str, Callable[[], None]], rounds: int, iterations: int) -> dict[str, list[float]]:
    """Microseconds per call of each configuration, one figure per round."""
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, once in runs.items():
            once()  # warm
            started = time.perf_counter()
            for _ in range(iterations):
                once()
            timings[name].append((time.perf_counter() - started) / iterations * 1e6)
    return timings


def print_ratios(timings: Mapping[str, list[float]], baseline: str) -> None:
    """A table of each configuration's median and its ratio to `baseline`'s median."""
    base = statistics.median(timings[baseline])
    width = max(len("configuration"), *(len(name) for name in timings)) + 2
    ratio = f"/ {baseline}"
    print(f"{'configuration':<{width}} {'median us':>10} {ratio:>{max(len(ratio), 8)}}")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:<{width}} {median:>10.1f} {median / base:>{max(len(ratio), 8)}.2f}")
