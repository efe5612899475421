"""The server's own handler time per endpoint, read from its /metrics histogram.

`gpu_webhook_request_duration_seconds` times each admission request from the handler's start
to the answer's bytes (parse, namespace context, evaluate, serialise, bookkeeping): the part of
the apiserver's `apiserver_admission_webhook_admission_duration_seconds` that this process
spends, without TLS, HTTP and the network. Two scrapes around a load give that load's mean
(sum / count) and p99 (interpolated within its bucket, as PromQL's histogram_quantile does).
"""

from __future__ import annotations

import os
import re
import urllib.request
from dataclasses import dataclass, field

METRIC = "gpu_webhook_request_duration_seconds"
_LINE = re.compile(rf"^{METRIC}_(bucket|sum|count)\{{([^}}]*)\}} ([0-9.eE+-]+|\+Inf)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count
    total: float = 0.0
    count: float = 0.0


def scrape(port: int) -> dict[str, Histogram]:
    """Endpoint -> its histogram, summed over the decision label."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, Histogram] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        part, labels, value = match.groups()
        label = dict(_LABEL.findall(labels))
        histogram = found.setdefault(label.get("endpoint", ""), Histogram())
        if part == "bucket":
            bound = float("inf") if label["le"] == "+Inf" else float(label["le"])
            histogram.buckets[bound] = histogram.buckets.get(bound, 0.0) + float(value)
        elif part == "sum":
            histogram.total += float(value)
        else:
            histogram.count += float(value)
    return found


def between(before: Histogram | None, after: Histogram) -> Histogram:
    before = before or Histogram()
    return Histogram(
        {bound: count - before.buckets.get(bound, 0.0) for bound, count in after.buckets.items()},
        after.total - before.total,
        after.count - before.count,
    )


def quantile(histogram: Histogram, q: float) -> float:
    """Seconds at quantile q, linear within the bucket (histogram_quantile's estimate)."""
    if histogram.count <= 0:
        return float("nan")
    rank = q * histogram.count
    lower, below = 0.0, 0.0
    for bound in sorted(histogram.buckets):
        cumulative = histogram.buckets[bound]
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, cumulative
    return lower


def summary(before: dict[str, Histogram], after: dict[str, Histogram], endpoint: str) -> dict[str, float]:
    """Mean and p99 in ms of the requests to `endpoint` between two scrapes."""
    delta = between(before.get(endpoint), after[endpoint])
    mean = delta.total / delta.count if delta.count else float("nan")
    return {"requests": delta.count, "mean_ms": mean * 1e3, "p99_ms": quantile(delta, 0.99) * 1e3}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat utime and stime)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
