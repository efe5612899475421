"""The benchmarks' workloads: named AdmissionReviews, serialised, and generated rule sets for the scaling runs.

The objects are the realistic ones of tests/support/reviews.py (env, volume mounts, probes,
resources), so parse and CEL costs are representative; by default each review is the one a
kube-apiserver sends (tests/support/apiserver.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.support import apiserver
from tests.support.reviews import job, pod, pytorch_job, review

# The named workloads every run uses; "mix" cycles through all of them.
WORKLOADS: dict[str, Any] = {
    "gpu-pod": lambda: pod(1, 1),
    "cpu-pod": lambda: pod(1, 0),
    "gpu-pod-10c": lambda: pod(10, 1),
    "gpu-pod-50c": lambda: pod(50, 1),
    "job": lambda: job(2, 1),
    "pytorchjob": lambda: pytorch_job(),
}


def bodies(workload: str, endpoint: str = "mutate") -> list[bytes]:
    """Serialised reviews for one workload (or every one for "mix"), each with its own uid.

    By default shaped as a kube-apiserver sends them to `endpoint` (tests/support/apiserver.py:
    defaulted, with managedFields, userInfo and options; the validating phase's object has been
    through the registry). A `plain-` prefix ("plain-gpu-pod", "plain-mix") gives the objects as
    users write them (the request without what the apiserver adds).
    """
    plain = workload.startswith("plain-")
    name = workload.removeprefix("plain-")
    names = list(WORKLOADS) if name == "mix" else [name]
    if plain:
        return [orjson.dumps(review(WORKLOADS[n]())) for n in names for _ in range(4)]
    validating = endpoint == "validate"
    return [orjson.dumps(apiserver.review(WORKLOADS[n](), validating)) for n in names for _ in range(4)]


def namespace() -> dict[str, Any]:
    """The tenant Namespace every workload is created in, as the server's watch cache holds it."""
    return apiserver.namespace("team-a")


def write_generated_rules(directory: Path, total: int, matching: int) -> Path:
    """`matching` Pod rules that all match a GPU pod, plus `total - matching` rules for other kinds.

    The unrelated rules are as heavy as the matching ones (a CEL validation), so any cost
    they add would show; the (kind, operation) index is what should keep them free.
    """
    directory.mkdir(parents=True, exist_ok=True)
    documents = []
    for i in range(total):
        kind = "Pod" if i < matching else f"Widget{i % 50}"
        documents.append(
            f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: generated-{i}
spec:
  action: Warn
  match:
    kinds: [{kind}]
    operations: [CREATE, UPDATE]
    namespaces: {{exclude: [kube-system]}}
  validate:
    expression: "containers.all(c, !has(c.env) || c.env.size() < 100)"
    message: "too many variables"
"""
        )
    (directory / "generated.yaml").write_text("---\n".join(documents))
    return directory
