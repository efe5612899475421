"""A queued Kubeflow v1 job is suspended through its runPolicy, as Kueue's own webhook would.

Kueue suspends every Kubeflow v1 job the same way, `RunPolicy().Suspend = ptr.To(true)`
(kubernetes-sigs/kueue pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go,
KubeflowJob.Suspend). setQueueName may run after Kueue's webhook saw no queue label and left the job
running, so it sets the flag itself; without it the job would start without Kueue's admission.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.rules.rulekit import namespace, run
from tests.support import gpu_pod
from webhook.engine import load_rules

REPO = Path(__file__).resolve().parents[2]
REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}


def kubeflow_job(kind: str) -> dict[str, Any]:
    template = {"spec": copy.deepcopy(gpu_pod()["spec"])}
    api_version = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "train", "namespace": "ml-research"},
        "spec": {REPLICA_SPECS[kind]: {"Worker": {"replicas": 2, "template": template}}},
    }


@pytest.mark.parametrize("kind", sorted(REPLICA_SPECS))
def test_a_queued_kubeflow_job_is_suspended_through_its_run_policy(kind: str, tmp_path: Path) -> None:
    text = (REPO / "rules" / "kueue-queue-name.yaml").read_text()
    site = f"      - kubeflow.org/{kind}\n"  # a site whose Kueue manages the kind
    (tmp_path / "rule.yaml").write_text(
        text if site in text else text.replace("      - batch/Job\n", "      - batch/Job\n" + site)
    )
    result = load_rules(tmp_path)
    assert result.ruleset is not None, result.errors
    decision = run(
        result.ruleset, kubeflow_job(kind), namespace("ml-research", annotations={"gpu-webhook.io/queue": "q"})
    )
    assert decision.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "q"}},
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}},
    ]
