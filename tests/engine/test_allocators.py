"""The allocator table: GPUs marked by pod annotations (NVIDIA KAI Scheduler), and a site's own allocator.

Sources: kai-scheduler/api constants/constants.go (gpu-fraction, gpu-memory, gpu-fraction-container-name,
gpu-fraction-num-devices, DefaultSchedulerName kai-scheduler); NVIDIA/KAI-Scheduler pkg/common/resources
GetFractionContainerRef (init containers looked up first, else the first app container),
pkg/binder/plugins/gpusharing/gpu_sharing.go Mutate and pkg/binder/common/gpu_access.go (the
configMapKeyRefs KAI's binder writes), pkg/binder/common/gpusharingconfigmap/config_map.go (ConfigMap
names from the `runai/shared-gpu-configmap` annotation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.engine import AdmissionInput, evaluate, load_rules
from webhook.engine.resources import DEFAULT, Accelerators

KAI_ANNOTATIONS = {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": "p-abc1234-shared-gpu"}


def kai_pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "cuda:13"}], **spec}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": dict(annotations or KAI_ANNOTATIONS)},
        "spec": body,
    }


def count(pod: dict[str, Any], table: Accelerators = DEFAULT, *, whole_only: bool = False) -> int:
    return table.pod_count(pod["spec"], whole_only=whole_only, metadata=pod["metadata"])


def test_a_kai_fraction_is_one_device_and_no_whole_gpu() -> None:
    pod = kai_pod()
    assert (count(pod), count(pod, whole_only=True)) == (1, 0)
    assert count(kai_pod({"gpu-memory": "2000"})) == 1
    assert count(kai_pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "4"})) == 4


def test_kai_annotations_under_another_scheduler_give_nothing() -> None:
    pod = kai_pod()
    del pod["spec"]["schedulerName"]
    assert count(pod) == 0
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert count(pod) == 0


def test_the_allocated_container_is_the_named_one_init_containers_first() -> None:
    spec = {
        "initContainers": [{"name": "gpu-init", "image": "cuda:13"}],
        "containers": [{"name": "main", "image": "ubuntu"}, {"name": "gpu-init-twin", "image": "x"}],
    }
    pod = kai_pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-init"}, **spec)
    (allocation,) = DEFAULT.allocations(pod["spec"], pod["metadata"])
    assert allocation.container is pod["spec"]["initContainers"][0]
    # a name no container has: KAI refuses the pod, and the engine gives no container a GPU
    missing = kai_pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"})
    assert DEFAULT.allocations(missing["spec"], missing["metadata"]) == [] and count(missing) == 0


def test_only_the_allocators_own_configmap_entries_are_theirs() -> None:
    ref = {"configMapKeyRef": {"name": "p-abc1234-shared-gpu-0", "key": "NVIDIA_VISIBLE_DEVICES"}}
    theirs = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": ref}
    container = {
        "name": "main",
        "env": [theirs],
        "envFrom": [{"configMapRef": {"name": "p-abc1234-shared-gpu-0-evar"}}],
    }
    pod = kai_pod(containers=[container])
    (allocation,) = DEFAULT.allocations(pod["spec"], pod["metadata"])
    assert allocation.env() == {
        "writes": ["NVIDIA_VISIBLE_DEVICES", "GPU_PORTION"],
        "theirs": ["NVIDIA_VISIBLE_DEVICES"],
        "envFrom": ["p-abc1234-shared-gpu-0-evar"],
    }
    # a second, literal entry of the same variable makes none of them the allocator's
    container["env"] = [theirs, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert allocation.env()["theirs"] == []
    # another ConfigMap, or no ConfigMap annotation at all (KAI's webhook has not run): the tenant's
    container["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "mine", "key": "k"}}}
    ]
    assert allocation.env()["theirs"] == []
    bare = kai_pod({"gpu-fraction": "0.5"}, containers=[{"name": "main", "env": [theirs]}])
    (unnamed,) = DEFAULT.allocations(bare["spec"], bare["metadata"])
    assert unnamed.env()["theirs"] == [] and unnamed.env()["envFrom"] == []


SITE_CONFIG = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
metadata: {name: site}
spec:
  gpuAllocators:
    - name: example-sharing
      podAnnotations: [example.com/gpu-share]
      devicesAnnotation: example.com/gpu-devices
"""

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: at-most-two}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  validate: {expression: "gpuCount(podSpec) <= 2", message: too many}
"""


def decide(rules: Path, pod: dict[str, Any]) -> tuple[bool, list[str]]:
    loaded = load_rules([str(rules)])
    decision = evaluate(loaded.ruleset, AdmissionInput(operation="CREATE", object=pod))
    return decision.allowed, [violation.rule for violation in decision.violations]


def test_a_site_adds_an_allocator_in_gpuwebhookconfig(tmp_path: Path) -> None:
    (tmp_path / "rule.yaml").write_text(RULE)
    (tmp_path / "config.yaml").write_text(SITE_CONFIG)
    pod = kai_pod({"example.com/gpu-share": "yes", "example.com/gpu-devices": "3"})
    assert decide(tmp_path, pod) == (False, ["at-most-two"])
    pod["metadata"]["annotations"]["example.com/gpu-devices"] = "2"
    assert decide(tmp_path, pod) == (True, [])
    # the shipped KAI entry stays beside the site's
    assert decide(tmp_path, kai_pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"})) == (
        False,
        ["at-most-two"],
    )


def test_a_broken_allocator_entry_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "rule.yaml").write_text(RULE)
    (tmp_path / "config.yaml").write_text(SITE_CONFIG.replace("podAnnotations", "annotations"))
    loaded = load_rules([str(tmp_path)])
    assert not loaded.ok and loaded.ruleset is None
    assert any("gpuAllocators" in str(error) and "podAnnotations" in str(error) for error in loaded.errors), (
        loaded.errors
    )


def test_a_site_turns_the_shipped_allocator_off(tmp_path: Path) -> None:
    (tmp_path / "rule.yaml").write_text(RULE)
    (tmp_path / "config.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUWebhookConfig\nmetadata: {name: site}\n"
        "spec:\n  gpuAllocators: [{name: kai-scheduler, enabled: false}]\n"
    )
    # not a GPU pod any more: the gpu: true rule does not even match
    assert decide(tmp_path, kai_pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"})) == (True, [])
    loaded = load_rules([str(tmp_path)])
    assert loaded.ruleset is not None and loaded.ruleset.accelerators.allocators == ()
