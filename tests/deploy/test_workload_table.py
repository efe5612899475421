"""The one table of workload kinds (webhook/engine/workloads.py) against everything built from or checked by it.

The cluster audit's resource list and the autogen kinds are built from the table; the webhook
configurations' `rules:` and the mutating webhook's `requests-accelerators` matchCondition are
hand-written YAML (manifests/base/webhooks.yaml), so they are checked against it here.
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
from webhook.engine.workloads import KINDS, WORKLOAD_KINDS, pod_template_targets

GPU_SPEC = gpu_pod()["spec"]
CPU_SPEC = cpu_pod()["spec"]
# the mutating webhook leaves ReplicaSets out on purpose (see the comment in webhooks.yaml)
NOT_MUTATED = {"replicasets"}
# what a webhook may select beyond the table: not workloads with pod templates, but objects the
# engine evaluates for their own sake (DRA claims) or a Pod's subresource (ephemeral containers)
NOT_WORKLOADS = {
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "resourceclaimtemplates"),
    ("", "pods/ephemeralcontainers"),
}


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


@pytest.mark.parametrize("kind", [k for k in KINDS if k.find is not None], ids=lambda k: k.kind)
def test_every_template_path_of_the_table_is_found_and_autogen_reaches_it(kind, pack):
    obj = build(kind, GPU_SPEC)
    assert len(pod_template_targets(obj)) == len(kind.templates), kind.kind
    decision = evaluate(pack, AdmissionInput.offline(obj), Phase.MUTATE)
    # gpu-toleration (a Pod rule, autogen) patches every template of every kind
    assert sum(op["path"].endswith("/tolerations") for op in decision.patch) == len(kind.templates), decision.patch


@pytest.mark.parametrize("webhook", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_webhook_rules_cover_exactly_the_table(rendered, webhook):
    configuration = one(rendered["enforce"], webhook)["webhooks"][0]
    covered: set[tuple[str, str]] = set()
    for rule in configuration["rules"]:
        assert set(rule["operations"]) >= {"CREATE", "UPDATE"}
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                if (group, resource) in NOT_WORKLOADS:
                    continue
                covered.add((group, resource))
                kinds = [k for k in KINDS if (k.group, k.plural) == (group, resource)]
                assert kinds, f"{group}/{resource} is selected but is not in the table of workload kinds"
                versions = set(kinds[0].versions)
                assert rule["apiVersions"] == ["*"] or versions <= set(rule["apiVersions"]), kinds[0].kind
    expected = {(k.group, k.plural) for k in KINDS}
    if webhook.startswith("Mutating"):
        expected = {(g, p) for g, p in expected if p not in NOT_MUTATED}
    assert covered == expected


def test_the_accelerator_match_condition_knows_every_kind_of_the_table(rendered):
    configuration = one(rendered["enforce"], "MutatingWebhookConfiguration")["webhooks"][0]
    (condition,) = [c for c in configuration["matchConditions"] if c["name"] == "requests-accelerators"]
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    program = env.compile(condition["expression"])

    def sends(obj: dict[str, Any]) -> bool:
        result = program.eval(env.Activation({"object": obj, "oldObject": None, "request": {"operation": "CREATE"}}))
        assert result.type() == cel.Type.BOOL, result.value()
        return result.value()

    for kind in KINDS:
        assert sends(build(kind, GPU_SPEC)), f"{kind.kind}: a GPU template is not seen by the matchCondition"
        assert not sends(build(kind, CPU_SPEC)), kind.kind
    assert {k.kind for k in KINDS if k.find is not None} == WORKLOAD_KINDS
