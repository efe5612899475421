"""Server-side cost per request without the network: the handler body, its stages, and how it scales.

- `handler_costs`: µs of thread CPU per request of `decide()`, the server's handler body (parse,
  namespace context, evaluate, serialise, log/metric bookkeeping), per endpoint and per create
  (/mutate + /validate), on the apiserver-shaped reviews with the tenant Namespace.
- `cold_handler_costs`: the same with the CPU caches evicted before each call (the apiserver's
  path: other processes run between two requests on the same cores).
- `stage_costs`: parse, evaluate and serialise timed apart.
- `evaluate_breakdown`: evaluate()'s own time by engine module, from cProfile.
- `scaling`: /validate cost against rules in the set, matching rules and containers per pod.

Run alone, `python -m bench.micro [--iterations N]` prints all of it for the default pack;
`python -m bench.run` puts the same figures in its report.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.reviews import bodies, namespace, write_generated_rules
from webhook.engine import ClusterContext, Limits, Mode, Phase, RuleSet, evaluate, load_rules
from webhook.review import build_response, parse_review
from webhook.server.context import Snapshot
from webhook.server.sequence import DecideConfig, Problem, decide

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RULES = REPO / "rules"


def load(paths: list[str]) -> RuleSet:
    result = load_rules(paths)
    if result.ruleset is None or not result.ok:
        raise SystemExit(f"rules failed to load: {result.errors}")
    return result.ruleset


def _best_of(fn: Callable[[], Any], iterations: int, repeats: int = 5) -> float:
    """CPU microseconds per call, the best of `repeats` rounds (the least disturbed by neighbours).

    The thread's CPU time, not the wall clock: on a shared machine the wall clock also counts
    the time the scheduler gave to other processes, which says nothing about this code.
    """
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(iterations):
            fn()
        best = min(best, time.thread_time() - start)
    return best / iterations * 1e6


def handler_costs(ruleset: RuleSet, workload: str, iterations: int = 2000) -> dict[str, float]:
    """µs per request of the server's handler body, per endpoint: the admission sequence (decide()).

    Parse, the namespace context (the tenant Namespace as the watch cache holds it, unless the
    workload is a plain- one, which runs without), evaluate, serialise and the log/metric
    bookkeeping; what the server's handler-time histogram measures minus aiohttp's own work.
    "both" is a pod create: one /mutate and one /validate call.
    """
    plain = workload.startswith("plain-")
    # as the watch caches fill it: the Namespace, no PriorityClasses, no DRA claims in the namespace
    cluster = ClusterContext() if plain else ClusterContext({}, {}, {})
    context = Snapshot("team-a", None if plain else namespace(), cluster)
    out: dict[str, float] = {}
    for endpoint, phase in (("mutate", Phase.MUTATE), ("validate", Phase.VALIDATE)):
        config = DecideConfig(phase, Mode.ENFORCE, Limits())
        body = bodies(workload, endpoint)[0]
        first = decide(ruleset, config, body, endpoint, lambda _review: context)
        if isinstance(first, Problem) or first.rule_errors or first.outcome == "error":
            raise RuntimeError(f"{workload} /{endpoint} did not evaluate cleanly: {first}")
        out[endpoint] = _best_of(
            lambda c=config, b=body, e=endpoint: decide(ruleset, c, b, e, lambda _review: context), iterations
        )
    out["both"] = out["mutate"] + out["validate"]
    return out


EVICT_BYTES = 16 * 1024 * 1024  # larger than this machine's last-level cache share


def cold_handler_costs(ruleset: RuleSet, workload: str, iterations: int = 300) -> dict[str, float]:
    """µs of thread CPU per call of decide() when the CPU caches are cold, as through the apiserver:
    there the apiserver, etcd and the client run between two requests on the same cores. Before
    every call a 16 MiB buffer is written through (outside the timed part); the median of the
    calls. Against handler_costs' warm figure it says what the caches are worth per request."""
    context = Snapshot("team-a", namespace(), ClusterContext({}, {}, {}))
    evict = bytearray(EVICT_BYTES)
    fills = (bytes(EVICT_BYTES), b"\xff" * EVICT_BYTES)
    out: dict[str, float] = {}
    for endpoint, phase in (("mutate", Phase.MUTATE), ("validate", Phase.VALIDATE)):
        config = DecideConfig(phase, Mode.ENFORCE, Limits())
        body = bodies(workload, endpoint)[0]
        samples = []
        for round_ in range(iterations):
            evict[:] = fills[round_ % 2]  # a memcpy through every cache line of the buffer
            start = time.thread_time()
            decide(ruleset, config, body, endpoint, lambda _review: context)
            samples.append(time.thread_time() - start)
        out[endpoint] = sorted(samples)[len(samples) // 2] * 1e6
    out["both"] = out["mutate"] + out["validate"]
    return out


def stage_costs(ruleset: RuleSet, body: bytes, iterations: int = 2000) -> dict[str, float]:
    """µs per request for each stage of the mutate endpoint (the heavier of the two)."""
    review = parse_review(body)
    decision = evaluate(ruleset, review.to_input(), phase=Phase.MUTATE, trace=False)
    for check in (decision, evaluate(ruleset, review.to_input(), phase=Phase.VALIDATE, trace=False)):
        if check.errors:  # a rule that errors is fast and wrong: never time that
            raise RuntimeError(f"rules failed to evaluate: {check.errors}")

    def whole() -> None:
        r = parse_review(body)
        d = evaluate(ruleset, r.to_input(), phase=Phase.MUTATE, trace=False)
        build_response(r.uid, d, True)

    return {
        "parse": _best_of(lambda: parse_review(body), iterations),
        "evaluate": _best_of(lambda: evaluate(ruleset, review.to_input(), phase=Phase.MUTATE, trace=False), iterations),
        "serialise": _best_of(lambda: build_response(review.uid, decision, True), iterations),
        "total": _best_of(whole, iterations),
        "validate_total": _best_of(
            lambda: build_response(
                review.uid, evaluate(ruleset, parse_review(body).to_input(), phase=Phase.VALIDATE, trace=False), False
            ),
            iterations,
        ),
    }


def _part(filename: str, name: str) -> str:
    """The part a profiled function's own time belongs to: its engine module, or what it calls into."""
    if "/webhook/" in filename:
        return filename.rsplit("/webhook/", 1)[1]
    if "cel_expr_python" in name:
        return "CEL runtime (C++)"
    if filename == "~":
        return "builtins, orjson and C methods"
    return "other Python"


def evaluate_breakdown(ruleset: RuleSet, body: bytes, iterations: int = 2000, top: int = 8) -> dict[str, float]:
    """Shares of evaluate()'s time (mutate + validate phases) by where it is spent, from cProfile.

    Each function's own time (not its callees') goes to its module under webhook/ (engine/facts.py,
    engine/evaluate.py, ...), to the CEL runtime for cel_expr_python's calls, or to builtins; the
    `top` largest parts are named and the rest is "other". Grouped by file, not by function name,
    so the parts follow the code as it is; cProfile's own overhead weighs on Python code more than
    on C calls, so read the shares as an order, not as exact fractions.
    """
    review = parse_review(body)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(iterations):
        evaluate(ruleset, review.to_input(), phase=Phase.MUTATE, trace=False)
        evaluate(ruleset, review.to_input(), phase=Phase.VALIDATE, trace=False)
    profile.disable()
    stats = pstats.Stats(profile)
    parts: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, own, _cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "_lsprof" in name:  # the profiler's own disable()
            continue
        part = _part(filename, name)
        parts[part] = parts.get(part, 0.0) + own
    total = sum(parts.values())
    if not total:
        return {}
    ranked = sorted(parts.items(), key=lambda item: -item[1])
    shares = {part: seconds / total for part, seconds in ranked[:top]}
    rest = sum(seconds for _, seconds in ranked[top:])
    if rest:
        shares["other"] = rest / total
    return shares


def scaling(quick: bool = False) -> dict[str, Any]:
    """µs per evaluate-only request across rule-set sizes, matching rules and containers."""
    iterations = 300 if quick else 1000
    out: dict[str, Any] = {"rules": {}, "matching": {}, "containers": {}}
    gpu_pod = bodies("gpu-pod")[0]
    with tempfile.TemporaryDirectory() as tmp:
        for total in (5, 10, 100, 1000):
            ruleset = load([str(write_generated_rules(Path(tmp) / f"r{total}", total, min(5, total)))])
            out["rules"][total] = stage_costs(ruleset, gpu_pod, iterations)["validate_total"]
        for matching in (0, 1, 5, 20):
            ruleset = load([str(write_generated_rules(Path(tmp) / f"m{matching}", max(matching, 20), matching))])
            out["matching"][matching] = stage_costs(ruleset, gpu_pod, iterations)["validate_total"]
    default = load([str(DEFAULT_RULES)])
    for containers, workload in ((1, "gpu-pod"), (10, "gpu-pod-10c"), (50, "gpu-pod-50c")):
        out["containers"][containers] = stage_costs(default, bodies(workload)[0], max(50, iterations // containers))[
            "validate_total"
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=2000, help="calls per timed round (5 rounds, best kept)")
    iterations = parser.parse_args().iterations
    ruleset = load([str(DEFAULT_RULES)])
    print("handler body per endpoint, µs (apiserver-shaped reviews with their Namespace; plain- as users write them)")
    for workload in ("gpu-pod", "cpu-pod", "gpu-pod-10c", "job", "plain-gpu-pod"):
        costs = handler_costs(ruleset, workload, iterations)
        print(f"  {workload:14}", {k: round(v, 1) for k, v in costs.items()})
    cold = cold_handler_costs(ruleset, "gpu-pod", min(iterations, 300))
    print("  gpu-pod, caches evicted before each call (median):", {k: round(v, 1) for k, v in cold.items()})
    print("stages of /mutate, and /validate whole, µs")
    for workload in ("gpu-pod", "cpu-pod", "gpu-pod-10c", "job", "pytorchjob"):
        costs = stage_costs(ruleset, bodies(workload)[0], iterations)
        print(f"  {workload:14}", {k: round(v, 1) for k, v in costs.items()})
    shares = evaluate_breakdown(ruleset, bodies("gpu-pod")[0], iterations)
    print("evaluate() of gpu-pod, own time by module:", ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    for axis, points in scaling(quick=iterations < 1000).items():
        print(f"/validate µs by {axis}:", ", ".join(f"{n}: {us:.1f}" for n, us in points.items()))


if __name__ == "__main__":
    main()
