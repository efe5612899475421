"""What one changed GPUPolicyException costs the server's cache: `python -m bench.exception_cache`.

`--exceptions` (2,000) near-bound exceptions (each names 128 rules and 64 selector labels: what the
CRD lets through) spread over `--namespaces` (20) namespaces are fed to webhook.kube.caches.ExceptionCache
as its watch delivers them; then `--changes` label changes, one exception at a time, each timed (wall
and the thread's CPU) in two ways on the same process, alternating:

    incremental   the cache's watch-thread entry (`_apply`): the changed object parsed, its namespace's
                  tuple rebuilt
    reparse-all   every exception of every namespace parsed again (what a cache that re-parses all
                  of them on each change does; the server's request path then waited for it)

Prints per-change p50/p99 wall ms and mean CPU ms of each, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kubernetes import client

from webhook.engine import RuleLoadError, parse_exception
from webhook.kube.caches import ExceptionCache


def near_bound(index: int, namespace: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {
            "name": f"exception-{index:05d}",
            "namespace": namespace,
            "resourceVersion": str(version),
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"change": str(version)},
        },
        "spec": {
            "rules": [f"gpu-container-resources-{r:03d}" for r in range(128)],
            "match": {
                "kinds": ["Pod", "Deployment", "Job"],
                "objectSelector": {"matchLabels": {f"team.example.com/k{k:02d}": "v" * 63 for k in range(64)}},
            },
            "reason": "r" * 1024,
        },
    }


def reparse_all(cache: ExceptionCache) -> int:
    parsed = 0
    for namespace, objects in list(cache._items.items()):
        for name, obj in list(objects.items()):
            try:
                parse_exception(obj, f"GPUPolicyException/{namespace}/{name}")
                parsed += 1
            except RuleLoadError:
                pass
    return parsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exceptions", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--changes", type=int, default=20, help="changes timed per way (default 20)")
    args = parser.parse_args()
    cache = ExceptionCache(client.ApiClient(client.Configuration()), per_namespace=args.exceptions)
    objects = [near_bound(i, f"team-{i % args.namespaces:02d}", i + 1) for i in range(args.exceptions)]
    began = time.perf_counter()
    for obj in objects:
        cache._apply({"type": "ADDED", "object": obj})
    loaded = time.perf_counter() - began
    applied = sum(len(cache.of(f"team-{n:02d}")) for n in range(args.namespaces))
    assert applied == args.exceptions, applied
    version = args.exceptions + 1
    timings: dict[str, list[tuple[float, float]]] = {"incremental": [], "reparse-all": []}
    for change in range(args.changes):
        for way in ("incremental", "reparse-all") if change % 2 == 0 else ("reparse-all", "incremental"):
            version += 1
            obj = near_bound(
                change * 7 % args.exceptions, f"team-{change * 7 % args.exceptions % args.namespaces:02d}", version
            )
            wall, cpu = time.perf_counter(), time.thread_time()
            cache._apply({"type": "MODIFIED", "object": obj})
            if way == "reparse-all":
                assert reparse_all(cache) == args.exceptions
            timings[way].append(((time.perf_counter() - wall) * 1e3, (time.thread_time() - cpu) * 1e3))
    print(f"{args.exceptions} near-bound exceptions in {args.namespaces} namespaces, fed in {loaded:.1f} s")
    for way, rows in timings.items():
        walls = sorted(w for w, _ in rows)
        p99 = walls[min(len(walls) - 1, round(0.99 * (len(walls) - 1)))]
        print(
            f"{way:<12} per change: p50 {statistics.median(walls):.2f} ms, p99 {p99:.2f} ms, "
            f"CPU {statistics.mean(c for _, c in rows):.2f} ms"
        )
    wall = statistics.median(w for w, _ in timings["reparse-all"]) / statistics.median(
        w for w, _ in timings["incremental"]
    )
    cpu = statistics.mean(c for _, c in timings["reparse-all"]) / statistics.mean(c for _, c in timings["incremental"])
    print(f"reparse-all / incremental: {wall:.0f}x median wall, {cpu:.0f}x CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
