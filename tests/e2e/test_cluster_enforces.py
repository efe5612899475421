"""What a tenant does in a cluster, through a real kube-apiserver: the rules are what it enforces.

The tenant namespace is docs/operations.md's example, read from the document itself. Each
request is a real write (not a dry run) made the way kubectl makes it: a create, or a JSON merge
patch of labels (`kubectl label --overwrite`).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import WebhookServer, gpu_pod
from tests.support import REPO
from tests.support.envtest import EnvTest, Response

OPERATIONS = REPO / "docs" / "operations.md"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def example_namespace() -> dict[str, Any]:
    text = OPERATIONS.read_text()
    section = text[text.index("### An example tenant namespace") :]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)[:1]
    return yaml.safe_load(block)


@pytest.fixture(scope="module")
def tenant(apiserver: EnvTest, webhooks: list[str], workload_crds: list[str]) -> str:
    """docs/operations.md's example tenant namespace, as written there (no queue label on purpose:
    the RayService, AppWrapper and TrainJob below must be denied, not labelled)."""
    namespace = example_namespace()
    metadata = namespace["metadata"]
    annotations = {k: v for k, v in metadata["annotations"].items() if k != "gpu-webhook.io/queue"}
    apiserver.create_namespace(metadata["name"], metadata["labels"], annotations)
    for name, value in (("gpu-batch", 1000), ("gpu-critical", 100000)):
        made = apiserver.create(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )
        assert made.ok or made.status == 409, made.message
    return str(metadata["name"])


def merge_patch(apiserver: EnvTest, obj: dict[str, Any], labels: dict[str, str]) -> Response:
    """`kubectl label <kind> <name> k=v --overwrite`: a JSON merge patch of metadata.labels."""
    path = apiserver.resource_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
    return apiserver.request(
        "PATCH",
        f"{path}/{obj['metadata']['name']}",
        {"metadata": {"labels": labels}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def gpu_template(image: str) -> dict[str, Any]:
    resources = {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    return {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image, "resources": resources}]}
    }


def ray_service(namespace: str) -> dict[str, Any]:
    worker = {"groupName": "gpu", "replicas": 1, "template": gpu_template("rayproject/ray:2.40.0-gpu")}
    head = {"template": {"spec": {"containers": [{"name": "head", "image": "rayproject/ray:2.40.0"}]}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "serve", "namespace": namespace},
        "spec": {"rayClusterConfig": {"headGroupSpec": head, "workerGroupSpecs": [worker]}},
    }


def app_wrapper(namespace: str) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"template": gpu_template("cuda:12")},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "wrapped", "namespace": namespace},
        "spec": {"components": [{"podSets": [{"replicas": 1, "path": "template.spec.template"}], "template": job}]},
    }


def train_job(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "sft", "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    }


@pytest.mark.parametrize("make", [ray_service, app_wrapper, train_job], ids=["RayService", "AppWrapper", "TrainJob"])
def test_kueue_workloads_without_a_queue_are_denied_in_a_queue_required_namespace(
    apiserver: EnvTest, tenant: str, make: Any
) -> None:
    obj = make(tenant)
    answer = apiserver.create(obj)
    assert answer.status == 403, f"{obj['kind']} without a queue was admitted: {answer.status} {answer.message}"
    assert "[kueue-queue-required]" in answer.message and "requires a Kueue queue" in answer.message
    obj["metadata"]["labels"] = {QUEUE_LABEL: "llm-queue"}
    queued = apiserver.create(obj)
    assert queued.ok, f"{obj['kind']} with a queue: {queued.status} {queued.message}"


def test_a_tenant_cannot_rebill_a_running_pod_by_relabelling_it(apiserver: EnvTest, tenant: str) -> None:
    pod = gpu_pod("billed", tenant)
    pod["metadata"]["labels"] = {QUEUE_LABEL: "llm-queue"}
    made = apiserver.create(pod)
    assert made.ok, made.message
    assert made.body["metadata"]["labels"]["team"] == "llm"  # gpu-cost-labels, from the namespace
    relabelled = merge_patch(apiserver, pod, {"team": "search", "cost-center": "cc-0001"})
    assert relabelled.ok, relabelled.message
    labels = relabelled.body["metadata"]["labels"]
    assert (labels["team"], labels["cost-center"]) == ("llm", "cc-4711")


def test_a_tenant_cannot_move_a_running_job_to_a_workload_priority_class_it_may_not_use(
    apiserver: EnvTest, tenant: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": tenant, "labels": {QUEUE_LABEL: "llm-queue"}},
        "spec": {"template": gpu_template("cuda:12")},
    }
    made = apiserver.create(job)
    assert made.ok, made.message
    assert made.body["metadata"]["labels"][CLASS_LABEL] == "training-batch"  # kueue-priority-class
    # Kueue lets a running workload change its class (kueue jobframework validation), so only the rule stops this
    moved = merge_patch(apiserver, job, {CLASS_LABEL: "platform-critical"})
    assert moved.status == 403, f"{moved.status} {moved.message}"
    assert "[kueue-priority-class-allowed]" in moved.message
    allowed = merge_patch(apiserver, job, {CLASS_LABEL: "serving-critical"})
    assert allowed.ok, allowed.message


def test_an_update_no_rule_reads_is_not_sent_and_one_they_read_is(
    apiserver: EnvTest, webhook_server: WebhookServer, tenant: str
) -> None:
    """A finalizer or an annotation no rule reads is skipped by the apiserver (an outage then cannot keep a
    pod from being deleted); a label the rules read is sent to both webhooks."""
    pod = gpu_pod("updated", tenant)
    pod["metadata"]["labels"] = {QUEUE_LABEL: "llm-queue"}
    assert apiserver.create(pod).ok
    path = f"{apiserver.resource_path('v1', 'Pod', tenant)}/updated"
    before = {e: webhook_server.answered(e) for e in ("mutate", "validate")}
    skipped = apiserver.request(
        "PATCH",
        path,
        {"metadata": {"finalizers": ["example.com/keep"], "annotations": {"example.com/note": "x"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert skipped.ok, skipped.message
    assert {e: webhook_server.answered(e) for e in before} == before
    assert merge_patch(apiserver, pod, {"app": "x"}).ok
    after = {e: webhook_server.answered(e) for e in before}
    assert all(after[e] > before[e] for e in before), (before, after)
    removed = apiserver.request(
        "PATCH", path, {"metadata": {"finalizers": None}}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert removed.ok, removed.message


def test_kubectl_debug_cannot_add_a_container_that_sees_every_gpu(apiserver: EnvTest, tenant: str) -> None:
    """pods/ephemeralcontainers: kubectl debug adds a container to a running pod as an UPDATE of that
    subresource (KEP-277); the registration sends it and the rules see the whole Pod."""
    pod = gpu_pod("debugged", tenant)
    pod["metadata"]["labels"] = {QUEUE_LABEL: "llm-queue"}
    made = apiserver.create(pod)
    assert made.ok, made.message
    stored = made.body
    stored["spec"]["ephemeralContainers"] = [
        {
            "name": "debugger",
            "image": "busybox",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            "targetContainerName": "main",
        }
    ]
    path = f"{apiserver.resource_path('v1', 'Pod', tenant)}/debugged/ephemeralcontainers"
    answer = apiserver.request("PUT", path, stored)
    assert answer.status == 403, f"{answer.status} {answer.message}"
    assert "[no-device-env-in-tenants]" in answer.message
    stored["spec"]["ephemeralContainers"][0]["env"] = []
    assert apiserver.request("PUT", path, stored).ok
