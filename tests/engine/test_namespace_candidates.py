"""An untraced evaluation leaves out the rules whose namespaces.include does not name the request's
namespace, and decides exactly as a traced one (which lists them with their reason)."""

from __future__ import annotations

import copy
from typing import Any

from tests.support import cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, RuleSet, evaluate
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

TEAMS = [f"team-{n}" for n in range(6)]


def team_rule(team: str) -> str:
    return f"""
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {team}-gpus}}
spec:
  match: {{kinds: [Pod], operations: [CREATE], namespaces: {{include: [{team}]}}, gpu: true}}
  validate:
    expression: "object.spec.containers.all(c, !has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits) || int(c.resources.limits['nvidia.com/gpu']) <= 1)"
    message: "{team} gets one GPU per container"
"""


SHARED = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: everyone-labels}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - setLabels: {values: {checked: "yes"}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: everyone-names}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "object.metadata.name.size() < 200", message: "a short name"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: everyone-images}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "object.spec.containers.all(c, c.image != '')", message: "an image"}
"""


def ruleset() -> RuleSet:
    text = "---".join([SHARED, *map(team_rule, TEAMS)])
    result = compile_documents(load_documents(text, "site.yaml"))
    assert result.ruleset is not None, result.errors
    return result.ruleset


def outcome(rules: RuleSet, obj: dict[str, Any], namespace: str, trace: bool) -> tuple[Any, ...]:
    pod = copy.deepcopy(obj)
    pod["metadata"]["namespace"] = namespace
    decision = evaluate(rules, AdmissionInput.offline(pod), trace=trace)
    return decision.allowed, decision.patch, [(v.rule, v.message) for v in decision.violations]


def test_untraced_decisions_equal_traced_ones_in_and_out_of_each_team() -> None:
    rules = ruleset()
    two_gpus = gpu_pod()
    two_gpus["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    for obj in (gpu_pod(), two_gpus, cpu_pod()):
        for namespace in (*TEAMS, "elsewhere"):
            assert outcome(rules, obj, namespace, trace=False) == outcome(rules, obj, namespace, trace=True)
    assert outcome(rules, two_gpus, "team-3", trace=False)[2] == [("team-3-gpus", "team-3 gets one GPU per container")]
    assert outcome(rules, two_gpus, "elsewhere", trace=False)[0] is True


def test_a_namespace_runs_only_its_own_scoped_rules_and_the_unscoped_share_one_tuple() -> None:
    rules = ruleset()
    assert rules.scoped
    everyone = rules.candidates("Pod", "CREATE")
    assert len(everyone) == 3 + len(TEAMS)
    mine = rules.candidates_in("Pod", "CREATE", "team-2")
    assert [r.name for r in mine] == ["everyone-labels", "everyone-names", "everyone-images", "team-2-gpus"]
    assert rules.candidates_in("Pod", "CREATE", "team-2") is mine  # remembered
    outside = rules.candidates_in("Pod", "CREATE", "elsewhere")
    assert [r.name for r in outside] == ["everyone-labels", "everyone-names", "everyone-images"]
    assert rules.candidates_in("Pod", "CREATE", "another") is outside  # one tuple: one projection, one fused program
