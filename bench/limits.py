"""What the collection limit costs and what it protects: the default pack on large objects, limited and not.

For each shape (a CPU Job with many arguments, a GPU pod with many labels, env entries or
containers) and size, the CPU time of one evaluate() with the default limits (no time budget, so
the size limit alone decides) against the same evaluate() with no size limit, best of
--repeat, and whether the limited run refused it. Ratios are within one run, on one machine:

    python -m bench.limits [--sizes 1200,5000,9000] [--repeat 3]

What it shows: shapes no rule maps or filters (arguments, labels) cost the pack linear time
unlimited and are admitted with the limit; shapes the pack's rules filter (containers) cost
seconds unlimited and are refused in milliseconds with it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.engine import AdmissionInput, Limits, evaluate, load_rules

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}},
}
GPU_CONTAINER = {"name": "train", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}


def cpu_job_arguments(n: int) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3.12", "args": [f"--p{i}" for i in range(n)]}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}}


def gpu_pod(n: int, labels: int = 0, env: int = 0, containers: int = 1) -> dict[str, Any]:
    container = dict(GPU_CONTAINER, env=[{"name": f"V{i}", "value": "x"} for i in range(env)])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {f"k{i}": "v" for i in range(labels)}},
        "spec": {"containers": [dict(container, name=f"c{i}") for i in range(containers)]},
    }


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "cpu Job, arguments": cpu_job_arguments,
    "gpu Pod, labels": lambda n: gpu_pod(n, labels=n),
    "gpu Pod, env entries": lambda n: gpu_pod(n, env=n),
    "gpu Pod, containers": lambda n: gpu_pod(n, containers=n),
}


def timed(ruleset: Any, obj: dict[str, Any], limits: Limits, repeat: int) -> tuple[float, bool]:
    best, refused = float("inf"), False
    for _ in range(repeat):
        admission = AdmissionInput.offline(obj, namespace="team-a", namespace_object=NAMESPACE)
        started = time.thread_time()
        decision = evaluate(ruleset, admission, limits=limits)
        best = min(best, time.thread_time() - started)
        refused = any("too large to evaluate" in e.message for e in decision.errors)
    return best, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1200,5000,9000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result = load_rules(REPO / "rules")
    assert result.ruleset is not None, result.errors
    limited, unlimited = Limits(time_budget=None), Limits(time_budget=None, max_collection=10**9)
    print(f"{'shape':24} {'items':>6} {'limited ms':>11} {'unlimited ms':>13} {'ratio':>7}  refused")
    for name, make in SHAPES.items():
        for size in (int(s) for s in args.sizes.split(",")):
            obj = make(size)
            with_limit, refused = timed(result.ruleset, obj, limited, args.repeat)
            without, _ = timed(result.ruleset, obj, unlimited, args.repeat)
            ratio = without / with_limit if with_limit else float("inf")
            print(f"{name:24} {size:6} {with_limit * 1000:11.1f} {without * 1000:13.1f} {ratio:7.1f}  {refused}")


if __name__ == "__main__":
    main()
