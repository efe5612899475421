"""Kueue queue and priority labels, PriorityClass by workload type, and the tenant's allowed classes."""

from __future__ import annotations

import copy

from tests.rules.rulekit import PACK_PRIORITY_CLASSES, RULES, example, gpu_pod, namespace, run
from webhook.engine import load_rules

QUEUE = "/metadata/labels/kueue.x-k8s.io~1queue-name"


def job(name: str = "train", ns: str = "ml-research", gpus: int = 1, **metadata: object) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}, **metadata},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                }
            }
        },
    }


class TestQueueName:
    def test_job_gets_the_namespace_queue_and_is_suspended(self, rule_pack):
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"})
        decision = run(rule_pack("kueue-queue-name"), job(), ns)
        assert decision.patch == [
            {"op": "add", "path": QUEUE, "value": "research"},
            {"op": "add", "path": "/spec/suspend", "value": True},
        ]

    def test_queue_from_params_map(self, tmp_path):
        rule = (RULES / "kueue-queue-name.yaml").read_text().replace("queues: {}", "queues: {ml-research: fallback}")
        (tmp_path / "rule.yaml").write_text(rule)
        rules = load_rules(tmp_path).ruleset
        decision = run(rules, example("jobset-llm-pretrain.yaml"), namespace("ml-research"))
        assert decision.patch == [
            {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "fallback"}},
            {"op": "add", "path": "/spec/suspend", "value": True},  # JobSet.Suspend() in Kueue
        ]

    def test_existing_label_is_kept(self, rule_pack):
        obj = job()
        obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "mine"
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"})
        assert run(rule_pack("kueue-queue-name"), obj, ns).patch == []

    def test_never_on_update(self, rule_pack):
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"})
        assert run(rule_pack("kueue-queue-name"), job(), ns, operation="UPDATE", old=job()).patch == []

    def test_jobs_of_a_jobset_are_the_jobsets_business(self, rule_pack):
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"})
        child = job(
            ownerReferences=[
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "x", "controller": True}
            ]
        )
        assert run(rule_pack("kueue-queue-name"), child, ns).patch == []
        from_cron = job(
            ownerReferences=[{"apiVersion": "batch/v1", "kind": "CronJob", "name": "x", "controller": True}]
        )
        assert run(rule_pack("kueue-queue-name"), from_cron, ns).patch[0]["path"] == QUEUE

    def test_bare_pods_are_labelled_controller_pods_are_not(self, rule_pack):
        """Kueue's pod integration reads the label on bare Pods; pods of a controller get it from the parent."""
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"})
        patch = run(rule_pack("kueue-queue-name"), gpu_pod(ns="ml-research"), ns).patch
        assert patch == [{"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "research"}}]
        owned = gpu_pod(ns="ml-research")
        owned["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "controller": True}
        ]
        assert run(rule_pack("kueue-queue-name"), owned, ns).patch == []

    def test_a_queue_name_longer_than_a_label_value_fails_the_rule(self, rule_pack):
        name = "q" * 64  # a valid LocalQueue name (DNS-1123 subdomain), not a valid label value
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": name})
        decision = run(rule_pack("kueue-queue-name"), job(), ns)
        assert decision.patch == [] and "not a valid label value" in decision.errors[0].message
        ns["metadata"]["annotations"]["gpu-webhook.io/queue"] = "q" * 63
        assert run(rule_pack("kueue-queue-name"), job(), ns).patch[0]["value"] == "q" * 63

    def test_invalid_queue_name_fails_the_rule(self, rule_pack):
        ns = namespace("ml-research", annotations={"gpu-webhook.io/queue": "Not A Queue"})
        decision = run(rule_pack("kueue-queue-name"), job(), ns)
        assert decision.patch == [] and "not a DNS-1123 subdomain" in decision.errors[0].message


class TestQueueRequired:
    required = namespace("ml-research", labels={"gpu-webhook.io/queue-required": "true"})

    def test_gpu_job_without_queue_is_denied(self, rule_pack):
        decision = run(rule_pack("kueue-queue-required"), example("tfjob-resnet.yaml"), self.required)
        assert decision.denial_message == (
            "[kueue-queue-required] TFJob resnet50 requests GPUs in namespace ml-research, which requires Kueue, but "
            "Kueue does not manage TFJob in this cluster; use a kind it manages (TrainJob, JobSet, Job) or enable its "
            "integration and list it in params.managedKinds"
        )
        obj = job()
        assert run(rule_pack("kueue-queue-required"), obj, self.required).denial_message == (
            "[kueue-queue-required] Job train requests GPUs in namespace ml-research, which requires a Kueue "
            "queue; set the label kueue.x-k8s.io/queue-name to a LocalQueue"
        )

    def test_job_with_queue_passes(self, rule_pack):
        obj = job()
        obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "research"
        assert run(rule_pack("kueue-queue-required"), obj, self.required).allowed

    def test_empty_queue_label_is_denied(self, rule_pack):
        obj = job()
        obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = ""
        assert not run(rule_pack("kueue-queue-required"), obj, self.required).allowed

    def test_other_namespaces_are_free(self, rule_pack):
        assert run(rule_pack("kueue-queue-required"), job(), namespace("ml-research")).allowed

    def test_pack_labels_before_it_checks(self, pack):
        """kueue-queue-name's patch satisfies kueue-queue-required in the same evaluation."""
        ns = namespace(
            "ml-research",
            labels={"gpu-webhook.io/queue-required": "true"},
            annotations={"gpu-webhook.io/queue": "research"},
        )
        decision = run(pack, example("mpijob-horovod.yaml"), ns)
        assert decision.allowed, decision.denial_message


class TestPriorityClassByWorkload:
    def test_serving_deployment_gets_the_critical_class(self, rule_pack):
        decision = run(
            rule_pack("priority-class-by-workload"),
            example("deployment-vllm-serving.yaml"),
            namespace("team-a"),
            priority_classes=PACK_PRIORITY_CLASSES,
        )
        assert decision.patch == [
            {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "gpu-critical"}
        ]

    def test_training_job_gets_the_batch_class_on_every_gpu_replica(self, rule_pack):
        decision = run(
            rule_pack("priority-class-by-workload"),
            example("pytorchjob-llama2.yaml"),
            namespace("team-a"),
            priority_classes=PACK_PRIORITY_CLASSES,
        )
        assert [(op["path"], op["value"]) for op in decision.patch] == [
            ("/spec/pytorchReplicaSpecs/Master/template/spec/priorityClassName", "gpu-batch"),
            ("/spec/pytorchReplicaSpecs/Worker/template/spec/priorityClassName", "gpu-batch"),
        ]

    def test_workload_type_label_overrides_the_kind(self, rule_pack):
        obj = example("deployment-vllm-serving.yaml")
        obj["metadata"]["labels"]["gpu-webhook.io/workload-type"] = "training"
        assert (
            run(
                rule_pack("priority-class-by-workload"),
                obj,
                namespace("team-a"),
                priority_classes=PACK_PRIORITY_CLASSES,
            ).patch[0]["value"]
            == "gpu-batch"
        )

    def test_existing_class_is_kept(self, rule_pack):
        obj = example("deployment-vllm-serving.yaml")
        obj["spec"]["template"]["spec"]["priorityClassName"] = "custom"
        assert (
            run(
                rule_pack("priority-class-by-workload"),
                obj,
                namespace("team-a"),
                priority_classes=PACK_PRIORITY_CLASSES,
            ).patch
            == []
        )

    def test_labelled_pod_gets_the_class_and_loses_the_resolved_priority(self, rule_pack):
        pod = gpu_pod()
        pod["metadata"]["labels"] = {"gpu-webhook.io/workload-type": "serving"}
        decision = run(
            rule_pack("priority-class-by-workload"), pod, namespace("team-a"), priority_classes=PACK_PRIORITY_CLASSES
        )
        assert decision.patch == [
            {"op": "add", "path": "/spec/priorityClassName", "value": "gpu-critical"},
            {"op": "remove", "path": "/spec/priority"},
        ]

    def test_bare_pod_without_label_is_left_alone(self, rule_pack):
        assert (
            run(
                rule_pack("priority-class-by-workload"),
                gpu_pod(),
                namespace("team-a"),
                priority_classes=PACK_PRIORITY_CLASSES,
            ).patch
            == []
        )


class TestKueuePriorityClass:
    def test_job_gets_the_training_workload_priority_class(self, rule_pack):
        decision = run(rule_pack("kueue-priority-class"), job(), namespace("ml-research"))
        assert decision.patch == [
            {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "training-batch"}
        ]

    def test_type_label_and_existing_value(self, rule_pack):
        obj = job()
        obj["metadata"]["labels"]["gpu-webhook.io/workload-type"] = "serving"
        ns = namespace("ml-research")
        assert run(rule_pack("kueue-priority-class"), obj, ns).patch[0]["value"] == "serving-critical"
        obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "mine"
        assert run(rule_pack("kueue-priority-class"), obj, ns).patch == []

    def test_deployments_are_kueue_workloads_that_serve(self, rule_pack):
        deployment = example("deployment-vllm-serving.yaml")
        patch = run(rule_pack("kueue-priority-class"), deployment, namespace("ml-serving")).patch
        assert [op["path"] for op in patch] == ["/metadata/labels/kueue.x-k8s.io~1priority-class"]
        assert patch[0]["value"] == "serving-critical"

    def test_no_class_outside_the_namespace_allowed_set_is_injected(self, rule_pack):
        ns = namespace("ml-research", annotations={"gpu-webhook.io/allowed-workload-priority-classes": "low"})
        assert run(rule_pack("kueue-priority-class"), job(), ns).patch == []


class TestPriorityClassAllowed:
    tenant = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})

    def test_class_outside_the_default_set_is_denied(self, rule_pack):
        decision = run(
            rule_pack("priority-class-allowed"),
            gpu_pod(name="p", priorityClassName="system-cluster-critical"),
            self.tenant,
        )
        assert decision.denial_message == (
            "[priority-class-allowed] pod p uses priorityClassName system-cluster-critical, which namespace team-a "
            "may not use; allowed: gpu-batch,gpu-critical"
        )

    def test_namespace_annotation_sets_the_allowed_set(self, rule_pack):
        ns = copy.deepcopy(self.tenant)
        ns["metadata"]["annotations"] = {"gpu-webhook.io/allowed-priority-classes": "gpu-batch, research-high"}
        assert run(rule_pack("priority-class-allowed"), gpu_pod(priorityClassName="research-high"), ns).allowed
        assert not run(rule_pack("priority-class-allowed"), gpu_pod(priorityClassName="gpu-critical"), ns).allowed

    def test_no_class_and_non_tenants_pass(self, rule_pack):
        assert run(rule_pack("priority-class-allowed"), gpu_pod(), self.tenant).allowed
        platform = namespace("team-a", labels={})
        assert run(
            rule_pack("priority-class-allowed"), gpu_pod(priorityClassName="system-node-critical"), platform
        ).allowed
