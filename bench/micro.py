"""Server-side cost per request without the network: parse -> evaluate -> serialise.

Direct timers give the three stages; a cProfile pass splits evaluate() further into
match, CEL, patch and the rest by the module each function lives in. Run alone:
`python -m bench.micro` prints the table for the default pack.
"""

from __future__ import annotations

import cProfile
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.reviews import bodies, write_generated_rules
from webhook.admission import build_response, parse_review
from webhook.engine import Phase, RuleSet, evaluate, load_rules

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RULES = REPO / "rules"


def load(paths: list[str]) -> RuleSet:
    result = load_rules(paths)
    if result.ruleset is None or not result.ok:
        raise SystemExit(f"rules failed to load: {result.errors}")
    return result.ruleset


def _best_of(fn: Callable[[], Any], iterations: int, repeats: int = 5) -> float:
    """Microseconds per call, the best of `repeats` rounds (the least disturbed by neighbours)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / iterations * 1e6


def stage_costs(ruleset: RuleSet, body: bytes, iterations: int = 2000) -> dict[str, float]:
    """µs per request for each stage of the mutate endpoint (the heavier of the two)."""
    review = parse_review(body)
    decision = evaluate(ruleset, review.to_input(), phase=Phase.MUTATE, trace=False)

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


# Which part of the engine a profiled function belongs to, by its file and name.
def _category(filename: str, name: str) -> str:
    if "cel_expr_python" in filename or name in ("eval", "plain_value", "Activation", "type", "value"):
        return "cel"
    if filename.endswith(("patch.py", "mutate.py", "pointer.py")) or name == "dumps" or name == "loads":
        return "patch"
    if filename.endswith(("workloads.py", "resources.py", "quantity.py", "model.py")) or name in (
        "_mismatch",
        "_match",
        "_gpus",
        "targets",
        "_object_selected",
        "candidates",
    ):
        return "match"
    if filename.endswith("evaluate.py") and name in ("_activation", "_containers", "_at", "_evaluate", "evaluate"):
        return "cel" if name in ("_activation", "_evaluate") else "engine"
    return "engine"


def evaluate_breakdown(ruleset: RuleSet, body: bytes, iterations: int = 2000) -> dict[str, float]:
    """Share of evaluate()'s own profiled time per category (fractions summing to 1)."""
    review = parse_review(body)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(iterations):
        evaluate(ruleset, review.to_input(), phase=Phase.MUTATE, trace=False)
        evaluate(ruleset, review.to_input(), phase=Phase.VALIDATE, trace=False)
    profile.disable()
    stats = pstats.Stats(profile)
    shares: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        category = _category(filename, name)
        shares[category] = shares.get(category, 0.0) + tottime
    total = sum(shares.values()) or 1.0
    return {key: value / total for key, value in sorted(shares.items())}


def scaling(quick: bool = False) -> dict[str, Any]:
    """µs per evaluate-only request across rule-set sizes, matching rules and containers."""
    iterations = 300 if quick else 1000
    out: dict[str, Any] = {"rules": {}, "matching": {}, "containers": {}}
    gpu_pod = bodies("gpu-pod")[0]
    with tempfile.TemporaryDirectory() as tmp:
        for total in (5, 10, 100, 1000):
            ruleset = load([str(write_generated_rules(Path(tmp) / f"r{total}", total, min(5, total)))])
            out["rules"][total] = stage_costs(ruleset, gpu_pod, iterations)["total"]
        for matching in (0, 1, 5, 20):
            ruleset = load([str(write_generated_rules(Path(tmp) / f"m{matching}", max(matching, 20), matching))])
            out["matching"][matching] = stage_costs(ruleset, gpu_pod, iterations)["total"]
    default = load([str(DEFAULT_RULES)])
    for containers, workload in ((1, "gpu-pod"), (10, "gpu-pod-10c"), (50, "gpu-pod-50c")):
        out["containers"][containers] = stage_costs(default, bodies(workload)[0], max(50, iterations // containers))[
            "total"
        ]
    return out


def main() -> None:
    ruleset = load([str(DEFAULT_RULES)])
    for workload in ("gpu-pod", "cpu-pod", "gpu-pod-10c", "job", "pytorchjob"):
        costs = stage_costs(ruleset, bodies(workload)[0])
        print(workload, {k: round(v, 1) for k, v in costs.items()})
    print(
        "evaluate breakdown (gpu-pod):",
        {k: round(v, 2) for k, v in evaluate_breakdown(ruleset, bodies("gpu-pod")[0]).items()},
    )
    print(scaling(quick=True))


if __name__ == "__main__":
    main()
