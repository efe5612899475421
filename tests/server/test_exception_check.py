"""The /policies check of a GPUPolicyException says what lint says, at the cost of the exception alone
(webhook/policies/admission.py `exception_check`; `problems` is the full lint of the rule files and objects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine import load_rules
from webhook.kube.policyobjects import summary
from webhook.policies.admission import exception_check, problems

RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: gpu-container-resources}
spec:
  match: {kinds: [Pod]}
  validate: {expression: "true", message: never}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: no-privileged-in-tenants}
spec:
  exceptable: false
  match: {kinds: [Pod]}
  validate: {expression: "true", message: never}
"""


def exception(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": "e", "namespace": "team-a", "uid": "u1"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (exception(rules=["gpu-container-resources"], reason="ok"), ""),
        (exception(rules=["gpu-container-resourcez"], reason="typo"), "did you mean 'gpu-container-resources'?"),
        (exception(rules=["no-privileged-in-tenants"], reason="no"), "cannot be excepted (spec.exceptable: false)"),
        (exception(rules=[], reason="none"), "spec.rules: [] should be non-empty"),
        (exception(rules=["gpu-container-resources"]), "spec: 'reason' is a required field"),
        (exception(rules=["gpu-container-resources"], reason="x", expires="tomorrow"), "is not an RFC 3339 time"),
        (exception(rules=[f"r-{i}" for i in range(129)], reason="x"), "is too long"),
    ],
)
def test_the_exception_check_says_what_lint_says(tmp_path: Path, obj: dict[str, Any], expected: str) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    ruleset = load_rules([str(tmp_path)]).ruleset
    assert ruleset is not None
    fast = summary(exception_check(obj, {rule.name: rule.exceptable for rule in ruleset.rules}))
    assert fast == summary(problems(obj, [str(tmp_path)], []))
    assert expected in fast if expected else fast == ""
