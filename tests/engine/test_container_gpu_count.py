"""`containerGpuCount(c)` is rewritten so no map reaches Python: same answers as the Python helper, no leak."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from webhook.engine.cel import CelEnvironment
from webhook.engine.facts import TargetFacts
from webhook.engine.resources import DEFAULT

CONTAINERS: list[dict[str, Any]] = [
    {"name": "none"},
    {"name": "empty", "resources": {}},
    {"name": "cpu", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
    {"name": "both", "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}},
    {"name": "limit-only", "resources": {"limits": {"nvidia.com/gpu": 4}}},
    {"name": "mig", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "amd.com/gpu": "1"}}},
    {"name": "env", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], "resources": {"limits": {}}},
    {"name": "request-wins", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "3"}}},
    {
        "name": "mixed",
        "resources": {"requests": {"cpu": "1", "habana.ai/gaudi": 2}, "limits": {"gpu.intel.com/xe": "1"}},
    },
]


@pytest.fixture(scope="module")
def env() -> CelEnvironment:
    return CelEnvironment(DEFAULT)


def variables(env: CelEnvironment, containers: list[Any]) -> dict[str, Any]:
    """What the engine binds for a target with these containers (programs.Programs's activation)."""
    facts = TargetFacts(version=0, pod_specs=[{"containers": containers}], containers=containers, gpus=0)
    return {
        "containers": containers,
        "containerGpus": facts.container_gpus(DEFAULT),
        "quantities": facts.quantities(),
        "accelerators": env.accelerator_table,
    }


def test_rewritten_call_agrees_with_the_python_helper(env: CelEnvironment) -> None:
    expression = env.compile("containers.map(c, containerGpuCount(c))")
    assert expression.text == "containers.map(c, containerGpuCount(c))"  # the author's text is kept for messages
    activation = env.activation(variables(env, CONTAINERS))
    expected = [0, 0, 0, 2, 4, 2, 0, 1, 3]
    assert expression.evaluate(activation) == [DEFAULT.container_count(c) for c in CONTAINERS] == expected


def test_is_accelerator_is_plain_cel_with_the_same_answers(env: CelEnvironment) -> None:
    names = [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpu.shared",
        "amd.com/gpu",
        "cpu",
        "nvidia.com/gpux",
    ]
    expression = env.compile("containers.map(n, isAccelerator(n))")  # any declared variable holds the list
    bound = {"containers": names, "accelerators": env.accelerator_table}
    assert expression.evaluate(env.activation(bound)) == [n in DEFAULT for n in names]
    assert env.compile("isAccelerator('habana.ai/gaudi')").evaluate(env.activation(bound)) is True  # a literal


@pytest.mark.parametrize(
    "text",
    [
        "containers.map(c, containerGpuCount(c))",
        "containers.map(c, c.resources.limits.filter(r, isAccelerator(r)))",
        "containers.map(c, .containerGpuCount(c))",  # CEL's leading dot: the same global function
        "containers.map(c, c.resources.limits.filter(r, .isAccelerator(r)))",
    ],
)
def test_per_container_helpers_allocate_nothing_that_stays(env: CelEnvironment, text: str) -> None:
    """cel-expr-python 0.1.3 leaks the arguments of every call into Python; these make none per container."""
    expression = env.compile(text)
    containers = [c for c in CONTAINERS if c.get("resources", {}).get("limits") is not None]
    for _ in range(20):
        expression.evaluate(env.activation(variables(env, containers)))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        bound = variables(env, containers)
        for _ in range(300):
            expression.evaluate(env.activation(bound))
        growth = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    # before: 1.5 MB (every container's resources map, every resource name); now nothing calls Python
    assert growth < 100_000, growth


PYTORCH_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: per-container}
spec:
  action: Warn
  match: {kinds: [PyTorchJob], operations: [CREATE]}
  validate:
    expression: "containers.map(c, c.name + '=' + string(containerGpuCount(c)))"
"""


def pytorch_job(env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A PyTorchJob whose Master (1 GPU) and Worker (4) containers are both named `pytorch`, as Kubeflow names them."""

    def replica(gpus: int) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        if env is not None:
            container["env"] = env
        return {"replicas": 1, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "t"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(4)}},
    }


def test_same_container_name_in_several_templates_counts_each_its_own(tmp_path) -> None:
    """Every Kubeflow replica's container is named `pytorch`: the Master must not get the Worker's count."""
    from webhook.engine import AdmissionInput, evaluate, load_rules

    (tmp_path / "r.yaml").write_text(PYTORCH_RULE)
    ruleset = load_rules(tmp_path).require()
    job = pytorch_job()
    decision = evaluate(ruleset, AdmissionInput.offline(job))
    messages = sorted(decision.warnings[0].message.split("; "))
    containers = [r["template"]["spec"]["containers"][0] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    # differential: the rewritten fast path agrees with the Python helper, container by container
    assert messages == sorted(f"pytorch={DEFAULT.container_count(c)}" for c in containers) == ["pytorch=1", "pytorch=4"]


def test_a_repeated_container_name_keeps_no_tenant_bulk_per_request(tmp_path) -> None:
    """The Python helper still counts a name that templates share with different counts (the usual
    Kubeflow job: Master 1 GPU, Worker 4), and the binding keeps every argument of such a call. It
    is handed the container's resources alone: what each request keeps does not grow with the
    env, command or mounts a tenant writes (before: the whole container, 45 KB per request with
    50 env entries, 180 KB with 200)."""
    from webhook.engine import AdmissionInput, evaluate, load_rules

    (tmp_path / "r.yaml").write_text(PYTORCH_RULE)
    ruleset = load_rules(tmp_path).require()
    job = pytorch_job(env=[{"name": f"VARIABLE_{i}", "value": "x" * 64} for i in range(200)])
    for _ in range(20):
        warning = evaluate(ruleset, AdmissionInput.offline(job)).warnings[0].message
    assert sorted(warning.split("; ")) == ["pytorch=1", "pytorch=4"]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(200):
            evaluate(ruleset, AdmissionInput.offline(job))
        growth = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert growth / 200 < 8_000, growth / 200
