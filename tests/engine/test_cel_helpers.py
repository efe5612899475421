"""The helper rewrite: same answers as the Python helpers, no Python calls, no memory growth."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from tests.support import EXAMPLES, gpu_pod
from webhook.cel.celhelpers import rewrite
from webhook.engine import AdmissionInput, evaluate, load_rules
from webhook.engine.cel import CelEnvironment
from webhook.engine.facts import TargetFacts, pod_containers
from webhook.engine.resources import DEFAULT
from webhook.engine.workloads import get_path, object_target, pod_template_targets
from webhook.kubeyaml import plain_documents


def test_calls_are_rewritten_and_strings_left_alone() -> None:
    assert rewrite("gpuCount(podSpec) > 0") == "targetGpuCount > 0"
    assert rewrite("gpuCount( podSpec )") == "targetGpuCount"
    assert rewrite("quantity('16Gi') > quantity(\"1\")") == "17179869184.0 > 1.0"
    assert rewrite("isQuantity('1x') || isQuantity('2')") == "false || true"
    assert rewrite("'gpuCount(podSpec)' + \"quantity('1')\"") == "'gpuCount(podSpec)' + \"quantity('1')\""
    assert rewrite("x.quantity('1')") == "x.quantity('1')"  # a member call is not our helper
    # CEL's leading dot names the global function: the helper, rewritten with its dot
    assert rewrite(".quantity('16Gi') > 0.0") == "17179869184.0 > 0.0"
    assert rewrite("x in . gpuCount(podSpec)") == "x in targetGpuCount"
    assert rewrite("f(a).quantity('1') + '.quantity(1)'") == "f(a).quantity('1') + '.quantity(1)'"
    nested = rewrite("containers.filter(c, containerGpuCount(c) > 0 && c.resources.limits.exists(r, isAccelerator(r)))")
    assert "containerGpuCount" not in nested and "isAccelerator" not in nested
    assert "quantity(" not in rewrite("quantity(c.resources.limits[r]) == quantity(c.resources.requests[r])").replace(
        "gwQuantityOf(", ""
    )
    assert rewrite("gpuCount(podSpecs[0])") == "gpuCount(podSpecs[0])"  # not the target's spec: Python helper


EXPRESSIONS = [
    "gpuCount(podSpec)",
    "containers.map(c, containerGpuCount(c))",
    "containers.map(c, has(c.resources) && has(c.resources.limits) ? c.resources.limits.filter(r, isAccelerator(r)) : [])",
    "containers.map(c, has(c.resources) && has(c.resources.limits) ? c.resources.limits.map(r, quantity(string(c.resources.limits[r]))) : [])",
    "containers.map(c, has(c.resources) && has(c.resources.requests) ? c.resources.requests.map(r, isQuantity(string(c.resources.requests[r]))) : [])",
    "quantity('1Gi') + quantity(4) + quantity('250m')",
    "['nvidia.com/gpu', 'nvidia.com/mig-1g.10gb', 'cpu', 'amd.com/gpu'].map(r, isAccelerator(r))",
    "['1', 'x', '2Gi'].map(q, isQuantity(q))",
    "containers.map(c, .containerGpuCount(c))",  # the leading dot: the same helpers
    "['nvidia.com/gpu', 'cpu'].map(r, .isAccelerator(r) && .quantity('1Gi') > 0.0)",
]


def targets_of_examples() -> list[tuple[str, dict, object]]:
    found = []
    for path in sorted(Path(EXAMPLES).glob("*.yaml")):
        for document in plain_documents(path.read_text()):
            if not isinstance(document, dict) or "kind" not in document:
                continue
            targets = pod_template_targets(document) or [object_target(document)]
            found.extend((f"{path.name}:{t.description}", document, t) for t in targets)
    return found


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_rewritten_helpers_agree_with_the_python_helpers(expression: str) -> None:
    env = CelEnvironment(DEFAULT)
    rewritten = env.compile(expression)
    original = env.compile(expression, rewrite=False)  # the Python-helper program
    assert rewrite(expression) != expression
    assert original.text == expression and rewritten.program is not original.program
    checked = 0
    for label, document, target in targets_of_examples():
        specs = [get_path(document, p) for p in target.pod_specs]
        facts = TargetFacts(
            version=0, pod_specs=specs, containers=pod_containers(specs), gpus=sum(DEFAULT.pod_count(s) for s in specs)
        )
        variables = {
            "podSpec": specs[0] if len(specs) == 1 else None,
            "containers": facts.containers,
            "targetGpuCount": facts.gpus,
            "containerGpus": facts.container_gpus(DEFAULT),
            "quantities": facts.quantities(),
            "accelerators": env.accelerator_table,
        }
        if len(specs) != 1 and "podSpec" in expression:
            continue
        expected = original.evaluate(env.activation(variables))
        assert rewritten.evaluate(env.activation(variables)) == expected, label
        checked += 1
    assert checked >= 20


def current_rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_evaluating_the_pack_does_not_grow_memory() -> None:
    # Before the rewrite, calls into Python helpers leaked 0.05-2 KB each inside the CEL binding:
    # 3,000 evaluations of the pack grew the process by ~5 MB.
    ruleset = load_rules(Path(EXAMPLES).parent / "rules").ruleset
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    admission = AdmissionInput(object=pod, namespace="team-a")
    for _ in range(300):
        evaluate(ruleset, admission, trace=False)
    gc.collect()
    before = current_rss()
    for _ in range(3000):
        evaluate(ruleset, admission, trace=False)
    gc.collect()
    grown = current_rss() - before
    assert grown < 1_500_000, f"RSS grew by {grown} bytes over 3,000 evaluations"
