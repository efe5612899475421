"""The collection limit through the handler body: the request body's commas settle small objects,
and never hide a large one (webhook.server.sequence, engine/limits.py).

Every collection of n items in JSON text has n - 1 commas, so a body with fewer commas than the
limit cannot hold a collection over it; a body with more is measured on the object itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support import gpu_pod, make_review
from webhook.engine import Limits, Mode, Phase, load_rules
from webhook.server.context import Snapshot
from webhook.server.sequence import DecideConfig, Decided, decide

RULES = Path(__file__).resolve().parents[2] / "rules"
LIMITS = Limits(time_budget=None, max_collection=1000)


@pytest.fixture(scope="module")
def ruleset() -> Any:
    result = load_rules(RULES)
    assert result.ruleset is not None, result.errors
    return result.ruleset


def _validate(ruleset: Any, review: dict[str, Any]) -> dict[str, Any]:
    config = DecideConfig(Phase.VALIDATE, Mode.ENFORCE, LIMITS)
    context = Snapshot("team-a", None)
    found = decide(ruleset, config, orjson.dumps(review), "validate", lambda _review: context)
    assert isinstance(found, Decided)
    response: dict[str, Any] = orjson.loads(found.answer)["response"]
    return response


def _with_env(items: int) -> dict[str, Any]:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": f"V{i}", "value": "x"} for i in range(items)]
    return pod


def _with_containers(items: int) -> dict[str, Any]:
    pod = gpu_pod()
    pod["spec"]["containers"] = [dict(pod["spec"]["containers"][0], name=f"c{i}") for i in range(items)]
    return pod


def test_an_object_over_the_limit_is_refused_through_the_body_path(ruleset: Any) -> None:
    # the pack's container rules filter the containers (a list of env entries no rule filters is not refused)
    response = _validate(ruleset, make_review(_with_containers(1200)))
    assert response["allowed"] is False
    assert "too large to evaluate" in response["status"]["message"]


def test_an_object_under_the_limit_in_a_body_with_many_commas_is_measured_not_refused(ruleset: Any) -> None:
    # an UPDATE whose old object is large: the body's commas are past the limit, the object's are not
    small = gpu_pod()
    response = _validate(ruleset, make_review(small, operation="UPDATE", old=_with_env(1200)))
    assert "too large" not in response.get("status", {}).get("message", "")
    # commas inside strings count in the body, never as items
    commented = gpu_pod()
    commented["metadata"]["annotations"] = {"note": "," * 5000}
    response = _validate(ruleset, make_review(commented))
    assert "too large" not in response.get("status", {}).get("message", "")


def test_a_small_object_is_decided_as_before(ruleset: Any) -> None:
    response = _validate(ruleset, make_review(_with_env(10)))
    assert "too large" not in response.get("status", {}).get("message", "")
