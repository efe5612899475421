"""What happens around a running workload: relabels, the webhook going away mid-admission, platform namespaces.

Sources: Kueue's job reconciler retries a start that fails (kubernetes-sigs/kueue
pkg/controller/jobframework/reconciler.go: the Job stays suspended, the error is returned and the
request requeued with controller-runtime's backoff); the apiserver applies a webhook's
`failurePolicy` when it cannot reach it (kubernetes.io docs, reference/access-authn-authz/
extensible-admission-controllers, "Failure policy"); gpu-cost-labels re-applies the namespace's
`team`/`cost-center` on a pod UPDATE (docs/operations.md, "Webhook reach").
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.cluster.conftest import GpuWebhook, Tenant
from tests.cluster.workloads import (
    IMAGE,
    delete,
    deployment,
    event_lines,
    is_true,
    job,
    pods,
    running_pods,
    wait_for,
    workload_of,
)
from tests.support.cluster import Cluster, dumps

pytestmark = pytest.mark.cluster


def test_a_tenant_relabelling_a_running_gpu_pod_keeps_the_namespace_attribution(
    cluster: Cluster, tenant: Callable[..., Tenant]
) -> None:
    """DCGM exporter and OpenCost attribute GPU time by the pod's `team` label: a tenant patching it on
    a running pod gets the namespace's value back (the UPDATE reaches the mutating webhook), and the
    pod keeps running."""
    team = tenant("team-relabel", labels={"team": "vision", "cost-center": "cc-42"})
    assert team.create(job("train", gpus=1)).ok
    (pod,) = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=train", 1)
    assert pod["metadata"]["labels"]["team"] == "vision"
    path = team.path("v1", "Pod", pod["metadata"]["name"])
    patched = cluster.env.request(
        "PATCH",
        path,
        {"metadata": {"labels": {"team": "someone-else", "cost-center": "free"}}},
        headers={**team.as_tenant, "Content-Type": "application/merge-patch+json"},
    )
    assert patched.ok, patched.message
    stored = cluster.get(path)
    assert (stored["metadata"]["labels"]["team"], stored["metadata"]["labels"]["cost-center"]) == ("vision", "cc-42")
    assert stored["status"]["phase"] == "Running"
    delete(cluster, team.path("batch/v1", "Job", "train"))


def test_the_webhook_stopped_during_kueue_admission_holds_the_job_then_lets_it_run(
    cluster: Cluster, gpu_webhook: GpuWebhook, tenant: Callable[..., Tenant]
) -> None:
    """A GPU Job waits for quota; the webhook stops; the quota frees and Kueue admits the Job, but
    its resume (an UPDATE the validating webhook must see, failurePolicy Fail) is refused while the
    webhook is away: the Job stays suspended, no pod runs unjudged, and a tenant's new Job is
    refused too (fail closed). The webhook comes back: Kueue's retry resumes the Job and its pod runs."""
    team = tenant("team-outage")
    assert team.create(job("blocker", gpus=8, pods=2)).ok
    running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=blocker", 2)
    assert team.create(job("next", gpus=8)).ok
    gpu_webhook.stop()
    try:
        delete(cluster, team.path("batch/v1", "Job", "blocker"))
        wait_for(
            "Kueue admits the waiting Job",
            lambda: True if is_true(workload_of(cluster, team.namespace, "next"), "Admitted") else None,
            explain=lambda: dumps(workload_of(cluster, team.namespace, "next")),
        )
        refused = team.create(job("during", gpus=1))
        assert refused.status >= 500 or refused.status == 403, refused.body
        assert "gpu-webhook" in refused.message, refused.message
        for _ in range(10):  # five seconds of Kueue's retries
            held = cluster.get(team.path("batch/v1", "Job", "next"))
            assert held["spec"]["suspend"] is True, "the Job was resumed without the webhook judging it"
            time.sleep(0.5)
    finally:
        gpu_webhook.start()
    running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=next", 1, timeout=120)
    delete(cluster, team.path("batch/v1", "Job", "next"))


def test_a_platform_namespace_is_left_as_written(cluster: Cluster, gpu_webhook: GpuWebhook) -> None:
    """No tenant label: the tenant rules neither change nor refuse a CPU Deployment that tolerates
    the GPU taint and selects GPU nodes (a platform's choice), and its pods run there."""
    cluster.env.create_namespace("platform-batch")
    body = deployment("indexer", replicas=1)
    spec = body["spec"]["template"]["spec"]
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    body["metadata"]["namespace"] = "platform-batch"
    made = cluster.env.create(body)
    assert made.ok, made.message
    template = made.body["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "indexer"}
    assert template["spec"]["tolerations"] == spec["tolerations"]
    assert template["spec"]["nodeSelector"] == spec["nodeSelector"]
    assert "env" not in template["spec"]["containers"][0]
    assert "kueue.x-k8s.io/queue-name" not in made.body["metadata"].get("labels", {})
    (pod,) = running_pods(cluster, "platform-batch", "app=indexer", 1)
    assert pod["spec"]["nodeName"] in ("gpu-node-1", "gpu-node-2", "mig-node-1")
    assert not [e for e in event_lines(cluster, "platform-batch") if "FailedCreate" in e]


def test_kubectl_debug_of_a_running_gpu_pod(cluster: Cluster, tenant: Callable[..., Tenant]) -> None:
    """`kubectl debug` adds an ephemeral container through the pods/ephemeralcontainers subresource
    (kubernetes.io docs, tasks/debug/debug-application/debug-running-pod): the rules see it (DESIGN §6).
    A debug container that sets NVIDIA_VISIBLE_DEVICES=all (it cannot request a GPU) is refused; a
    plain one is added and the pod keeps running."""
    team = tenant("team-debug")
    assert team.create(job("train", gpus=1)).ok
    (pod,) = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=train", 1)
    path = team.path("v1", "Pod", pod["metadata"]["name"]) + "/ephemeralcontainers"
    headers = {**team.as_tenant, "Content-Type": "application/strategic-merge-patch+json"}

    def debug(name: str, **extra: object) -> dict:
        container = {"name": name, "image": "registry.example.com/busybox:1.36", "stdin": True, "tty": True, **extra}
        return {"spec": {"ephemeralContainers": [container]}}

    sneaky = cluster.env.request(
        "PATCH", path, debug("peek", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), headers=headers
    )
    assert sneaky.status == 403 and "no-visible-devices-without-gpu" in sneaky.message, sneaky.body
    added = cluster.env.request("PATCH", path, debug("debugger"), headers=headers)
    assert added.ok, added.message
    stored = cluster.get(team.path("v1", "Pod", pod["metadata"]["name"]))
    assert [c["name"] for c in stored["spec"]["ephemeralContainers"]] == ["debugger"]
    assert stored["status"]["phase"] == "Running"
    delete(cluster, team.path("batch/v1", "Job", "train"))


def test_the_webhook_paused_during_a_rollout_admits_no_pod_unjudged(
    cluster: Cluster, gpu_webhook: GpuWebhook, tenant: Callable[..., Tenant]
) -> None:
    """A tenant's CPU Deployment rolls out a new image; the webhook freezes (SIGSTOP) just after the
    change, for longer than its 5 s timeoutSeconds, so the controllers' ReplicaSet and pod writes meet
    failurePolicy Fail; it thaws. Every pod of the new image, during the pause and after, carries
    visible-devices-void's NVIDIA_VISIBLE_DEVICES=void (no pod was admitted without the webhook), and
    the rollout completes (the Deployment and ReplicaSet controllers retry: kubernetes
    pkg/controller/deployment, replicaset)."""
    team = tenant("team-rollout")
    body = deployment("web", replicas=2)
    del body["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]  # a hollow node runs no probe
    assert team.create(body).ok
    running_pods(cluster, team.namespace, "app=web", 2)
    new_image = IMAGE.replace("1" * 64, "2" * 64)

    def with_new_image() -> list[dict]:
        return [p for p in pods(cluster, team.namespace, "app=web") if p["spec"]["containers"][0]["image"] == new_image]

    def judged(pod: dict) -> bool:
        return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in pod["spec"]["containers"][0].get("env", [])

    patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": new_image}]}}}}
    changed = cluster.env.request(
        "PATCH",
        team.path("apps/v1", "Deployment", "web"),
        patch,
        headers={**team.as_tenant, "Content-Type": "application/strategic-merge-patch+json"},
    )
    assert changed.ok, changed.message
    assert gpu_webhook.process is not None
    gpu_webhook.process.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            assert all(judged(p) for p in with_new_image()), "a pod was admitted while the webhook was frozen"
            time.sleep(0.5)
        held = [p for p in with_new_image() if p["status"].get("phase") == "Running"]
        assert len(held) < 2, "the rollout finished while the webhook was frozen: the pause tested nothing"
    finally:
        gpu_webhook.process.send_signal(signal.SIGCONT)
    done = wait_for(
        "the rollout's two new pods Running",
        lambda: (
            found if len(found := [p for p in with_new_image() if p["status"].get("phase") == "Running"]) >= 2 else None
        ),
        timeout=120,
        explain=lambda: "\n".join(event_lines(cluster, team.namespace)[-20:]),
    )
    assert all(judged(p) for p in done)
    delete(cluster, team.path("apps/v1", "Deployment", "web"))
