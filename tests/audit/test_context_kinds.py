"""PriorityClasses, RuntimeClasses, DeviceClasses and GPUPolicyExceptions in an audit's input are context, as
Namespaces are, not audited objects; and audit predicts no priority class the cluster does not have.

The live webhook sets priorityClassName only to a class its PriorityClass watch lists (the apiserver's
Priority plugin refuses a pod naming a class that does not exist: "no PriorityClass with name ... was
found"): priority-class-by-workload's `priorityClasses != null && class in priorityClasses`. Audit reads
the PriorityClasses in its input (or the cluster's, with --cluster) the same way.
"""

from __future__ import annotations

import json

from tests.audit.conftest import PACK_RULES

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm, namespace: team-a}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm:0.5
          resources:
            requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
            limits: {memory: 16Gi, nvidia.com/gpu: "1"}
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"
CONTEXT = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gpu-critical}
value: 100000
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec: {}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {name: lab, namespace: team-a}
spec:
  rules: [gpu-toleration]
  reason: the lab's nodes are untainted
"""


def audited(run, tmp_path, *documents: str) -> dict:
    manifest = tmp_path / "in.yaml"
    manifest.write_text("---\n".join(documents))
    _, out, _ = run(str(manifest), "--rules", PACK_RULES, "-o", "json", "--fail-on", "never")
    return json.loads(out)


def patch_paths(report: dict) -> list[str]:
    (obj,) = report["objects"]
    return [operation["path"] for operation in obj.get("patch", [])]


def test_context_kinds_are_not_audited_objects(run, tmp_path):
    report = audited(run, tmp_path, NAMESPACE, CONTEXT, DEPLOYMENT)
    assert [o["kind"] for o in report["objects"]] == ["Deployment"]


def test_a_class_the_input_has_is_predicted_one_it_lacks_is_not(run, tmp_path):
    with_class = patch_paths(audited(run, tmp_path, NAMESPACE, CONTEXT, DEPLOYMENT))
    assert "/spec/template/spec/priorityClassName" in with_class
    without = patch_paths(audited(run, tmp_path, NAMESPACE, DEPLOYMENT))
    assert "/spec/template/spec/priorityClassName" not in without and without  # the rest is still predicted
    other = CONTEXT.replace("gpu-critical", "something-else")
    assert "/spec/template/spec/priorityClassName" not in patch_paths(
        audited(run, tmp_path, NAMESPACE, other, DEPLOYMENT)
    )


KUEUE = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {nvidia.com/gpu.present: "true"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: gpu-only}
spec:
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors: [{name: a100, resources: [{name: cpu, nominalQuota: 8}, {name: memory, nominalQuota: 8Gi}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpu, namespace: team-a}
spec: {clusterQueue: gpu-only}
"""
TENANT = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {gpu-webhook.io/tenant: 'true'}}\n"
CPU_JOB = """apiVersion: batch/v1
kind: Job
metadata: {name: etl, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: gpu}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - {name: main, image: etl:1, resources: {limits: {cpu: "4", memory: 8Gi}}}
"""


def queue_warnings(report: dict) -> list[str]:
    (obj,) = report["objects"]
    return [m for r in obj["rules"] if r["rule"] == "cpu-workload-in-gpu-only-queue" for m in r["messages"]]


def test_kueue_s_queues_and_flavors_are_context_and_warn_as_the_server_would(run, tmp_path):
    report = audited(run, tmp_path, TENANT, KUEUE, CPU_JOB)
    assert [o["kind"] for o in report["objects"]] == ["Job"]  # LocalQueue, ClusterQueue, ResourceFlavor: context
    (warning,) = queue_warnings(report)
    assert "LocalQueue gpu (ClusterQueue gpu-only) admits it only onto GPU nodes" in warning
    # as PriorityClasses, they count from where they appear: a Job before them is judged without them
    assert queue_warnings(audited(run, tmp_path, TENANT, CPU_JOB, KUEUE)) == []
    # and a queue whose flavor is no GPU node's warns nothing
    assert (
        queue_warnings(audited(run, tmp_path, TENANT, KUEUE.replace("nvidia.com/gpu.present", "pool"), CPU_JOB)) == []
    )
