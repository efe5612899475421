"""Each expression sees the edits of the mutations before it, whatever it reads: labels, pod-spec fields.

Mutations run in file order on one working copy, and the engine keeps one CEL activation per
state of the working copy (programs.Programs): an activation made before an edit must never answer
an expression that reads what the edit wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, Phase, evaluate

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
    return load_rule_text(tmp_path, RULES)


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

