"""Rules on resources and placement: requests = limits, memory/CPU sizing, toleration, affinity, CPU pods off GPU nodes."""

from __future__ import annotations

import jsonpatch
import pytest
import yaml

from tests.rules.rulekit import RULES, example, gpu_pod, namespace, run
from webhook.engine import RuleSet, load_rules


class TestRequestsEqualLimits:
    def test_equal_passes(self, rule_pack):
        assert run(rule_pack("gpu-requests-equal-limits"), gpu_pod(gpus="2")).allowed

    def test_limit_alone_passes(self, rule_pack):
        pod = gpu_pod(gpus=None)
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        assert run(rule_pack("gpu-requests-equal-limits"), pod).allowed

    def test_different_request_is_denied(self, rule_pack):
        decision = run(rule_pack("gpu-requests-equal-limits"), example("replicaset-embedder.yaml"))
        assert decision.denial_message == (
            "[gpu-requests-equal-limits] pod template of ReplicaSet embedder-6d5f7c9b8: container tei requests "
            "nvidia.com/gpu 1 but its limit is 2; set resources.limits equal to resources.requests"
        )


class TestGpuContainerResources:
    def test_sized_container_passes(self, rule_pack):
        assert run(rule_pack("gpu-container-resources"), gpu_pod()).allowed

    def test_limits_count_as_requests(self, rule_pack):
        pod = gpu_pod()
        pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}
        assert run(rule_pack("gpu-container-resources"), pod).allowed

    def test_memory_request_without_limit_is_denied(self, rule_pack):
        pod = gpu_pod(name="loader")
        del pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
        decision = run(rule_pack("gpu-container-resources"), pod)
        assert decision.violations[0].message == (
            "pod loader: container main requests GPUs but sets no resources.limits.memory; size them for model loading"
        )

    def test_only_gpu_containers_are_checked(self, rule_pack):
        pod = gpu_pod()
        pod["spec"]["containers"].append({"name": "sidecar", "image": "envoy"})  # no resources at all
        assert run(rule_pack("gpu-container-resources"), pod).allowed

    def test_job_template_with_gpu_limit_only_is_denied(self, rule_pack):
        decision = run(rule_pack("gpu-container-resources"), example("job-finetune.yaml"))
        assert [v.target for v in decision.violations] == ["pod template of Job lora-finetune"]
        assert "resources.requests.cpu, resources.requests.memory, resources.limits.memory" in decision.denial_message


class TestToleration:
    def test_gpu_pod_gets_the_toleration(self, rule_pack):
        decision = run(rule_pack("gpu-toleration"), gpu_pod())
        assert decision.patch == [
            {
                "op": "add",
                "path": "/spec/tolerations",
                "value": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }
        ]

    def test_equivalent_toleration_is_kept(self, rule_pack):
        pod = gpu_pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
        assert run(rule_pack("gpu-toleration"), pod).patch == []

    def test_cpu_pod_is_left_alone(self, rule_pack):
        assert run(rule_pack("gpu-toleration"), gpu_pod(gpus=None)).patch == []

    def test_mig_slices_get_the_nvidia_toleration(self, rule_pack):
        patch = run(rule_pack("gpu-toleration"), gpu_pod(resource="nvidia.com/mig-1g.10gb")).patch
        assert patch[0]["value"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

    def test_each_vendor_gets_its_own_toleration_and_it_is_stable(self, rule_pack):
        pod = gpu_pod(resource="amd.com/gpu")
        pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        decision = run(rule_pack("gpu-toleration"), pod)
        patched = jsonpatch.apply_patch(pod, decision.patch)
        assert [t["key"] for t in patched["spec"]["tolerations"]] == ["nvidia.com/gpu", "amd.com/gpu"]
        assert run(rule_pack("gpu-toleration"), patched).patch == []


SITE_NODE_LABELS = [
    {"prefix": "nvidia.com/", "key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
    {"prefix": "amd.com/", "key": "feature.node.kubernetes.io/amd-gpu", "operator": "In", "values": ["true"]},
]


@pytest.fixture(scope="module")
def site_affinity(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    """gpu-node-affinity as a site configures it: its nodes' real labels in the per-vendor table."""
    rule = yaml.safe_load((RULES / "gpu-node-affinity.yaml").read_text())
    rule["spec"]["params"]["gpuNode"]["byResourcePrefix"] = SITE_NODE_LABELS
    path = tmp_path_factory.mktemp("site") / "gpu-node-affinity.yaml"
    path.write_text(yaml.safe_dump(rule))
    result = load_rules(path)
    assert result.ok, result.errors
    return result.ruleset


class TestNodeAffinity:
    def test_shipped_table_assumes_no_node_label(self, rule_pack):
        assert run(rule_pack("gpu-node-affinity"), gpu_pod()).patch == []

    def test_requirement_joins_every_existing_term(self, site_affinity):
        terms = [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        ]
        pod = gpu_pod(
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
        )
        decision = run(site_affinity, pod)
        base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
        assert [op["path"] for op in decision.patch] == [f"{base}/0/matchExpressions/-", f"{base}/1/matchExpressions/-"]
        assert decision.patch[0]["value"] == {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}

    def test_each_vendor_gets_its_own_label(self, site_affinity):
        pod = gpu_pod(resource="amd.com/gpu")
        patched = jsonpatch.apply_patch(pod, run(site_affinity, pod).patch)
        terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "feature.node.kubernetes.io/amd-gpu", "operator": "In", "values": ["true"]}]}
        ]

    def test_a_pod_of_two_vendors_needs_both_in_one_term_and_is_stable(self, site_affinity):
        pod = gpu_pod()
        pod["spec"]["containers"].append({"name": "rocm", "resources": {"limits": {"amd.com/gpu": "1"}}})
        decision = run(site_affinity, pod)
        patched = jsonpatch.apply_patch(pod, decision.patch)
        terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert [e["key"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]] == [
            "nvidia.com/gpu.present",
            "feature.node.kubernetes.io/amd-gpu",
        ]
        assert run(site_affinity, patched).patch == []  # idempotent

    def test_cpu_pod_is_left_alone(self, site_affinity):
        assert run(site_affinity, gpu_pod(gpus=None)).patch == []


TENANT_NS = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})


class TestCpuPodsOffGpuNodes:
    def test_cpu_pod_tolerating_the_gpu_taint_is_denied(self, rule_pack):
        pod = gpu_pod(name="etl", gpus=None, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
        decision = run(rule_pack("cpu-pods-off-gpu-nodes"), pod, TENANT_NS)
        assert decision.denial_message == (
            "[cpu-pods-off-gpu-nodes] pod etl requests no GPU but tolerates the GPU taint nvidia.com/gpu; "
            "remove the toleration or request a GPU"
        )

    def test_cpu_pod_selecting_gpu_nodes_is_denied(self, rule_pack):
        pod = gpu_pod(gpus=None, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
        assert not run(rule_pack("cpu-pods-off-gpu-nodes"), pod, TENANT_NS).allowed

    def test_gpu_pod_may_tolerate(self, rule_pack):
        pod = gpu_pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
        assert run(rule_pack("cpu-pods-off-gpu-nodes"), pod, TENANT_NS).allowed

    def _agent(self, name: str, ns: str) -> dict:
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "template": {
                    "spec": {
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "agent", "image": "quay.io/prometheus/node-exporter:v1.8.2"}],
                    }
                }
            },
        }

    def test_node_agents_in_platform_namespaces_pass(self, rule_pack):
        rules = rule_pack("cpu-pods-off-gpu-nodes")
        for agent in ("prometheus-node-exporter", "fluent-bit", "ebs-csi-node"):
            assert run(rules, self._agent(agent, "monitoring"), namespace("monitoring")).allowed
        pod = gpu_pod(ns="monitoring", gpus=None, tolerations=[{"operator": "Exists"}])
        pod["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "anything", "controller": True}]
        assert run(rules, pod, namespace("monitoring")).allowed

    def test_tenant_daemonsets_are_denied_whatever_their_name(self, rule_pack):
        rules = rule_pack("cpu-pods-off-gpu-nodes")
        assert not run(rules, self._agent("dcgm-exporter", "team-a"), TENANT_NS).allowed


class TestVisibleDevices:
    def test_visible_devices_without_gpu_is_denied(self, rule_pack):
        pod = gpu_pod(name="sneaky", gpus=None)
        pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
        decision = run(rule_pack("no-visible-devices-without-gpu"), pod)
        assert "container main sets NVIDIA_VISIBLE_DEVICES without requesting a GPU" in decision.denial_message

    def test_void_is_allowed(self, rule_pack):
        pod = gpu_pod(gpus=None)
        pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
        assert run(rule_pack("no-visible-devices-without-gpu"), pod).allowed
