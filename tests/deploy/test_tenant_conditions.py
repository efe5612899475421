"""The tenant mutating entry's `env-missing-or-requests-accelerators`, run with CEL as the apiserver would.

It may skip only what no rule of the entry acts on: an object without accelerators whose every
container already has NVIDIA_VISIBLE_DEVICES (visible-devices-void leaves an existing entry alone).
Each object here is also run through the engine's mutating phase in a tenant namespace: whenever the
condition skips, the engine's patch is empty.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from cel_expr_python import cel

from tests.deploy.conftest import one
from tests.deploy.test_match_conditions import CPU_SPEC, GPU_SPEC, HALF_FILLED, workloads
from webhook.engine import AdmissionInput, Phase, RuleSet, compile_documents, evaluate
from webhook.install.registration import ENTRIES, ENV_MISSING_OR_ACCELERATORS, match_conditions
from webhook.kubeyaml import load_documents

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
TENANT = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}},
}
TENANT_ENTRY = next(entry for entry in ENTRIES if entry.name == "mutate-tenants.gpu-webhook.io")


def with_void(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with NVIDIA_VISIBLE_DEVICES=void in every container, as the webhook leaves a template."""
    spec = copy.deepcopy(spec)
    for field in ("initContainers", "containers"):
        for container in spec.get(field, []):
            container.setdefault("env", []).append(dict(VOID))
    return spec


@pytest.fixture(scope="module")
def tenant(rendered: dict) -> list[tuple[Any, Any]]:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    webhooks = one(rendered["enforce"], "MutatingWebhookConfiguration")["webhooks"]
    webhook = next(w for w in webhooks if w["name"] == TENANT_ENTRY.name)
    assert ENV_MISSING_OR_ACCELERATORS in [c["name"] for c in webhook["matchConditions"]]
    return [(env, env.compile(c["expression"])) for c in webhook["matchConditions"]]


def sent(programs: list[tuple[Any, Any]], obj: Any, operation: str = "CREATE", old: Any = None) -> bool:
    verdicts = []
    for env, program in programs:
        result = program.eval(env.Activation({"object": obj, "oldObject": old, "request": {"operation": operation}}))
        assert result.type() == cel.Type.BOOL, f"errors on {obj.get('kind')}: {result.value()}"
        verdicts.append(result.value())
    return all(verdicts)


def engine_patch(
    pack: RuleSet, obj: dict[str, Any], old: dict[str, Any] | None = None, sub_resource: str = ""
) -> list[Any]:
    """The engine's mutating patch for a CREATE of `obj` (an UPDATE from `old`) in a tenant namespace."""
    obj, old = copy.deepcopy(obj), copy.deepcopy(old)
    for each in (obj, old):
        if each is not None:
            each.setdefault("metadata", {}).update(namespace="team-a", name=each.get("metadata", {}).get("name", "x"))
    admission = AdmissionInput.offline(
        obj, operation="UPDATE" if old else "CREATE", old_object=old, namespace_object=TENANT, sub_resource=sub_resource
    )
    return list(evaluate(pack, admission, phase=Phase.MUTATE).patch or [])


@pytest.mark.parametrize("kind", list(workloads(CPU_SPEC)))
def test_cpu_objects_without_the_variable_are_sent(tenant: list, pack: RuleSet, kind: str) -> None:
    obj = workloads(CPU_SPEC)[kind]
    assert sent(tenant, obj)
    assert engine_patch(pack, obj), "the engine adds the variable"


@pytest.mark.parametrize("kind", list(workloads(CPU_SPEC)))
def test_cpu_objects_whose_containers_all_have_it_skip_mutate(tenant: list, pack: RuleSet, kind: str) -> None:
    """A pod made from a template the webhook already patched: no rule of the entry acts on it."""
    voided = _all_voided(workloads(CPU_SPEC)[kind])
    assert not sent(tenant, voided)
    assert engine_patch(pack, voided) == []


def _all_voided(obj: dict[str, Any]) -> dict[str, Any]:
    """Every pod spec of `obj` (the CPU templates of `workloads` too) with the variable in every container."""
    obj = copy.deepcopy(obj)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                node.update(with_void(node))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj)
    return obj


def test_a_container_or_init_container_without_it_is_sent(tenant: list, pack: RuleSet) -> None:
    pod = workloads(with_void(CPU_SPEC))["Pod"]
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    assert sent(tenant, pod) and engine_patch(pack, pod)
    pod["spec"]["initContainers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert not sent(tenant, pod)  # an existing entry is left alone: the validating rules deny "all"
    assert engine_patch(pack, pod) == []


def test_gpu_objects_are_sent_even_when_every_container_has_it(tenant: list) -> None:
    for kind, obj in workloads(with_void(GPU_SPEC)).items():
        assert sent(tenant, _all_voided(obj)), kind


def test_a_debug_container_without_it_is_sent(tenant: list, pack: RuleSet) -> None:
    """kubectl debug: an UPDATE of pods/ephemeralcontainers adds a container the rule gives the variable."""
    old = workloads(with_void(CPU_SPEC))["Pod"]
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    assert sent(tenant, new, "UPDATE", old)
    assert engine_patch(pack, new, old, "ephemeralcontainers")


@pytest.mark.parametrize("obj", HALF_FILLED, ids=lambda o: f"{o['kind']}-{sorted(o.get('spec', {}))}")
def test_half_filled_objects_never_error(tenant: list, obj: dict) -> None:
    sent(tenant, obj)  # asserts: a bool, not an error


def _ruleset(mutate: list[dict[str, Any]], gpu: bool | None = None) -> RuleSet:
    match: dict[str, Any] = {"kinds": ["Pod"], "operations": ["CREATE"]}
    if gpu is not None:
        match["gpu"] = gpu
    document = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": "r"},
        "spec": {"match": match, "mutate": mutate},
    }
    return compile_documents(load_documents(yaml.safe_dump(document), "rule.yaml")).require()


def test_override_sends_a_container_with_another_value() -> None:
    ruleset = _ruleset([{"addEnv": {"name": "X", "value": "1", "override": True}}])
    (condition,) = [c for c in match_conditions(ruleset, TENANT_ENTRY) if c["name"] == ENV_MISSING_OR_ACCELERATORS]
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    program = env.compile(condition["expression"])

    def sends(value: str) -> bool:
        pod = {"kind": "Pod", "spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": value}]}]}}
        return program.eval(env.Activation({"object": pod, "oldObject": None, "request": {}})).value()

    assert sends("2") and not sends("1")


def test_a_rule_that_may_act_on_any_object_keeps_every_object_sent() -> None:
    ruleset = _ruleset([{"setLabels": {"values": {"team": "x"}}}])
    names = [c["name"] for c in match_conditions(ruleset, TENANT_ENTRY)]
    assert ENV_MISSING_OR_ACCELERATORS not in names and "requests-accelerators" not in names
