"""cpu-pods-off-gpu-nodes with params.gpuNodeNamePattern: a CPU pod choosing a GPU node by its name,
in every form that names a node (nodeSelector and affinity on kubernetes.io/hostname, matchFields
on metadata.name), is denied; other names are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.rules.rulekit import RULES, namespace, run
from webhook.engine import load_rules

TENANT = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})


@pytest.fixture(scope="module")
def named_pools(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory: Path = tmp_path_factory.mktemp("rules")
    text = (RULES / "cpu-pods-off-gpu-nodes.yaml").read_text()
    assert "gpuNodeNamePattern: ''" in text
    (directory / "rule.yaml").write_text(text.replace("gpuNodeNamePattern: ''", "gpuNodeNamePattern: '^gpu-pool-'"))
    return load_rules(directory).ruleset


def cpu_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}], **spec},
    }


def term(**fields: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [fields]}}}


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": {"kubernetes.io/hostname": "gpu-pool-a-1"}},
        {"affinity": term(matchFields=[{"key": "metadata.name", "operator": "In", "values": ["gpu-pool-a-1"]}])},
        {
            "affinity": term(
                matchExpressions=[
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["cpu-1", "gpu-pool-b"]}
                ]
            )
        },
    ],
)
def test_a_gpu_node_chosen_by_name_is_denied(named_pools: Any, spec: dict[str, Any]) -> None:
    decision = run(named_pools, cpu_pod(**spec), TENANT)
    assert not decision.allowed
    assert "selects GPU nodes" in decision.denial_message


def test_other_node_names_are_allowed(named_pools: Any) -> None:
    spec = {"nodeSelector": {"kubernetes.io/hostname": "cpu-pool-1"}}
    assert run(named_pools, cpu_pod(**spec), TENANT).allowed
    spec = {"affinity": term(matchFields=[{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-pool-a-1"]}])}
    assert run(named_pools, cpu_pod(**spec), TENANT).allowed
