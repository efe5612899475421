"""Ratcheting on UPDATE for a site's own rules: a rule with an objectSelector, a rule that reads the object
whole, and the fields the registration's `rule-inputs-changed` matchCondition compares.

Model: Kubernetes ratchets CRD validation on UPDATE (KEP-4008; kubernetes/kubernetes staging/src/
k8s.io/apiextensions-apiserver/pkg/apiserver/validation/ratcheting.go): what the update did not change
is not re-checked. A label is an input of every objectSelector rule: `kubectl label pod p tier=prod` is
a label-only UPDATE, and a prod-only rule must judge it.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from webhook.engine import AdmissionInput, RuleSet, evaluate
from webhook.engine.loader import compile_documents
from webhook.engine.ratcheting import rule_inputs, unchanged
from webhook.engine.workloads import Target
from webhook.install.registration import top_level, watched_fields
from webhook.kubeyaml import load_documents

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {}}}
SITE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: prod-needs-class}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE], objectSelector: {matchLabels: {tier: prod}}}
  validate: {expression: "has(podSpec.priorityClassName)", message: "prod pods need a priority class"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: no-break-glass}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: "!object.metadata.exists(k, k == 'annotations') || !('break-glass' in object.metadata.annotations)"
    message: "no break-glass annotation"
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: small-status}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate: {expression: "!('status' in object) || size(object.status) < 3", message: "status too big"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: cost-annotation}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: >-
      !has(object.metadata.annotations) || !('example.com/cost' in object.metadata.annotations) ||
      object.metadata.annotations['example.com/cost'] != 'free'
    message: "nothing is free"
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: names-and-kinds}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: >-
      object.apiVersion == 'v1' && object.kind == 'Pod' && object.metadata.name != 'x' &&
      object.metadata.namespace != 'y' && oldObject.metadata.uid != '' && !has(object.spec.hostname)
    message: "no hostname"
"""


def site(text: str = SITE) -> RuleSet:
    return compile_documents(load_documents(text, "site.yaml")).require()


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "train"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def update(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    decision = evaluate(
        site(), AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=NAMESPACE)
    )
    return [v.rule for v in decision.violations]


def test_a_label_only_update_is_judged_by_an_object_selector_rule() -> None:
    old = pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["tier"] = "prod"  # kubectl label pod p tier=prod
    assert update(old, new) == ["prod-needs-class"]


def test_an_update_that_leaves_the_inputs_alone_is_not_judged_again() -> None:
    old = pod()
    old["metadata"]["labels"]["tier"] = "prod"  # admitted before the rule existed
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["example.com/keep"]
    assert update(old, new) == []


def test_a_rule_reading_metadata_whole_judges_any_metadata_change() -> None:
    old = pod()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"break-glass": "now"}
    assert update(old, new) == ["no-break-glass"]


def test_a_rule_reading_the_object_whole_judges_any_change() -> None:
    old = pod()
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "10.0.0.2"}
    assert update(old, new) == ["small-status"]


def test_a_rule_reading_one_annotation_judges_its_change() -> None:
    old = pod()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"example.com/cost": "free"}
    assert update(old, new) == ["cost-annotation"]


def test_the_inputs_of_each_rule() -> None:
    rules = {rule.name: rule for rule in site().rules}
    assert rules["prod-needs-class"].inputs == frozenset({("metadata", "labels")})
    assert rules["no-break-glass"].inputs is None
    assert rules["small-status"].inputs is None
    assert rules["cost-annotation"].inputs == frozenset({("metadata", "annotations")})
    # what no UPDATE changes (apiVersion, kind, name, namespace, uid) is no input; the rest still counts
    assert rules["names-and-kinds"].inputs == frozenset({("spec", "hostname")})


def test_rule_inputs_from_what_a_rule_reads_and_writes() -> None:
    assert rule_inputs((), (), object_selector=True) == frozenset({("metadata", "labels")})
    assert rule_inputs((), (), object_selector=False) == frozenset()
    assert rule_inputs((), ("spec.tolerations", "metadata.labels.team"), False) == frozenset(
        {("spec", "tolerations"), ("metadata", "labels", "team")}
    )
    assert rule_inputs((), ("spec.tolerations", "*"), True) is None  # a mutation that may write anything


def test_the_registration_compares_the_top_level_fields_of_the_inputs() -> None:
    assert top_level(
        frozenset({("metadata", "labels", "tier"), ("metadata", "annotations"), ("spec", "containers"), ("status",)})
    ) == {("metadata", "labels"), ("metadata", "annotations"), ("spec",), ("status",)}
    rules = {rule.name: rule for rule in site().rules}
    watched = watched_fields([rules["prod-needs-class"], rules["cost-annotation"]])
    assert watched == [("metadata", "annotations"), ("metadata", "labels"), ("spec",)]
    assert watched_fields([rules["prod-needs-class"], rules["small-status"]]) is None  # any change may matter


def test_unchanged_compares_the_inputs_and_the_targets_own_pod_specs() -> None:
    target = Target("pod p", root=(), pod_specs=(("spec",),), is_pod=True)
    old = pod()
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"]["tier"] = "prod"
    assert unchanged(frozenset({("status",)}), target, labelled, old)
    assert not unchanged(frozenset({("metadata", "labels")}), target, labelled, old)
    assert not unchanged(None, target, old, old)  # the whole object: never unchanged
    respec = copy.deepcopy(old)
    respec["spec"]["priorityClassName"] = "gpu"
    assert not unchanged(frozenset(), target, respec, old)
    template = Target("template", root=("spec", "template"), pod_specs=(("spec", "template", "spec"),), is_pod=False)
    old_deployment = {"metadata": {"generation": 1}, "spec": {"replicas": 1, "template": {"spec": {}}}}
    scaled = copy.deepcopy(old_deployment)
    scaled["spec"]["replicas"] = 3
    scaled["metadata"]["generation"] = 2
    assert unchanged(frozenset(), template, scaled, old_deployment)  # a template target: the template, whole
    relabelled = copy.deepcopy(old_deployment)
    relabelled["spec"]["template"]["metadata"] = {"labels": {"tier": "prod"}}
    assert not unchanged(frozenset(), template, relabelled, old_deployment)


def test_only_the_top_level_apiversion_and_kind_are_fixed() -> None:
    """A TrainJob's spec.runtimeRef.kind is an input like any other field; only the object's own kind is fixed."""
    ruleset = site(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: runtime-kind}
spec:
  match: {kinds: [TrainJob], operations: [CREATE, UPDATE]}
  validate: {expression: "object.spec.runtimeRef.kind == 'ClusterTrainingRuntime'", message: "cluster runtimes only"}
"""
    )
    assert ruleset.rules[0].inputs == frozenset({("spec", "runtimeRef", "kind")})


def test_a_fixed_field_read_first_does_not_hide_the_fields_read_after_it() -> None:
    reads = SimpleNamespace(paths={"object": (("kind",), ("metadata", "name"), ("spec", "hostname")), "oldObject": ()})
    assert rule_inputs([reads], (), False) == frozenset({("spec", "hostname")})  # type: ignore[list-item]
