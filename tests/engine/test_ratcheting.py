"""Ratcheting on UPDATE, and pods/ephemeralcontainers, with the shipped rule pack.

Model: Kubernetes CRD validation ratcheting (KEP-4008, stable in 1.33): on UPDATE, errors on what
the update did not change are not reported. Here per rule and target, by message.
Ephemeral containers: since 1.22 the pods/ephemeralcontainers subresource takes the whole Pod
(KEP-277; kubernetes/kubernetes#101034), as an UPDATE, and keeps only spec.ephemeralContainers.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.support import StaticNamespaces, gpu_pod
from webhook.engine import AdmissionInput, RuleSet, evaluate, load_rules

TENANT = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}},
}


def gated_pod() -> dict[str, Any]:
    """A GPU pod admitted before its namespace became a tenant: a class tenants may not use."""
    pod = gpu_pod(priorityClassName="system-cluster-critical", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def test_kueue_ungating_passes_after_the_namespace_became_a_tenant(pack: RuleSet) -> None:
    old = gated_pod()
    new = copy.deepcopy(old)
    del new["spec"]["schedulingGates"]  # what Kueue's pod integration does on admission
    update = AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=TENANT)
    decision = evaluate(pack, update)
    assert decision.allowed, decision.denial_message
    # the same pod at CREATE is denied: ratcheting spares what was already there, nothing more
    assert not evaluate(pack, AdmissionInput.offline(old, namespace_object=TENANT)).allowed


def test_an_update_that_adds_a_violation_is_denied(pack: RuleSet) -> None:
    old = gpu_pod(priorityClassName="gpu-batch")
    new = gpu_pod(priorityClassName="system-cluster-critical")
    decision = evaluate(pack, AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=TENANT))
    assert [v.rule for v in decision.violations] == ["priority-class-allowed"]


def test_a_rule_can_opt_out(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: strict}
spec:
  ratcheting: false
  match: {kinds: [Pod], operations: [UPDATE]}
  validate: {expression: "!has(podSpec.priorityClassName)", message: "no classes here"}
"""
    )
    rules = load_rules(tmp_path).require()
    old = gated_pod()
    decision = evaluate(rules, AdmissionInput.offline(copy.deepcopy(old), operation="UPDATE", old_object=old))
    assert [v.rule for v in decision.violations] == ["strict"]


def debug(pod: dict[str, Any], **security: Any) -> dict[str, Any]:
    new = copy.deepcopy(pod)
    container: dict[str, Any] = {"name": "debugger", "image": "busybox", "targetContainerName": "trainer"}
    if security:
        container["securityContext"] = security
    new["spec"]["ephemeralContainers"] = [container]
    return new


def ephemeral(pack: RuleSet, new: dict[str, Any], old: dict[str, Any]) -> Any:
    update = AdmissionInput.offline(
        new, operation="UPDATE", old_object=old, namespace_object=TENANT, sub_resource="ephemeralcontainers"
    )
    return evaluate(pack, update)


def test_a_privileged_debug_container_is_denied(pack: RuleSet) -> None:
    pod = gpu_pod()
    decision = ephemeral(pack, debug(pod, privileged=True), pod)
    assert [v.rule for v in decision.violations] == ["no-privileged-in-tenants"]
    assert "debugger" in decision.violations[0].message


def test_a_plain_debug_container_passes_even_beside_old_violations(pack: RuleSet) -> None:
    pod = gated_pod()  # a class the tenant may not use: already there, not re-denied
    decision = ephemeral(pack, debug(pod), pod)
    assert decision.allowed, decision.denial_message


def test_other_subresources_are_still_not_evaluated(pack: RuleSet) -> None:
    pod = gpu_pod()
    update = AdmissionInput.offline(
        debug(pod, privileged=True), operation="UPDATE", old_object=pod, namespace_object=TENANT, sub_resource="status"
    )
    assert evaluate(pack, update).allowed


async def test_kubectl_debug_reaches_the_rules_through_the_server(cert_dir: Path, rules_dir: Path) -> None:
    """An AdmissionReview for pods/ephemeralcontainers, as the apiserver sends it: kind Pod, UPDATE."""
    import aiohttp

    from tests.support import LiveServer, client_ssl, make_review, start_server

    server = await start_server(cert_dir, rules_dir, namespaces=StaticNamespaces({"team-a": TENANT}))  # team-a is a tenant
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            pod = gpu_pod()
            review = make_review(debug(pod, privileged=True), operation="UPDATE", old=pod)
            review["request"]["subResource"] = "ephemeralcontainers"
            review["request"]["resource"]["resource"] = "pods"
            answer = await live.review("validate", review)
            assert answer["response"]["allowed"] is False
            assert "no-privileged-in-tenants" in answer["response"]["status"]["message"]
            review = make_review(debug(pod), operation="UPDATE", old=pod)
            review["request"]["subResource"] = "ephemeralcontainers"
            assert (await live.review("validate", review))["response"]["allowed"] is True
    finally:
        await server.stop()


# -- patches ratchet too: a rule acts on UPDATE only when the update changed what it reads or writes --


def started_job() -> dict[str, Any]:
    """A GPU Job stored before the pack (no toleration, no labels), running: its template is immutable."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"suspend": False, "template": {"spec": gpu_pod()["spec"]}},
    }


def test_kueue_suspending_a_started_job_gets_no_patch_into_its_immutable_template(pack: RuleSet) -> None:
    """Kueue preempts by setting spec.suspend (kueue pkg/controller/jobframework); a patch into a started
    Job's template would make the apiserver refuse the update ("field is immutable")."""
    old = started_job()
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    update = AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=TENANT)
    decision = evaluate(pack, update)
    assert decision.allowed, decision.denial_message
    assert not [op for op in decision.patch if op["path"].startswith("/spec/template")], decision.patch
    # the same Job at CREATE is patched: the ratchet spares the update, not the object
    created = evaluate(pack, AdmissionInput.offline(old, namespace_object=TENANT))
    assert [op for op in created.patch if op["path"].startswith("/spec/template")]


def test_a_relabel_is_an_input_of_the_rules_that_read_labels(pack: RuleSet) -> None:
    namespace = copy.deepcopy(TENANT)
    namespace["metadata"]["labels"].update({"team": "llm", "cost-center": "cc-1"})
    old = gpu_pod()
    old["metadata"].update(namespace="team-a", labels={"team": "llm", "cost-center": "cc-1"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "search"  # kubectl label pod ... team=search --overwrite
    decision = evaluate(
        pack, AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=namespace)
    )
    assert {"op": "replace", "path": "/metadata/labels/team", "value": "llm"} in decision.patch
    untouched = evaluate(
        pack, AdmissionInput.offline(old, operation="UPDATE", old_object=old, namespace_object=namespace)
    )
    assert untouched.patch == []
    assert {t.reason for t in untouched.trace if t.rule == "gpu-cost-labels"} == {
        "the UPDATE changed nothing it reads or writes (ratcheting)"
    }


def test_a_rule_without_ratcheting_acts_on_every_update(tmp_path: Path) -> None:
    from tests.support import load_rule_text

    rule = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: label-everything}
spec:
  ratcheting: false
  match: {kinds: [Pod]}
  mutate: [{setLabels: {values: {managed: "yes"}}}]
"""
    ruleset = load_rule_text(tmp_path, rule)
    pod = gpu_pod()
    decision = evaluate(ruleset, AdmissionInput.offline(pod, operation="UPDATE", old_object=pod))
    assert decision.patch == [{"op": "add", "path": "/metadata/labels", "value": {"managed": "yes"}}]
    ratcheted = load_rule_text(tmp_path / "r", rule.replace("  ratcheting: false\n", ""))
    assert evaluate(ratcheted, AdmissionInput.offline(pod, operation="UPDATE", old_object=pod)).patch == []
