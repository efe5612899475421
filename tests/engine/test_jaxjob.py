"""Kubeflow's JAXJob, added as one row of the kind table: what every part built from the table makes of it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from cel_expr_python import cel

from tests.rules.rulekit import namespace, run
from tests.support import cpu_pod, gpu_pod
from webhook.engine import KIND_TABLE, load_rules
from webhook.engine.resources import DEFAULT
from webhook.engine.workloads import SUSPEND_FIELDS, pod_template_targets
from webhook.export.celenv import NativeEnvironment
from webhook.export.nativecel import Translator
from webhook.export.targets import KindTarget, targets_expression, template_targets
from webhook.install.registration import requests_accelerators, targeted

REPO = Path(__file__).resolve().parents[2]
NATIVE = NativeEnvironment()


def jax_job(**replicas: dict[str, Any]) -> dict[str, Any]:
    """A JAXJob (kubeflow/training-operator pkg/apis/kubeflow.org/v1/jax_types.go) with these replica specs."""
    specs = {role: {"replicas": 2, "template": {"spec": copy.deepcopy(spec)}} for role, spec in replicas.items()}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {"name": "jax-train", "namespace": "ml-research"},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "jaxReplicaSpecs": specs},
    }


def test_the_row_says_what_the_sources_say() -> None:
    row = KIND_TABLE.by_kind("JAXJob")
    assert row is not None
    assert (row.group, row.versions, row.plural) == ("kubeflow.org", ("v1",), "jaxjobs")
    assert row.templates == ("spec.jaxReplicaSpecs.*.template",)
    assert row.suspend == "spec.runPolicy.suspend" and row.autogen and row.mutated
    assert "KueueWorkloads" in row.groups and "JAXJob" in KIND_TABLE.autogen


def test_each_replica_is_a_template_named_by_its_role() -> None:
    obj = jax_job(Worker=gpu_pod()["spec"], Coordinator=cpu_pod()["spec"])
    found = [(t.root, t.description) for t in pod_template_targets(obj)]
    assert found == [
        (("spec", "jaxReplicaSpecs", "Worker", "template"), "replica Worker of JAXJob jax-train"),
        (("spec", "jaxReplicaSpecs", "Coordinator", "template"), "replica Coordinator of JAXJob jax-train"),
    ]
    other_group = {**obj, "apiVersion": "example.com/v1"}
    assert pod_template_targets(other_group) == []


def test_the_export_reaches_the_same_templates() -> None:
    obj = jax_job(Worker=gpu_pod()["spec"])
    expression = targets_expression(
        [KindTarget("JAXJob", "kubeflow.org", "jaxjobs", templates=True)], set(), Translator(DEFAULT), True
    )
    native: Any = NATIVE.evaluate(NATIVE.compile(expression), {"object": obj})
    assert [(t["description"], t["path"]) for t in native] == [
        ("replica Worker of JAXJob jax-train", "/spec/jaxReplicaSpecs/Worker/template")
    ]
    assert "object.spec.jaxReplicaSpecs" in template_targets("JAXJob", False)


def test_the_registration_sends_jaxjobs_and_its_accelerator_condition_reads_the_replicas() -> None:
    result = load_rules(REPO / "rules")
    assert result.ruleset is not None
    toleration = next(r for r in result.ruleset.rules if r.name == "gpu-toleration")
    assert "jaxjobs" in {api.plural for api in targeted(toleration) if hasattr(api, "plural")}
    assert (
        "resources: [jaxjobs, paddlejobs, pytorchjobs, tfjobs, xgboostjobs]"
        in (REPO / "manifests" / "base" / "webhooks.yaml").read_text()
    )
    condition = requests_accelerators([KIND_TABLE.by_kind("JAXJob")], result.ruleset.accelerators)
    env = cel.NewEnv(variables={"object": cel.Type.DYN})
    program = env.compile(condition)
    assert program.eval(env.Activation({"object": jax_job(Worker=gpu_pod()["spec"])})).value() is True
    assert program.eval(env.Activation({"object": jax_job(Worker=cpu_pod()["spec"])})).value() is False


def test_a_queued_jaxjob_is_suspended_through_its_run_policy(tmp_path: Path) -> None:
    """Where Kueue manages JAXJobs (kubeflow.org/jaxjob in integrations.frameworks, as v0.13's default)."""
    assert SUSPEND_FIELDS[("kubeflow.org", "JAXJob")] == ("spec", "runPolicy", "suspend")
    text = (REPO / "rules" / "kueue-queue-name.yaml").read_text()
    assert "kubeflow.org/JAXJob" not in text  # Kueue v0.19's default leaves it off, as the rule's params say
    (tmp_path / "rule.yaml").write_text(
        text.replace("      - batch/Job\n", "      - batch/Job\n      - kubeflow.org/JAXJob\n")
    )
    result = load_rules(tmp_path)
    assert result.ruleset is not None, result.errors
    obj = jax_job(Worker=gpu_pod()["spec"])
    decision = run(result.ruleset, obj, namespace("ml-research", annotations={"gpu-webhook.io/queue": "q"}))
    assert decision.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "q"}},
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": True},
    ]
