"""Cost labels, GPU sharing (MIG, time-slicing, ceiling), tenant isolation, serving and spot warnings."""

from __future__ import annotations

import copy

from tests.rules.rulekit import example, gpu_pod, namespace, run
from webhook.engine.mutate import MutationContext
from webhook.engine.patch import Patcher
from webhook.engine.resources import DEFAULT
from webhook.engine.workloads import Target

TENANT = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})


class TestCostLabels:
    def test_namespace_labels_are_added_as_labels_only(self, rule_pack):
        ns = namespace("team-a", labels={"team": "llm", "cost-center": "cc-4711", "other": "x"})
        decision = run(rule_pack("gpu-cost-labels"), gpu_pod(), ns)
        assert decision.patch == [
            {"op": "add", "path": "/metadata/labels", "value": {"team": "llm"}},
            {"op": "add", "path": "/metadata/labels/cost-center", "value": "cc-4711"},
        ]

    def test_namespace_values_win_and_missing_ones_are_unattributed(self, rule_pack):
        pod = gpu_pod()
        pod["metadata"]["labels"] = {"team": "own", "cost-center": "cc-0001"}
        decision = run(rule_pack("gpu-cost-labels"), pod, namespace("team-a", labels={"team": "llm"}))
        assert decision.mutated["metadata"]["labels"] == {"team": "llm", "cost-center": "unattributed"}
        again = run(rule_pack("gpu-cost-labels"), decision.mutated, namespace("team-a", labels={"team": "llm"}))
        assert again.patch == []

    def test_templates_get_the_labels(self, rule_pack):
        decision = run(
            rule_pack("gpu-cost-labels"),
            example("statefulset-triton.yaml"),
            namespace("ml-serving", labels={"team": "serve"}),
        )
        assert decision.patch[0] == {"op": "add", "path": "/spec/template/metadata/labels/team", "value": "serve"}

    def test_cpu_pods_are_not_labelled(self, rule_pack):
        assert (
            run(rule_pack("gpu-cost-labels"), gpu_pod(gpus=None), namespace("team-a", labels={"team": "llm"})).patch
            == []
        )


class TestMigProfiles:
    def ns(self, profiles: str) -> dict:
        return namespace("team-a", annotations={"gpu-webhook.io/allowed-mig-profiles": profiles})

    def test_profile_outside_the_namespace_set_is_denied(self, rule_pack):
        pod = gpu_pod(name="big", resource="nvidia.com/mig-3g.40gb")
        decision = run(rule_pack("mig-profiles"), pod, self.ns("1g.10gb, 2g.20gb"))
        assert decision.denial_message == (
            "[mig-profiles] pod big: container main requests MIG profile 3g.40gb; this namespace allows 1g.10gb, 2g.20gb"
        )

    def test_allowed_profile_and_default_pass(self, rule_pack):
        pod = gpu_pod(resource="nvidia.com/mig-1g.10gb")
        assert run(rule_pack("mig-profiles"), pod, self.ns("1g.10gb")).allowed
        assert run(rule_pack("mig-profiles"), pod, namespace("team-a")).allowed  # defaultProfiles: ["*"]

    def test_whole_gpus_are_not_mig(self, rule_pack):
        assert run(rule_pack("mig-profiles"), gpu_pod(), self.ns("1g.10gb")).allowed

    def test_cronjob_template_is_checked(self, rule_pack):
        decision = run(
            rule_pack("mig-profiles"),
            example("cronjob-nightly-eval.yaml"),
            namespace("ml-research", annotations={"gpu-webhook.io/allowed-mig-profiles": "2g.20gb"}),
        )
        assert decision.violations[0].target == "pod template of CronJob nightly-eval"


class TestTimeSlicing:
    prod = namespace("serving", labels={"environment": "production"})

    def test_shared_gpu_in_production_is_denied(self, rule_pack):
        decision = run(
            rule_pack("no-timeslicing-in-production"), gpu_pod(name="p", resource="nvidia.com/gpu.shared"), self.prod
        )
        assert decision.denial_message == (
            "[no-timeslicing-in-production] pod p: container main requests a time-sliced GPU (nvidia.com/gpu.shared) "
            "in a production namespace; request nvidia.com/gpu or a MIG profile"
        )

    def test_shared_gpu_elsewhere_and_whole_gpu_in_production_pass(self, rule_pack):
        rules = rule_pack("no-timeslicing-in-production")
        assert run(
            rules, gpu_pod(resource="nvidia.com/gpu.shared"), namespace("dev", labels={"environment": "dev"})
        ).allowed
        assert run(rules, gpu_pod(), self.prod).allowed


class TestCeiling:
    def test_default_ceiling_is_one_node(self, rule_pack):
        rules = rule_pack("gpu-per-pod-ceiling")
        assert run(rules, gpu_pod(gpus="8"), namespace("team-a")).allowed
        decision = run(rules, gpu_pod(name="huge", gpus="16"), namespace("team-a"))
        assert decision.denial_message == (
            "[gpu-per-pod-ceiling] pod huge requests 16 GPUs; at most 8 per pod are allowed in this namespace"
        )

    def test_namespace_annotation_lowers_it(self, rule_pack):
        ns = namespace("team-a", annotations={"gpu-webhook.io/max-gpus-per-pod": "2"})
        assert not run(rule_pack("gpu-per-pod-ceiling"), gpu_pod(gpus="4"), ns).allowed

    def test_counts_like_the_scheduler(self, rule_pack):
        """An init container's GPUs are released before the app starts: max, not sum."""
        pod = gpu_pod(gpus="2")
        pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        ns = namespace("team-a", annotations={"gpu-webhook.io/max-gpus-per-pod": "2"})
        assert run(rule_pack("gpu-per-pod-ceiling"), pod, ns).allowed

    def test_bad_annotation_fails_closed_with_a_reason(self, rule_pack):
        ns = namespace("team-a", annotations={"gpu-webhook.io/max-gpus-per-pod": "lots"})
        decision = run(rule_pack("gpu-per-pod-ceiling"), gpu_pod(), ns)
        assert not decision.allowed and "could not be evaluated" in decision.denial_message


class TestIsolation:
    def test_privileged_init_container_in_tenant_namespace_is_denied(self, rule_pack):
        pod = gpu_pod(name="p", gpus=None)
        pod["spec"]["initContainers"] = [{"name": "setup", "securityContext": {"privileged": True}}]
        decision = run(rule_pack("no-privileged-in-tenants"), pod, TENANT)
        assert decision.violations[0].message.startswith("pod p: container setup is privileged")

    def test_privileged_outside_tenants_and_unprivileged_pass(self, rule_pack):
        pod = gpu_pod()
        assert run(rule_pack("no-privileged-in-tenants"), pod, TENANT).allowed
        pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        assert run(rule_pack("no-privileged-in-tenants"), pod, namespace("gpu-operator", labels={})).allowed

    def test_device_and_driver_host_paths_are_denied(self, rule_pack):
        rules = rule_pack("no-gpu-device-hostpath")
        for path in (
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev",
            "/dev/",
            "/",
            "/run/nvidia/driver",
            "/usr/local/nvidia/lib64",
            "/proc",  # contains /proc/driver/nvidia
            "/var/lib/kubelet/pod-resources/kubelet.sock",
        ):
            pod = gpu_pod(name="p", volumes=[{"name": "h", "hostPath": {"path": path}}])
            decision = run(rules, pod, TENANT)
            assert decision.denial_message == (
                f"[no-gpu-device-hostpath] pod p: volume h mounts host path {path}, which exposes GPU devices, the "
                "driver or the kubelet's device sockets; request GPUs through resources.limits"
            ), path

    def test_other_host_paths_pass(self, rule_pack):
        rules = rule_pack("no-gpu-device-hostpath")
        for path in ("/data", "/devices", "/var/lib/docker/containers", "/var/log/pods", "/etc/ssl/certs"):
            assert run(rules, gpu_pod(volumes=[{"name": "h", "hostPath": {"path": path}}]), TENANT).allowed, path

    def test_host_ipc_on_gpu_pod_in_tenant_namespace_is_denied(self, rule_pack):
        pod = gpu_pod(name="nccl", hostIPC=True, hostPID=False)
        decision = run(rule_pack("no-host-namespaces-on-gpu-pods"), pod, TENANT)
        assert decision.denial_message.startswith(
            "[no-host-namespaces-on-gpu-pods] pod nccl requests GPUs and sets hostIPC: true"
        )
        assert run(
            rule_pack("no-host-namespaces-on-gpu-pods"), gpu_pod(hostIPC=True), namespace("team-a", labels={})
        ).allowed


class TestServingReadiness:
    def test_gpu_deployment_without_probe_warns(self, rule_pack):
        decision = run(rule_pack("serving-readiness-probe"), example("deployment-vllm-serving.yaml"))
        assert decision.allowed
        assert [w.message for w in decision.warnings] == [
            "pod template of Deployment vllm-mistral-7b: GPU container vllm has no readinessProbe; models take minutes to load"
        ]
        assert all(len(w.message) < 120 for w in decision.warnings)

    def test_probe_present_or_training_kind_is_quiet(self, rule_pack):
        assert run(rule_pack("serving-readiness-probe"), example("statefulset-triton.yaml")).warnings == []
        assert run(rule_pack("serving-readiness-probe"), example("job-finetune.yaml")).warnings == []


class TestSpotCheckpoint:
    def test_spot_worker_without_checkpoint_volume_warns(self, rule_pack):
        decision = run(rule_pack("spot-training-checkpoint"), example("pytorchjob-llama2.yaml"))
        assert [w.message for w in decision.warnings] == [
            "replica Worker of PyTorchJob llama2-training is on spot capacity with no checkpoint volume; mount a PVC"
        ]
        assert all(len(w.message) < 120 for w in decision.warnings)

    def test_checkpoint_volume_or_on_demand_is_quiet(self, rule_pack):
        obj = example("pytorchjob-llama2.yaml")
        worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        with_pvc = copy.deepcopy(obj)
        with_pvc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}
        ]
        assert run(rule_pack("spot-training-checkpoint"), with_pvc).warnings == []
        worker["tolerations"] = []
        worker["nodeSelector"] = {"eks.amazonaws.com/capacityType": "ON_DEMAND"}
        assert run(rule_pack("spot-training-checkpoint"), obj).warnings == []
        worker["nodeSelector"] = {"eks.amazonaws.com/capacityType": "SPOT"}
        assert len(run(rule_pack("spot-training-checkpoint"), obj).warnings) == 1


class TestVisibleDevicesVoidOnEphemeralContainers:
    """kubectl debug adds an ephemeral container through pods/ephemeralcontainers (an UPDATE).

    The engine hands the subresource to the mutation; these tests drive the rule's own addEnv
    mutation with that context, as evaluate does once it passes `sub_resource` on.
    """

    def _apply(self, rule_pack, pod: dict, operation: str, sub_resource: str) -> list[dict]:
        (rule,) = rule_pack("visible-devices-void").rules
        patcher = Patcher(copy.deepcopy(pod))
        target = Target(description="pod p", root=(), pod_specs=(("spec",),), is_pod=True)
        context = MutationContext(patcher, target, operation, lambda e: None, DEFAULT, sub_resource=sub_resource)
        for mutation in rule.mutations:
            mutation.apply(context)
        return patcher.operations

    def _running_pod(self) -> dict:
        pod = gpu_pod(name="p")
        pod["spec"]["containers"].append({"name": "side", "image": "busybox"})  # created before the webhook
        pod["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04"}]
        return pod

    def test_the_debug_container_gets_void(self, rule_pack):
        ops = self._apply(rule_pack, self._running_pod(), "UPDATE", "ephemeralcontainers")
        assert ops == [
            {
                "op": "add",
                "path": "/spec/ephemeralContainers/0/env",
                "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
            }
        ]

    def test_a_plain_update_changes_no_container(self, rule_pack):
        assert self._apply(rule_pack, self._running_pod(), "UPDATE", "") == []
