"""`export --claims unresolved`: the accelerator-counting rules, exported as the engine decides offline.

The engine counts the devices of a pod's DRA claims, resolved against the namespace's
ResourceClaims / ResourceClaimTemplates (AdmissionInput.resource_claims / resource_claim_templates),
and takes a claim it cannot resolve for an accelerator (engine/resources.py). A policy cannot read
those objects, so by default these rules are refused. With `--claims unresolved` they are exported
with the engine's semantics WITHOUT claim context, and proven here against the engine run with that
context set to None on every case (suite cases, every workload kind, kubectl debug, generated
workloads): zero mismatches. The last test shows where the live webhook, which resolves claims,
decides otherwise (docs/native.md, "Accelerator rules and DRA claims").
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.export.apiserver import Apiserver
from tests.export.equivalence import compare, debug_cases, idempotent, pack_with_extras, suite_cases, wrapped_cases
from tests.export.native_site import NO_ALLOCATORS
from tests.reliability.test_properties import pod_specs, workload
from tests.support import RULES, cpu_pod
from webhook.engine import AdmissionInput, RuleSet
from webhook.export import CLAIMS_UNRESOLVED, Export, export
from webhook.export.policies import CONTEXT_VARIABLES, counts_accelerators

CLAIM = "--claims unresolved"


def without_claim_context(admission: AdmissionInput) -> AdmissionInput:
    """The admission as a door without claim context sees it: every DRA claim unresolved."""
    return replace(admission, resource_claims=None, resource_claim_templates=None)


def claims_only(admission: AdmissionInput) -> bool:
    """A pod (or template) with resourceClaims and no accelerator resources: only `claimed` makes it a GPU pod."""
    obj = admission.object
    specs = [obj.get("spec")] if isinstance(obj, dict) and obj.get("kind") == "Pod" else []
    return any(
        isinstance(spec, dict)
        and spec.get("resourceClaims")
        and "nvidia.com/gpu" not in str(spec.get("containers"))
        and "amd.com/gpu" not in str(spec.get("containers"))
        for spec in specs
    )


@pytest.fixture(scope="module")
def ruleset(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    rules = tmp_path_factory.mktemp("pack") / "rules"
    shutil.copytree(RULES, rules)
    (rules / "no-allocators.yaml").write_text(NO_ALLOCATORS)
    return pack_with_extras(rules)


def test_with_the_shipped_allocators_counting_rules_stay_with_the_webhook() -> None:
    reasons = {r.rule: r.reason for r in export(pack_with_extras(), claims=CLAIMS_UNRESOLVED).refused}
    assert "annotation-marked allocators (kai-scheduler" in reasons["gpu-per-pod-ceiling"]


@pytest.fixture(scope="module")
def by_default(ruleset: RuleSet) -> Export:
    return export(ruleset)


@pytest.fixture(scope="module")
def full(ruleset: RuleSet) -> Export:
    return export(ruleset, claims=CLAIMS_UNRESOLVED)


@pytest.fixture(scope="module")
def unresolved(full: Export, by_default: Export) -> Export:
    """The rules --claims unresolved adds (the others do not count accelerators: test_equivalence covers them)."""
    added = [rule for rule in full.rules if rule.rule not in by_default.exported]
    return Export(full.release, full.claims, added, full.refused)


@pytest.fixture(scope="module")
def server() -> Apiserver:
    return Apiserver()


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, AdmissionInput]]:
    found = list(suite_cases())
    every = found + list(wrapped_cases(found)) + list(debug_cases(found))
    return [(name, without_claim_context(admission)) for name, admission in every]


def test_by_default_counting_rules_are_refused_and_the_refusal_names_the_flag(
    ruleset: RuleSet, by_default: Export
) -> None:
    counting = {rule.name for rule in ruleset.rules if counts_accelerators(rule)}
    reasons = {refusal.rule: refusal.reason for refusal in by_default.refused}
    assert counting and not counting & set(by_default.exported)
    claim_refusals = [r for name, r in reasons.items() if "DRA claims" in r]
    assert claim_refusals and all(CLAIM in reason for reason in claim_refusals)


def test_the_flag_exports_counting_rules_and_still_refuses_cluster_context(
    ruleset: RuleSet, by_default: Export, full: Export, unresolved: Export
) -> None:
    assert set(by_default.exported) < set(full.exported)  # a superset of the default export
    reasons = {refusal.rule: refusal.reason for refusal in unresolved.refused}
    assert not [name for name, reason in reasons.items() if "DRA claims" in reason]
    readers = {rule.name for rule in ruleset.rules if set(CONTEXT_VARIABLES) & rule.references}
    assert readers and readers <= set(reasons), "rules reading priorityClasses/deviceClaims must stay refused"
    gpu_rules = {rule.name for rule in ruleset.rules if rule.match.gpu is not None}
    assert gpu_rules & set(unresolved.exported), "no `gpu:` rule exported: the flag does nothing"
    assert any(rule.mutating is not None for rule in unresolved.rules)


def test_same_decisions_as_the_engine_without_claim_context(
    unresolved: Export, ruleset: RuleSet, server: Apiserver, cases: list[tuple[str, AdmissionInput]]
) -> None:
    compared = mismatches = by_claims = 0
    acting: set[str] = set()
    report = []
    for name, admission in cases:
        for comparison in compare(ruleset, unresolved, server, name, admission):
            compared += 1
            if comparison.engine[0] != "pass" or comparison.engine[2] is not None:
                acting.add(comparison.rule)
                by_claims += claims_only(admission)
            if not comparison.same:
                mismatches += 1
                report.append(str(comparison))
    print(
        f"\n{CLAIM}: {len(cases)} cases x {len(unresolved.rules)} added rules = {compared}, mismatches {mismatches}; "
        f"{by_claims} decisions on pods with claims and no accelerator resources"
    )
    assert not report, "\n".join(report[:20])
    assert acting == set(unresolved.exported), f"rules never acting: {set(unresolved.exported) - acting}"
    assert by_claims, "no case makes a rule act on a pod that has only DRA claims: the claim path is untested"


def test_mutating_policies_stay_idempotent(
    unresolved: Export, server: Apiserver, cases: list[tuple[str, AdmissionInput]]
) -> None:
    mutating = [rule for rule in unresolved.rules if rule.mutating is not None]
    failures = [f"{n} / {r.rule}" for n, a in cases for r in mutating if not idempotent(r, server, a)]
    assert not failures, failures[:20]


def test_a_claim_is_an_accelerator_and_adds_no_devices(ruleset: RuleSet, unresolved: Export, server: Apiserver) -> None:
    """A CPU pod with one claim (unresolved): a GPU pod for `gpu: true` rules in both, and its count stays 0
    (the per-pod ceiling counts resources only). Without the claim the `gpu: true` rules do not act."""
    namespace = {"metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}}}
    pod = cpu_pod(name="train")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with_claim = AdmissionInput.offline(pod, namespace="team-a", namespace_object=namespace)
    found = {c.rule: c for c in compare(ruleset, unresolved, server, "claim", with_claim)}
    assert all(c.same for c in found.values()), [str(c) for c in found.values() if not c.same]
    gpu_only = {r.name for r in ruleset.rules if r.match.gpu is True} & set(found)
    assert gpu_only
    del pod["spec"]["resourceClaims"]
    plain = AdmissionInput.offline(pod, namespace="team-a", namespace_object=namespace)
    found_plain = {c.rule: c for c in compare(ruleset, unresolved, server, "no claim", plain)}
    assert all(c.same for c in found_plain.values())
    # the claim alone switches some gpu: true rule from not acting to acting
    assert any(found[r].native != found_plain[r].native for r in gpu_only)


def test_where_the_live_webhook_differs(ruleset: RuleSet, unresolved: Export, server: Apiserver) -> None:
    """With claim context the engine resolves a claim of a non-accelerator class: not a GPU pod. The exported
    policy cannot see the claim's class, so it still takes the pod for a GPU pod (docs/native.md)."""
    namespace = {"metadata": {"name": "team-a"}}
    pod = cpu_pod(name="train")
    pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": "rdma-nic"}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "rdma-nic", "namespace": "team-a"},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "rdma.example.com"}}]}},
    }
    live = AdmissionInput.offline(pod, namespace="team-a", namespace_object=namespace, cluster_objects=[claim])
    offline = without_claim_context(live)
    differing = {c.rule for c in compare(ruleset, unresolved, server, "live", live) if not c.same}
    assert differing, "the webhook with claim context and the export agreed on a non-accelerator claim"
    assert all(c.same for c in compare(ruleset, unresolved, server, "offline", offline))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workload())
def test_generated_workloads_get_the_same_decisions(obj: dict) -> None:
    assume(all(_unique_names(spec) for spec in pod_specs(obj)))
    ruleset, added = _STATE()
    admission = AdmissionInput.offline(obj, namespace="team-a")
    differing = [str(c) for c in compare(ruleset, added, _STATE.server, "generated", admission) if not c.same]
    assert not differing, "\n".join(differing)


def _unique_names(spec: dict) -> bool:
    names = [c.get("name") for f in ("initContainers", "containers") for c in spec.get(f) or []]
    return len(names) == len(set(names))


class _State:  # hypothesis cannot take function-scoped fixtures: build once per module
    def __init__(self) -> None:
        self.value: tuple[RuleSet, Export] | None = None
        self.server = Apiserver()

    def __call__(self) -> tuple[RuleSet, Export]:
        if self.value is None:
            ruleset = pack_with_extras()
            default = set(export(ruleset).exported)
            full = export(ruleset, claims=CLAIMS_UNRESOLVED)
            added = [rule for rule in full.rules if rule.rule not in default]
            self.value = ruleset, Export(full.release, full.claims, added, full.refused)
        return self.value


_STATE = _State()
