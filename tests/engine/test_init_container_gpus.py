"""Pod GPU count with sidecars, as the scheduler computes it.

Source: k8s.io/component-helpers/resource/helpers.go PodRequests (kubernetes/kubernetes), which
cites KEP-753 "Exposing Pod Resource Requirements": InitContainerUse(i) = sum of the restartable
(sidecar) init containers with index < i + the i-th init container; the pod needs
max(sum of app containers + all sidecars, max_i InitContainerUse(i)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine import AdmissionInput, evaluate, load_rules

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: report-count}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: "false"
    messageExpression: "string(gpuCount(podSpec))"
"""


def gpus(n: int, sidecar: bool = False, name: str = "c") -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(n)}}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def count(tmp_path: Path, spec: dict[str, Any]) -> int:
    (tmp_path / "r.yaml").write_text(RULE)
    ruleset = load_rules(tmp_path).require()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "t"}, "spec": spec}
    (warning,) = evaluate(ruleset, AdmissionInput.offline(pod)).warnings
    return int(warning.message)


@pytest.mark.parametrize(
    ("init", "app", "expected"),
    [
        # the case: a 2-GPU sidecar, then a regular init container with 2: 4 while it runs
        ([gpus(2, True, "side"), gpus(2, name="init")], [gpus(0, name="app")], 4),
        # a regular init container BEFORE the sidecar runs alone
        ([gpus(2, name="init"), gpus(2, True, "side")], [gpus(0, name="app")], 2),
        # sidecars accumulate, and every later init container sees all of them
        ([gpus(1, True, "s1"), gpus(1, True, "s2"), gpus(3, name="init")], [gpus(1, name="app")], 5),
        # app containers + sidecars win when larger
        ([gpus(1, True, "s1"), gpus(1, name="init")], [gpus(3, name="app")], 4),
    ],
)
def test_init_containers_count_as_the_scheduler_does(tmp_path: Path, init: list, app: list, expected: int) -> None:
    assert count(tmp_path, {"initContainers": init, "containers": app}) == expected
