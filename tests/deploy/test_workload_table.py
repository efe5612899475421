"""The one table of workload kinds (webhook/engine/workloads.py) against everything built from or checked by it.

The cluster audit's resource list, the autogen kinds and the webhook registration
(webhook/install/registration.py: `rules:` and the `requests-accelerators` matchCondition) are built from
the table; these tests hold each against what the rules and the table say.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from cel_expr_python import cel

from tests.deploy.conftest import one
from tests.support import cpu_pod, gpu_pod
from webhook.audit.cluster import RESOURCES
from webhook.engine import AdmissionInput, Phase, evaluate
from webhook.engine.workloads import KINDS, WORKLOAD_KINDS, pod_spec_paths, pod_template_targets

GPU_SPEC = gpu_pod()["spec"]
CPU_SPEC = cpu_pod()["spec"]


def build(kind: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """An object of `kind` with `spec` at every template path the table names."""
    obj: dict[str, Any] = {
        "apiVersion": kind.api_versions[0],
        "kind": kind.kind,
        "metadata": {"name": "x", "namespace": "team-a"},
    }
    for path in kind.templates:
        node = obj
        parts = re.findall(r"[^.\[\]]+|\[\*\]", path)
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "[*]":
                continue
            following = parts[index + 1] if not last else None
            if following == "[*]":  # a list of one item, whose fields come next
                node = node.setdefault(part, [{"name": "g", "groupName": "g"}])[0]
                continue
            if part == "*":  # a map of roles: one role
                part = "Worker"
            if last:
                node[part] = copy.deepcopy(spec) if kind.kind == "Pod" else {"spec": copy.deepcopy(spec)}
            else:
                node = node.setdefault(part, {})
    return obj


def test_the_cluster_audit_lists_every_kind_of_the_table():
    assert [(r.kind, r.group, r.versions, r.plural) for r in RESOURCES] == [
        (k.kind, k.group, k.versions, k.plural) for k in KINDS
    ]
    assert {"XGBoostJob", "PaddleJob"} <= {r.kind for r in RESOURCES}


FIXED_PATHS = [k for k in KINDS if k.has_templates and not any("<" in t for t in k.templates)]


@pytest.mark.parametrize("kind", FIXED_PATHS, ids=lambda k: k.kind)
def test_every_template_path_of_the_table_is_found_and_autogen_reaches_it(kind, pack):
    obj = build(kind, GPU_SPEC)
    assert len(pod_template_targets(obj)) == len(kind.templates), kind.kind
    decision = evaluate(pack, AdmissionInput.offline(obj), Phase.MUTATE)
    # gpu-toleration (a Pod rule, autogen) patches every template of every kind autogen reaches and
    # the webhook mutates
    tolerations = sum(op["path"].endswith("/tolerations") for op in decision.patch)
    assert tolerations == (len(kind.templates) if kind.mutated and kind.autogen else 0), decision.patch


def app_wrapper(spec: dict[str, Any]) -> dict[str, Any]:
    """An AppWrapper (project-codeflare/appwrapper v1beta2 samples): a Job and a JobSet wrapped, each
    pod template named by its component's podSets[].path, a list index written `name[i]`."""
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "wrapped", "namespace": "team-a"},
        "spec": {
            "components": [
                {
                    "podSets": [{"replicas": 1, "path": "template.spec.template"}],
                    "template": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": spec}}},
                },
                {
                    "podSets": [{"replicas": 2, "path": "template.spec.replicatedJobs[0].template.spec.template"}],
                    "template": {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": spec}}}}]},
                    },
                },
                {"podSets": [{"path": "template.nowhere"}, {"path": "not a path"}, {}], "template": {"kind": "X"}},
            ]
        },
    }


def test_app_wrapper_pod_sets_are_found_by_their_paths():
    obj = app_wrapper(copy.deepcopy(GPU_SPEC))
    paths = [t.root for t in pod_template_targets(obj)]
    assert paths == [
        ("spec", "components", 0, "template", "spec", "template"),
        ("spec", "components", 1, "template", "spec", "replicatedJobs", 0, "template", "spec", "template"),
    ]
    assert pod_spec_paths(obj) == tuple((*path, "spec") for path in paths)  # what gpuCount(podSpec) counts


def test_every_kind_a_pack_rule_names_is_in_the_table(pack):
    """A rule's kind outside the table (and not declared with its API) could never be registered."""
    for rule in pack.rules:
        assert rule.match.kinds - {"*"} <= {k.kind for k in KINDS}, rule.name


def test_the_registration_sends_every_kind_the_rules_target(rendered, pack):
    """Each (group, resource, operation) a pack rule targets is in the rules of an entry of its phase."""
    from webhook.install.registration import ENTRIES, entry_rules, sent_apis

    configurations = {o["kind"]: o for o in rendered["enforce"] if o["kind"].endswith("WebhookConfiguration")}
    for entry in ENTRIES:
        (webhook,) = [w for w in configurations[entry.configuration]["webhooks"] if w["name"] == entry.name]
        sent = {
            (group, resource, operation)
            for rule in webhook["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for operation in rule["operations"]
        }
        for rule in entry_rules(pack, entry):
            for api in sent_apis(rule, entry.phase):
                for operation in rule.match.operations:
                    assert (api.group, api.plural, operation) in sent, (entry.name, rule.name, api.kind, operation)


def test_the_mutating_registration_never_sends_a_kind_the_webhook_does_not_mutate(rendered):
    mutating = one(rendered["enforce"], "MutatingWebhookConfiguration")
    resources = {r for webhook in mutating["webhooks"] for rule in webhook["rules"] for r in rule["resources"]}
    assert not resources & {k.plural for k in KINDS if not k.mutated}
    assert "replicasets" in {k.plural for k in KINDS if not k.mutated}


def test_the_accelerator_match_condition_knows_every_kind_of_the_table(rendered):
    configuration = one(rendered["enforce"], "MutatingWebhookConfiguration")["webhooks"][0]
    (condition,) = [c for c in configuration["matchConditions"] if c["name"] == "requests-accelerators"]
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    program = env.compile(condition["expression"])

    def sends(obj: dict[str, Any]) -> bool:
        result = program.eval(env.Activation({"object": obj, "oldObject": None, "request": {"operation": "CREATE"}}))
        assert result.type() == cel.Type.BOOL, result.value()
        return result.value()

    for kind in FIXED_PATHS:
        if not (kind.mutated and kind.autogen):
            continue
        assert sends(build(kind, GPU_SPEC)), f"{kind.kind}: a GPU template is not seen by the matchCondition"
        assert not sends(build(kind, CPU_SPEC)), kind.kind
    assert {k.kind for k in KINDS if k.has_templates and k.autogen} == WORKLOAD_KINDS


def test_the_kustomize_base_is_the_registration_of_the_shipped_pack(pack):
    """manifests/base/webhooks.yaml is generated (python -m webhook.commands.generate registration > manifests/base/webhooks.yaml)."""
    from tests.support import REPO
    from webhook.install.registration import base_yaml

    assert (REPO / "manifests" / "base" / "webhooks.yaml").read_text() == base_yaml(pack), (
        "stale: run `python -m webhook.commands.generate registration > manifests/base/webhooks.yaml`"
    )


def test_the_suites_hold_an_object_of_every_kind_the_pack_targets(pack):
    """tests/e2e sends every suite case through a real apiserver: a kind without a case is a kind whose
    registration and verdict nothing checks there."""
    from tests.support import RULES
    from webhook.authoring.suite import discover
    from webhook.install.registration import targeted

    targets = {api.kind for rule in pack.rules for api in targeted(rule)}
    cased = {
        case[key]["kind"]
        for suite in discover(str(RULES))
        for case in suite.cases
        for key in ("object", "oldObject")
        if case.get(key)
    }
    assert targets <= cased, f"no suite case for {sorted(targets - cased)}"
