"""The working copy is copied on write (patch.py): edits never reach the object as received, nor a rule's params.

The mutating phase no longer deep-copies the object before its first edit; the Patcher copies the
maps and lists on an edit's path instead. What must hold: the received object is unchanged (the
audit diffs it against Decision.mutated, ratcheting and Decision.accelerators read it), the patch
replays on it to exactly Decision.mutated, and a value a mutation wrote from a rule's params is
never edited in place by a later mutation (the next request would see it changed).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.support import RULES, gpu_pod
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules
from webhook.engine.patch import Patcher

NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": "team-a",
        "uid": "u-1",
        "resourceVersion": "3",
        "labels": {"gpu-webhook.io/tenant": "true", "team": "a", "environment": "production"},
    },
}


def _job() -> dict[str, Any]:
    pod = gpu_pod(name="t")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"template": {"metadata": {"labels": {"app": "t"}}, "spec": pod["spec"]}},
    }


@pytest.mark.parametrize("make", [lambda: gpu_pod(name="p", gpus=2), _job])
def test_the_received_object_is_left_as_it_was(make: Any) -> None:
    ruleset = load_rules([str(RULES)]).ruleset
    assert ruleset is not None
    received = make()
    received["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    before = copy.deepcopy(received)
    admission = AdmissionInput.offline(received, namespace="team-a", namespace_object=NAMESPACE)
    decision = evaluate(ruleset, admission, phase=Phase.ALL)
    assert decision.patch, "the pack edits this object"
    assert received == before
    assert jsonpatch.apply_patch(before, decision.patch) == decision.mutated


def test_a_value_from_params_is_copied_before_a_later_edit(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: a-base-tolerations}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - merge: {spec: {tolerations: [{key: example.com/base, operator: Exists}]}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-gpu-toleration}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - addToleration: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""
    )
    ruleset = load_rules(tmp_path).ruleset
    assert ruleset is not None
    first = evaluate(ruleset, AdmissionInput.offline(gpu_pod()), phase=Phase.MUTATE)
    second = evaluate(ruleset, AdmissionInput.offline(gpu_pod()), phase=Phase.MUTATE)
    assert first.patch == second.patch  # the merge's list is the rule's, not the first request's
    assert second.patch[0] == {
        "op": "add",
        "path": "/spec/tolerations",
        "value": [{"key": "example.com/base", "operator": "Exists"}],
    }
    assert second.mutated is not None
    assert len(second.mutated["spec"]["tolerations"]) == 2


def test_the_patcher_copies_only_what_it_edits() -> None:
    shared = {"name": "c", "env": [{"name": "A", "value": "1"}]}
    received = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [shared], "volumes": [{"name": "v"}]}}
    before = copy.deepcopy(received)
    patcher = Patcher(dict(received))
    patcher.append(("spec", "containers", 0, "env"), {"name": "B", "value": "2"})
    patcher.set(("metadata", "labels", "b"), "2")
    patcher.remove(("metadata", "labels", "a"))
    assert received == before  # nothing of the received object changed
    working = patcher.document
    assert working["spec"]["volumes"] is received["spec"]["volumes"]  # untouched: still shared
    assert working["spec"]["containers"][0] is not shared
    assert working == jsonpatch.apply_patch(before, patcher.operations)
    assert working["metadata"]["labels"] == {"b": "2"}
