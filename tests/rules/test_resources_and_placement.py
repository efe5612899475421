"""Rules on resources and placement: requests = limits, memory/CPU sizing, toleration, affinity, CPU pods off GPU nodes."""

from __future__ import annotations

from tests.rules.rulekit import example, gpu_pod, namespace, run


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


class TestNodeAffinity:
    def test_requirement_joins_every_existing_term(self, rule_pack):
        terms = [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        ]
        pod = gpu_pod(
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
        )
        decision = run(rule_pack("gpu-node-affinity"), pod)
        base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
        assert [op["path"] for op in decision.patch] == [f"{base}/0/matchExpressions/-", f"{base}/1/matchExpressions/-"]
        assert decision.patch[0]["value"] == {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}


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
