"""One test per bug the fuzzers found, each written before its fix."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support import cpu_pod, gpu_pod, make_review
from webhook.admission import ReviewError, parse_review
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.mark.parametrize("operation", [{"x": 1}, ["CREATE"]])
def test_unhashable_operation_is_a_400_not_a_crash(operation: object) -> None:
    review = make_review(cpu_pod())
    review["request"]["operation"] = operation
    with pytest.raises(ReviewError, match="request.operation must be one of"):
        parse_review(orjson.dumps(review))


@pytest.mark.parametrize("kind", [["Pod"], {"kind": "Pod"}, 7, None])
def test_object_kind_of_the_wrong_type_does_not_break_evaluation(kind: object) -> None:
    ruleset = load_rules(RULES).ruleset
    pod = gpu_pod()
    pod["kind"] = kind
    decision = evaluate(ruleset, AdmissionInput(object=pod, kind="Pod", namespace="team-a"), Phase.ALL)
    assert isinstance(decision.allowed, bool)
