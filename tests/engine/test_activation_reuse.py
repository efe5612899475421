"""An activation made before an edit serves later expressions only when they read nothing the edit wrote.

Mutations run in file order on one working copy, and each expression must see the edits of the
rules before it (as the apiserver's reinvocation would). The engine keeps one CEL activation per
state of the working copy, and reuses it across edits an expression cannot see (facts.reads_edited).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules

RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: a-team}
spec:
  match: {kinds: [Pod], operations: [CREATE], condition: "object.kind == 'Pod'"}
  mutate:
    - setLabels: {values: {team: a}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-tolerate}
spec:
  match: {kinds: [Pod], operations: [CREATE], condition: "object.kind == 'Pod'"}
  mutate:
    - addToleration: {key: example.com/gpu, operator: Exists, effect: NoSchedule}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: c-sees-team}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
    condition: "has(object.metadata.labels) && object.metadata.labels['team'] == 'a'"
  mutate:
    - setLabels: {values: {saw-team: "yes"}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: d-sees-toleration}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
    condition: "has(podSpec.tolerations) && podSpec.tolerations.exists(t, t.key == 'example.com/gpu')"
  mutate:
    - setLabels: {values: {saw-toleration: "yes"}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: e-sees-both}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
    condition: "object.metadata.labels['saw-toleration'] == 'yes' && object.kind == 'Pod'"
  mutate:
    - setLabels: {values: {saw-both: "yes"}}
"""


@pytest.fixture
def ruleset(tmp_path: Path) -> Any:
    (tmp_path / "rules.yaml").write_text(RULES)
    result = load_rules(tmp_path)
    assert result.ok and result.ruleset is not None, result.errors
    return result.ruleset


def test_each_expression_sees_the_edits_before_it(ruleset: Any) -> None:
    decision = evaluate(ruleset, AdmissionInput.offline(gpu_pod()), phase=Phase.MUTATE)
    assert decision.allowed and not decision.errors, decision.errors
    assert decision.mutated is not None
    labels = decision.mutated["metadata"]["labels"]
    assert labels == {"team": "a", "saw-team": "yes", "saw-toleration": "yes", "saw-both": "yes"}
    assert [op["path"] for op in decision.patch] == [
        "/metadata/labels",
        "/spec/tolerations",
        "/metadata/labels/saw-team",
        "/metadata/labels/saw-toleration",
        "/metadata/labels/saw-both",
    ]


def test_an_edit_nobody_reads_makes_no_new_activation(ruleset: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    original = ruleset.env.activation

    def counting(variables: Any) -> Any:
        made.append(1)
        return original(variables)

    monkeypatch.setattr(ruleset.env, "activation", counting)
    evaluate(ruleset, AdmissionInput.offline(gpu_pod()), phase=Phase.MUTATE)
    # one per state of the working copy would be 5. a's and b's conditions share the first (b reads
    # the kind, a edited labels); c reads labels (edited): a second, made after b's toleration, which
    # d's condition then shares (c edited labels only); e reads labels, edited by d: a third
    assert len(made) == 3
