"""The tally's counts per rule, folded from sequences of outcomes, against a plain count of the same results."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from webhook.audit import results as results_module
from webhook.audit.results import RESULTS, ObjectRef, ObjectResult, Tally
from webhook.engine import NO_NAMESPACE_CONTEXT, Result, RuleOutcome


def _results(count: int, seed: int) -> list[ObjectResult]:
    rng = random.Random(seed)
    made = []
    for index in range(count):
        outcomes = []
        for rule in rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 5)):
            result = rng.choice(list(Result))
            patch = ({"op": "add", "path": "/x", "value": 1},) if rng.random() < 0.3 else ()
            reason = NO_NAMESPACE_CONTEXT if result is Result.SKIP else ""
            outcomes.append(RuleOutcome(rule, result, patch=patch, blocks=result is Result.FAIL, reason=reason))
        patch = [op for o in outcomes for op in o.patch]
        ref = ObjectRef("v1", "Pod", rng.choice(["", "a", "b"]), f"p{index}")
        made.append(ObjectResult(ref, "x", rng.randint(0, 3), outcomes, patch, {}, None, ""))
    return made


def _plain(results: list[ObjectResult]) -> dict[str, dict[str, int]]:
    """Per rule: objects per result, patched objects, GPUs of the objects it did not pass."""
    rules: dict[str, Counter[str]] = {}
    for result in results:
        for outcome in result.outcomes:
            counts = rules.setdefault(outcome.rule, Counter())
            counts[outcome.result.value] += 1
            counts["patched"] += bool(outcome.patch)
            if outcome.result not in (Result.PASS, Result.SKIP):
                counts["gpusAffected"] += result.gpus
    return {
        name: {
            **{r.value: counts[r.value] for r in RESULTS},
            "patched": counts["patched"],
            "gpusAffected": counts["gpusAffected"],
        }
        for name, counts in sorted(rules.items())
    }


@pytest.mark.parametrize("limit", [1, 3, 1 << 12])
def test_rule_counts_match_a_plain_count(monkeypatch, limit):
    # a small limit folds the sequences into counts per rule while objects still arrive (memory stays bounded)
    monkeypatch.setattr(results_module, "_SIGNATURES", limit)
    made = _results(400, seed=limit)
    tally = Tally()
    for result in made:
        tally.add(result)
    assert limit > 3 or len(tally.signatures) <= limit + 1
    assert tally.as_dict()["rules"] == _plain(made)
    assert tally.as_dict()["patchedObjects"] == sum(bool(r.patch) for r in made)
