"""Matching as a site's own rules use it: objectSelectors on the old and the new object, `gpu:` on kinds whose
pods admission cannot see, a match condition behind the plain checks, and objects with no namespace.

The apiserver's model (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/
predicates/object/matcher.go MatchObjectSelector): a request matches the objectSelector when the new
object or the old one matches (a DELETE has only the old). A cluster-scoped object has no Namespace
(predicates/namespace/matcher.go: "If the request is about a cluster scoped resource, and it is not a
namespace, it is never exempted").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.engine import AdmissionInput, RuleSet, evaluate
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

TENANT = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"tier": "prod"}}}


def site(text: str) -> RuleSet:
    return compile_documents(load_documents(text, "site.yaml")).require()


def pod(labels: dict[str, str] | None = None, gpus: int = 0, deadline: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    metadata: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"containers": [container], **({"activeDeadlineSeconds": 60} if deadline else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def judged(ruleset: RuleSet, admission: AdmissionInput) -> dict[str, str]:
    """rule -> its result, or the reason it did not match"""
    return {o.rule: o.reason or o.result.value for o in evaluate(ruleset, admission).outcomes()}


NOT_PROD = site(
    """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: dev-only}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE, UPDATE, DELETE]
    objectSelector: {matchExpressions: [{key: tier, operator: NotIn, values: [prod]}]}
  validate: {expression: "!has(object.spec.activeDeadlineSeconds)", message: "no deadlines outside prod"}
"""
)


def test_an_object_selector_reads_the_new_object_on_create() -> None:
    assert judged(NOT_PROD, AdmissionInput.offline(pod({"tier": "prod"}, deadline=True), namespace_object=TENANT)) == {
        "dev-only": "objectSelector does not match"
    }
    assert judged(NOT_PROD, AdmissionInput.offline(pod({"tier": "dev"}, deadline=True), namespace_object=TENANT)) == {
        "dev-only": "fail"
    }
    unlabelled = AdmissionInput.offline(pod(None, deadline=True), namespace_object=TENANT)
    assert judged(NOT_PROD, unlabelled) == {"dev-only": "fail"}


@pytest.mark.parametrize(
    ("old", "new", "result"),
    [
        ("dev", "prod", "fail"),  # the old object matches: as the apiserver, the rule runs
        ("prod", "dev", "fail"),
        ("prod", "prod", "objectSelector does not match"),  # neither does
    ],
)
def test_on_update_either_object_may_match(old: str, new: str, result: str) -> None:
    before, after = pod({"tier": old}), pod({"tier": new}, deadline=True)  # the update adds the violation
    update = AdmissionInput.offline(after, operation="UPDATE", old_object=before, namespace_object=TENANT)
    assert judged(NOT_PROD, update) == {"dev-only": result}


def test_a_delete_is_matched_on_the_old_object() -> None:
    delete = AdmissionInput.offline(
        None, operation="DELETE", old_object=pod({"tier": "prod"}, deadline=True), namespace_object=TENANT
    )
    assert judged(NOT_PROD, delete) == {"dev-only": "objectSelector does not match"}
    delete = AdmissionInput.offline(
        None, operation="DELETE", old_object=pod({"tier": "dev"}, deadline=True), namespace_object=TENANT
    )
    assert judged(NOT_PROD, delete) == {"dev-only": "error"}  # it ran: `object` is null on DELETE


DEV_PODS = site(
    """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: dev-pods}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE, UPDATE]
    objectSelector: {matchExpressions: [{key: tier, operator: NotIn, values: [prod]}]}
  validate: {expression: "!has(podSpec.activeDeadlineSeconds)", message: "no deadlines outside prod"}
"""
)


def deployment(labels: str, template_labels: str, deadline: bool = False) -> dict[str, Any]:
    template = {"metadata": {"labels": {"tier": template_labels}}, "spec": pod(deadline=deadline)["spec"]}
    metadata = {"name": "d", "namespace": "team-a", "labels": {"tier": labels}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": {"template": template}}


@pytest.mark.parametrize(
    ("labels", "template_labels", "result"),
    [("prod", "dev", "fail"), ("dev", "prod", "objectSelector does not match"), ("dev", "dev", "fail")],
)
def test_a_pod_rule_selects_a_template_by_the_labels_its_pods_get(
    labels: str, template_labels: str, result: str
) -> None:
    create = AdmissionInput.offline(deployment(labels, template_labels, deadline=True), namespace_object=TENANT)
    assert judged(DEV_PODS, create) == {"dev-pods": result}


def test_the_old_object_does_not_widen_a_template_selector() -> None:
    """Either object may match applies to the object itself; a template's pods are the new template's."""
    old, new = deployment("dev", "dev"), deployment("dev", "prod", deadline=True)
    update = AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=TENANT)
    assert judged(DEV_PODS, update) == {"dev-pods": "objectSelector does not match"}
    old, new = deployment("dev", "prod"), deployment("dev", "dev", deadline=True)
    update = AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=TENANT)
    assert judged(DEV_PODS, update) == {"dev-pods": "fail"}


def test_gpu_true_counts_a_kind_whose_pods_admission_cannot_see() -> None:
    """A TrainJob's pods come from its TrainingRuntime (kubeflow/trainer), so `gpu: true` must judge it."""
    ruleset = site(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: gpu-jobs-need-queue}
spec:
  match: {kinds: [TrainJob, Pod], operations: [CREATE], gpu: true}
  validate: {expression: "false", message: "judged"}
"""
    )
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "team-a"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    assert judged(ruleset, AdmissionInput.offline(trainjob, namespace_object=TENANT)) == {"gpu-jobs-need-queue": "fail"}
    assert judged(ruleset, AdmissionInput.offline(pod(gpus=1), namespace_object=TENANT)) == {
        "gpu-jobs-need-queue": "fail"
    }
    assert judged(ruleset, AdmissionInput.offline(pod(), namespace_object=TENANT)) == {
        "gpu-jobs-need-queue": "requests no accelerators (gpu: true)"
    }


def test_gpu_false_says_why_it_skips() -> None:
    ruleset = site(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: cpu-only}
spec:
  match: {kinds: [Pod], operations: [CREATE], gpu: false}
  validate: {expression: "false", message: "judged"}
"""
    )
    assert judged(ruleset, AdmissionInput.offline(pod(gpus=2), namespace_object=TENANT)) == {
        "cpu-only": "requests accelerators (gpu: false)"
    }
    assert judged(ruleset, AdmissionInput.offline(pod(), namespace_object=TENANT)) == {"cpu-only": "fail"}


CONDITIONED = site(
    """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: conditioned}
spec:
  failurePolicy: Fail
  match:
    kinds: [Pod]
    operations: [CREATE]
    namespaces: {exclude: [team-b]}
    objectSelector: {matchLabels: {app: train}}
    condition: "object.spec.priorityClassName == 'x'"
  validate: {expression: "false", message: "judged"}
"""
)


def test_a_match_condition_never_runs_where_the_plain_checks_already_said_no() -> None:
    """The condition errors on a pod without priorityClassName (no such key); where the namespace or the
    objectSelector excludes the pod it must not run, or its error would deny under failurePolicy Fail."""
    elsewhere = copy.deepcopy(pod({"app": "train"}))
    elsewhere["metadata"]["namespace"] = "team-b"
    namespace_b = {**TENANT, "metadata": {"name": "team-b", "labels": {}}}
    assert evaluate(CONDITIONED, AdmissionInput.offline(elsewhere, namespace_object=namespace_b)).allowed
    assert evaluate(CONDITIONED, AdmissionInput.offline(pod({"app": "serve"}), namespace_object=TENANT)).allowed
    decision = evaluate(CONDITIONED, AdmissionInput.offline(pod({"app": "train"}), namespace_object=TENANT))
    assert not decision.allowed and [v.rule for v in decision.violations] == ["conditioned"]
    classed = pod({"app": "train"})
    classed["spec"]["priorityClassName"] = "y"
    assert judged(CONDITIONED, AdmissionInput.offline(classed, namespace_object=TENANT)) == {
        "conditioned": "condition is false"
    }


NAMESPACE_RULES = site(
    """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: reads-namespace}
spec:
  onMissingContext: Deny
  match: {kinds: [DeviceClass, Pod], operations: [CREATE]}
  validate: {expression: "namespaceObject == null || 'tier' in namespaceObject.metadata.labels", message: "tier"}
"""
)
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"}, "spec": {}}


def test_a_cluster_scoped_object_is_not_refused_for_a_namespace_it_cannot_have() -> None:
    """onMissingContext: Deny waits for a Namespace the replica has not seen yet; a cluster-scoped object
    has none to wait for, so it is judged (namespaceObject null, as in a ValidatingAdmissionPolicy)."""
    assert judged(NAMESPACE_RULES, AdmissionInput.offline(DEVICE_CLASS)) == {"reads-namespace": "pass"}
    (unknown,) = evaluate(NAMESPACE_RULES, AdmissionInput.offline(pod())).outcomes()
    assert unknown.blocks and "namespace 'team-a' is not known yet" in unknown.messages[0]
    assert judged(NAMESPACE_RULES, AdmissionInput.offline(pod(), namespace_object=TENANT)) == {
        "reads-namespace": "pass"
    }


def test_a_namespace_selector_never_exempts_a_cluster_scoped_object() -> None:
    ruleset = site(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: prod-namespaces}
spec:
  match: {kinds: [DeviceClass], operations: [CREATE], namespaceSelector: {matchLabels: {tier: prod}}}
  validate: {expression: "false", message: "judged"}
"""
    )
    assert judged(ruleset, AdmissionInput.offline(DEVICE_CLASS)) == {"prod-namespaces": "fail"}


def test_a_namespace_selector_matches_a_namespace_by_its_own_labels() -> None:
    """The apiserver: "If the object itself is a namespace, the matching is performed on object.metadata.labels"
    (admissionregistration/v1 ValidatingWebhook.namespaceSelector)."""
    ruleset = site(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: prod-namespaces}
spec:
  match: {kinds: [Namespace], operations: [CREATE, UPDATE], namespaceSelector: {matchLabels: {tier: prod}}}
  onMissingContext: Evaluate
  validate: {expression: "false", message: "judged"}
"""
    )

    def namespace(labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}

    assert judged(ruleset, AdmissionInput.offline(namespace({"tier": "prod"}))) == {"prod-namespaces": "fail"}
    assert judged(ruleset, AdmissionInput.offline(namespace({"tier": "dev"}))) == {
        "prod-namespaces": "namespaceSelector does not match"
    }
