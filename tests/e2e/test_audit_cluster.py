"""`gpu-webhook audit --cluster` on a real apiserver agrees with the server about what the server admitted.

The objects are created for real (stored, not dry run) through the running webhook, so they are
what a cluster holds: the Priority admission plugin wrote the globalDefault PriorityClass, its
`priority` and its `preemptionPolicy` into every pod that named no class, and the webhook's
mutations are in them. No scheduler or controller-manager runs: pods stay Pending, a Job makes no
pods, a DRA pod's ResourceClaim is never made from its template. The audit then reads the same
cluster context the server reads (Namespaces, PriorityClasses, ResourceClaims, ResourceClaimTemplates)
and must find nothing to deny, nor anything to patch, in what the server admitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import TENANT_LABEL, gpu_pod, gpu_webhook
from tests.support.envtest import EnvTest

NAMESPACE = "team-audit"
PLAIN_NAMESPACE = "audit-plain"  # no tenant label: the tenant rules do not act
DEFAULT_CLASS = "e2e-cluster-default"
CLASSES = [
    {"name": DEFAULT_CLASS, "value": 1000, "default": True},
    {"name": "gpu-batch", "value": 100},  # the pack's training class (priority-class-by-workload)
    {"name": "gpu-critical", "value": 100000},  # the pack's serving class
]
DEVICE_CLASS = "gpu.nvidia.com"  # what NVIDIA's DRA driver installs


def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def template(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}},
    }


def dra_pod(name: str, namespace: str, template_name: str) -> dict[str, Any]:
    """A pod that gets its GPU through a DRA claim made from a template (no nvidia.com/gpu)."""
    pod = gpu_pod(name, namespace)
    container = pod["spec"]["containers"][0]
    container["resources"] = {
        "requests": {"cpu": "1", "memory": "4Gi"},
        "limits": {"memory": "4Gi"},
        "claims": [{"name": "gpu"}],
    }
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name}]
    return pod


def gpu_template(**extra: Any) -> dict[str, Any]:
    spec = gpu_pod("x", NAMESPACE, **extra)["spec"]
    return {"metadata": {"labels": {"app": "x"}}, "spec": spec}


def workloads(namespace: str) -> list[dict[str, Any]]:
    """What a tenant runs, each of a shape the pack admits (its mutations aside)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"template": {**gpu_template(), "spec": {**gpu_template()["spec"], "restartPolicy": "Never"}}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "x"}},
            "template": gpu_template(
                readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}},
                ports=[{"containerPort": 8080}],
            ),
        },
    }
    cpu = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu", "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"memory": "64Mi"}}}]},
    }
    batch = gpu_pod("batch", namespace)
    batch["spec"]["priorityClassName"] = "gpu-batch"  # a class the namespace allows, chosen by the user
    return [
        template("one-gpu", namespace),
        gpu_pod("plain", namespace),  # no class: the Priority plugin writes DEFAULT_CLASS into it
        batch,
        dra_pod("dra", namespace, "one-gpu"),
        cpu,
        job,
        deployment,
    ]


def path_of(apiserver: EnvTest, obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    return f"{apiserver.resource_path(obj['apiVersion'], obj['kind'], metadata.get('namespace'))}/{metadata['name']}"


@pytest.fixture(scope="module")
def stored(apiserver: EnvTest, webhooks: list[str]) -> Iterator[dict[str, dict[str, Any]]]:
    """PriorityClasses (one globalDefault), a DeviceClass, a tenant namespace set up as docs/operations.md
    section 11 shows and a plain one, and workloads created in both through the webhooks: "Kind/ns/name" ->
    the stored object. Cluster-scoped objects are deleted afterwards (the apiserver is the session's)."""
    cluster_scoped = [priority_class(**c) for c in CLASSES]
    cluster_scoped.append(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS}, "spec": {}}
    )
    made: list[dict[str, Any]] = []
    try:
        for obj in cluster_scoped:
            answer = apiserver.create(obj)
            assert answer.ok or answer.status == 409, answer.body
            made.append(obj)
        apiserver.create_namespace(
            NAMESPACE,
            {TENANT_LABEL: "true", "team": "audit", "cost-center": "cc-4711"},
            {
                "gpu-webhook.io/allowed-priority-classes": "gpu-batch,gpu-critical",
                "gpu-webhook.io/allowed-device-classes": f"{DEVICE_CLASS},mig.nvidia.com",
                "gpu-webhook.io/max-gpus-per-pod": "8",
            },
        )
        apiserver.create_namespace(PLAIN_NAMESPACE)
        objects: dict[str, dict[str, Any]] = {}
        for namespace in (NAMESPACE, PLAIN_NAMESPACE):
            for obj in workloads(namespace):
                answer = apiserver.create(obj)  # stored: the Priority plugin and the webhook both had their turn
                assert answer.status == 201, f"{obj['kind']} {namespace}/{obj['metadata']['name']}: {answer.body}"
                objects[f"{obj['kind']}/{namespace}/{obj['metadata']['name']}"] = answer.body
        yield objects
    finally:
        for obj in reversed(made):
            apiserver.request("DELETE", path_of(apiserver, obj))


def audit(apiserver: EnvTest, *args: str) -> dict[str, dict[str, Any]]:
    """`gpu-webhook audit --cluster` as a user runs it; "Kind/ns/name" -> its entry in the JSON report."""
    done = gpu_webhook(
        "audit", "--cluster", "--kubeconfig", str(apiserver.kubeconfig), "-o", "json", "--fail-on", "never", *args
    )
    report = json.loads(done.stdout)
    return {f"{o['kind']}/{o['namespace']}/{o['name']}": o for o in report["objects"]}


def blocking(entry: dict[str, Any]) -> list[str]:
    return [f"{r['rule']}: {'; '.join(r['messages'])}" for r in entry["rules"] if r.get("blocks")]


def test_the_stored_objects_carry_what_the_priority_plugin_wrote(stored: dict[str, dict[str, Any]]) -> None:
    plain = stored[f"Pod/{NAMESPACE}/plain"]["spec"]
    assert plain["priorityClassName"] == DEFAULT_CLASS and plain["priority"] == 1000
    assert plain["preemptionPolicy"] == "PreemptLowerPriority"
    assert stored[f"Pod/{NAMESPACE}/batch"]["spec"]["priority"] == 100


@pytest.mark.parametrize("scope", [(), ("-n", NAMESPACE)], ids=["all-namespaces", "one-namespace"])
def test_what_the_server_admitted_the_audit_admits_unchanged(
    apiserver: EnvTest, stored: dict[str, dict[str, Any]], scope: tuple[str, ...]
) -> None:
    report = audit(apiserver, *scope)

    expected = {key for key in stored if not scope or key.split("/")[1] == NAMESPACE}
    assert expected <= set(report), sorted(expected - set(report))
    for key in expected:
        entry = report[key]
        assert blocking(entry) == [], (key, blocking(entry))
        # stored means mutated already: the server's mutations, judged again, change nothing
        assert [r["rule"] for r in entry["rules"] if r["patched"]] == [], key
    # the context was the cluster's: the default class passed as the default, the DRA pod's claim resolved
    assert report[f"Pod/{NAMESPACE}/dra"]["gpus"] == 1
    rules = {r["rule"]: r["result"] for r in report[f"Pod/{NAMESPACE}/plain"]["rules"]}
    assert rules["priority-class-allowed"] == "pass"
    assert {r["rule"]: r["result"] for r in report[f"ResourceClaimTemplate/{NAMESPACE}/one-gpu"]["rules"]} == {
        "dra-claim-limits": "pass",
        "dra-device-classes-allowed": "pass",
        "dra-pod-claims-resolvable": "pass",  # a template is judged at its own admission (late templates)
        "mig-profiles": "pass",  # the profiles its selectors pin
    }


def test_what_the_server_would_now_deny_the_audit_denies_for_the_same_rule(
    apiserver: EnvTest, stored: dict[str, dict[str, Any]]
) -> None:
    """A template stored before its namespace became a tenant's: the server refuses it now, and so does the audit."""
    namespace = "audit-late"
    apiserver.create_namespace(namespace)
    greedy = template("whole-node", namespace)
    greedy["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert apiserver.create(greedy).status == 201  # not a tenant yet: dra-claim-limits does not act
    path = path_of(apiserver, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    current = apiserver.request("GET", path).body
    current["metadata"]["labels"][TENANT_LABEL] = "true"
    assert apiserver.request("PUT", path, current).ok

    again = {**greedy, "metadata": {"name": "whole-node-2", "namespace": namespace}}
    answer = apiserver.wait_for_webhooks(again, lambda a: a.status == 403, timeout=30.0)  # the watch saw the label
    assert "[dra-claim-limits]" in answer.message, answer.body
    report = audit(apiserver, "-n", namespace)
    assert [b.split(":")[0] for b in blocking(report[f"ResourceClaimTemplate/{namespace}/whole-node"])] == [
        "dra-claim-limits"
    ]
