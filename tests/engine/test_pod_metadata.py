"""`podMetadata`: the metadata of the target's pod, the counterpart of `podSpec` (issue 29).

A Pod's own `metadata`; for a pod template (autogen), the template's `metadata`, not the
workload's; null where the target has several pod specs, as `podSpec` is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, evaluate

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: team-label}}
spec:
  action: Deny
  match: {{kinds: {kinds}, operations: [CREATE]}}
  autogen: {autogen}
  validate:
    expression: "has(podMetadata.labels) && 'team' in podMetadata.labels"
    messageExpression: "target + ' has no team label'"
"""


def _decide(tmp_path: Path, obj: dict[str, Any], kinds: str = "[Pod]", autogen: str = "true") -> Any:
    ruleset = load_rule_text(tmp_path, RULE.format(kinds=kinds, autogen=autogen))
    return evaluate(ruleset, AdmissionInput.offline(obj, namespace="team-a"))


def _deployment(pod_labels: dict[str, str] | None, labels: dict[str, str] | None) -> dict[str, Any]:
    pod = gpu_pod()
    template: dict[str, Any] = {"spec": pod["spec"]}
    if pod_labels is not None:
        template["metadata"] = {"labels": pod_labels}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "labels": labels or {}},
        "spec": {"template": template},
    }


def _job(pod_labels: dict[str, str]) -> dict[str, Any]:
    pod = gpu_pod()
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"template": {"metadata": {"labels": pod_labels}, "spec": pod["spec"]}},
    }


def test_on_a_pod_it_is_the_pods_metadata(tmp_path: Path) -> None:
    labelled = gpu_pod()
    labelled["metadata"]["labels"] = {"team": "a"}
    assert _decide(tmp_path, labelled).allowed
    assert not _decide(tmp_path / "2", gpu_pod()).allowed


def test_on_a_template_it_is_the_templates_metadata_not_the_workloads(tmp_path: Path) -> None:
    # the Deployment carries the label, its pods do not: autogen judges the pods
    denied = _decide(tmp_path, _deployment(pod_labels={"app": "web"}, labels={"team": "a"}))
    assert not denied.allowed
    assert "pod template of Deployment web has no team label" in denied.denial_message
    assert _decide(tmp_path / "2", _deployment(pod_labels={"team": "a"}, labels=None)).allowed
    assert _decide(tmp_path / "3", _job({"team": "a"})).allowed
    assert not _decide(tmp_path / "4", _job({"app": "x"})).allowed


def test_a_template_without_metadata_gives_null(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        RULE.format(kinds="[Pod]", autogen="true").replace(
            "has(podMetadata.labels) && 'team' in podMetadata.labels", "podMetadata == null"
        ),
    )
    assert evaluate(ruleset, AdmissionInput.offline(_deployment(None, None), namespace="team-a")).allowed


def test_a_rule_on_the_workload_kind_sees_its_one_templates_metadata(tmp_path: Path) -> None:
    deployment = _deployment(pod_labels={"team": "a"}, labels=None)
    assert _decide(tmp_path, deployment, kinds="[Deployment]", autogen="false").allowed
    assert not _decide(tmp_path / "2", _deployment({"app": "x"}, {"team": "a"}), "[Deployment]", "false").allowed
