"""Builders for the rule-pack tests: namespaces, pods as the apiserver sends them, examples."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from webhook.engine import AdmissionInput, Decision, RuleSet, evaluate
from webhook.kubeyaml import plain_document

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
EXAMPLES = ROOT / "examples"


def namespace(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def example(name: str) -> dict:
    return plain_document((EXAMPLES / name).read_text())


def gpu_pod(
    name: str = "p",
    ns: str = "team-a",
    gpus: str | None = "1",
    resource: str = "nvidia.com/gpu",
    **spec: Any,
) -> dict:
    """A Pod as the apiserver sends it: namespace set, spec.priority resolved to 0."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    if gpus is not None:
        resources["requests"][resource] = gpus
        resources["limits"][resource] = gpus
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"priority": 0, "containers": [{"name": "main", "image": "cuda:12", "resources": resources}]},
    }
    pod["spec"].update(copy.deepcopy(spec))
    return pod


# The PriorityClasses the pack's priority rules name, as the server's watch would show them
PACK_PRIORITY_CLASSES = {
    "gpu-batch": {"value": 1000, "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False},
    "gpu-critical": {"value": 100000, "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False},
}


def run(
    ruleset: RuleSet,
    obj: dict,
    ns_object: dict | None = None,
    operation: str = "CREATE",
    old: dict | None = None,
    priority_classes: dict | None = None,
) -> Decision:
    ns = obj.get("metadata", {}).get("namespace")
    admission = AdmissionInput(
        object=obj,
        old_object=old,
        operation=operation,
        namespace=ns,
        namespace_object=ns_object,
        priority_classes=priority_classes,
    )
    return evaluate(ruleset, admission)
