"""The exported policies decide as the engine does, on every suite case of the pack, in every workload kind.

Generic over rules/: whatever rules the pack holds, each exported rule is compared with the
engine on each case (decision, per-target messages, patched object), and every refused rule
is named with its reason. A failure prints each differing (case, rule) pair.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.export.apiserver import Apiserver
from tests.export.equivalence import (
    compare,
    debug_cases,
    idempotent,
    pack_with_extras,
    suite_cases,
    wrapped_cases,
)
from tests.reliability.test_properties import pod_specs, workload
from tests.support import cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, RuleSet, load_rules
from webhook.export import Export, export


@pytest.fixture(scope="module")
def ruleset() -> RuleSet:
    return pack_with_extras()


@pytest.fixture(scope="module")
def exported(ruleset: RuleSet) -> Export:
    return export(ruleset)


@pytest.fixture(scope="module")
def server() -> Apiserver:
    return Apiserver()


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, AdmissionInput]]:
    found = list(suite_cases())
    return found + list(wrapped_cases(found)) + list(debug_cases(found))


def test_every_rule_is_exported_or_refused_with_a_reason(ruleset: RuleSet, exported: Export) -> None:
    names = [rule.name for rule in ruleset.rules]
    assert sorted(exported.exported + [r.rule for r in exported.refused]) == sorted(names)
    assert all(refusal.reason for refusal in exported.refused)
    assert exported.exported, "the default pack exports nothing: the export or the pack broke"


def test_same_decisions_and_patches_as_the_engine(
    ruleset: RuleSet, exported: Export, server: Apiserver, cases: list[tuple[str, AdmissionInput]]
) -> None:
    compared = mismatches = 0
    acting = set()
    report = []
    for name, admission in cases:
        for comparison in compare(ruleset, exported, server, name, admission):
            compared += 1
            if comparison.engine[0] != "pass" or comparison.engine[2] is not None:
                acting.add(comparison.rule)
            if not comparison.same:
                mismatches += 1
                report.append(str(comparison))
    print(
        f"\nequivalence: {len(cases)} cases x {len(exported.rules)} exported rules = {compared}, mismatches {mismatches}"
    )
    assert not report, "\n".join(report[:20])
    # the comparison means something only if the cases make the rules act (deny, warn, patch)
    assert acting == set(exported.exported), f"rules never acting on any case: {set(exported.exported) - acting}"


def test_without_ratcheting_updates_and_kubectl_debug_are_exported_and_agree(
    ruleset: RuleSet, server: Apiserver, cases: list[tuple[str, AdmissionInput]]
) -> None:
    """The same pack with spec.ratcheting: false: the Deny rules export for UPDATE too (with
    pods/ephemeralcontainers), and every UPDATE case, kubectl debug included, gets the engine's decision."""
    plain = RuleSet.build([replace(rule, ratcheting=False) for rule in ruleset.rules], ruleset.env)
    exported = export(plain)
    assert exported.exported and not any(rule.note for rule in exported.rules)
    debug_resources = [
        resources
        for rule in exported.rules
        if rule.validating is not None
        for resources in rule.validating["spec"]["matchConstraints"]["resourceRules"]
        if "pods/ephemeralcontainers" in resources["resources"]
    ]
    assert debug_resources, "no exported rule covers kubectl debug"
    updates = [(name, a) for name, a in cases if a.operation == "UPDATE"]
    compared = [c for name, a in updates for c in compare(plain, exported, server, name, a)]
    assert not [str(c) for c in compared if not c.same]
    acting = {c.rule for c in compared if c.engine[0] != "pass"}
    assert acting & {c.rule for c in compared if "kubectl debug" in c.case and c.engine[0] == "deny"}
    print(f"\nwithout ratcheting: {len(updates)} UPDATE cases, {len(compared)} comparisons, acting: {sorted(acting)}")


def test_ratcheting_is_exported_over_the_old_object(ruleset: RuleSet, exported: Export, server: Apiserver) -> None:
    """A privileged tenant pod that already ran: an UPDATE that keeps it passes in both; kubectl
    debug with a privileged ephemeral container is denied in both, for the new container only.
    The same for a bool rule (memory-limit-required, test-only): what the old pod already failed passes."""
    namespace = {"metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}}}
    old = cpu_pod(name="job")  # its container is called web
    old["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"touched": "yes"}
    debugged = copy.deepcopy(old)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    results = {}
    for name, new, sub in (("relabel", relabelled, ""), ("debug", debugged, "ephemeralcontainers")):
        admission = AdmissionInput.offline(
            new, operation="UPDATE", old_object=old, namespace="team-a", namespace_object=namespace, sub_resource=sub
        )
        found = {c.rule: c for c in compare(ruleset, exported, server, name, admission)}
        assert all(c.same for c in found.values()), [str(c) for c in found.values() if not c.same]
        results[name] = found["no-privileged-in-tenants"].native
        # a bool rule with a static message: no container has a memory limit, before or after
        assert found["memory-limit-required"].native[0] == "pass"
    assert results["relabel"][0] == "pass"
    assert results["debug"][0] == "deny" and "debugger" in results["debug"][1]
    assert "web" not in results["debug"][1]  # the privileged container that already ran is ratcheted


def test_mutating_policies_are_idempotent_on_reinvocation(
    exported: Export, server: Apiserver, cases: list[tuple[str, AdmissionInput]]
) -> None:
    failures = [
        f"{name} / {native.rule}"
        for name, admission in cases
        for native in exported.rules
        if not idempotent(native, server, admission)
    ]
    assert not failures, failures[:20]


def test_the_comparison_can_fail(ruleset: RuleSet, server: Apiserver, cases: list[tuple[str, AdmissionInput]]) -> None:
    """Policies exported from skewed rules (each exported rule's expression negated) must disagree with
    the engine on every exported rule."""
    skewed_rules, negated = [], set()
    for rule in ruleset.rules:
        if rule.validate is not None and rule.validate.expression.result_type == "BOOL":
            expression = ruleset.env.compile(f"!({rule.validate.expression.text})")
            rule = replace(rule, validate=replace(rule.validate, expression=expression))
            negated.add(rule.name)
        skewed_rules.append(rule)
    skewed = export(RuleSet.build(skewed_rules, ruleset.env))
    assert negated & set(skewed.exported)
    wanted = negated & set(skewed.exported)
    differing: set[str] = set()
    for name, admission in cases:  # until every skewed rule has disagreed once
        differing |= {c.rule for c in compare(ruleset, skewed, server, name, admission) if not c.same}
        if differing >= wanted:
            break
    assert differing == wanted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workload())
def test_generated_workloads_get_the_same_decisions(obj: dict) -> None:
    # the apiserver validates an object before validating admission: duplicate container names never get there
    assume(all(_unique_names(spec) for spec in pod_specs(obj)))
    ruleset = _RULESET()
    exported = _EXPORT()
    admission = AdmissionInput.offline(obj, namespace="team-a")
    differing = [str(c) for c in compare(ruleset, exported, _SERVER(), "generated", admission) if not c.same]
    assert not differing, "\n".join(differing)


def _unique_names(spec: dict) -> bool:
    names = [c.get("name") for f in ("initContainers", "containers") for c in spec.get(f) or []]
    return len(names) == len(set(names))


def _cached(factory):  # hypothesis cannot take function-scoped fixtures: build once per module
    value = []

    def get():
        if not value:
            value.append(factory())
        return value[0]

    return get


_RULESET = _cached(pack_with_extras)
_EXPORT = _cached(lambda: export(_RULESET()))
_SERVER = _cached(Apiserver)


CEILING = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: container-ceiling}
spec:
  exceptable: false  # exported only when no exception can lift it (webhook.export.EXCEPTABLE)
  match: {kinds: [Pod], operations: [CREATE]}
  action: Deny
  failurePolicy: POLICY
  validate:
    expression: "size(containers) <= int(namespaceObject.metadata.annotations['example.com/max-containers'])"
    message: too many containers
"""


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_evaluation_errors_follow_the_failure_policy_in_both(tmp_path: Path, policy: str) -> None:
    """A namespace ceiling that is not a number: an evaluation error, denied under Fail, passed under Ignore."""
    (tmp_path / "ceiling.yaml").write_text(CEILING.replace("POLICY", policy))
    ruleset = load_rules(tmp_path).require()
    namespace = {"metadata": {"name": "team-a", "annotations": {"example.com/max-containers": "lots"}}}
    admission = AdmissionInput.offline(gpu_pod(gpus=2), namespace="team-a", namespace_object=namespace)
    [comparison] = list(compare(ruleset, export(ruleset), Apiserver(), "bad ceiling", admission))
    assert comparison.engine[0] == ("error-deny" if policy == "Fail" else "error-ignore")
    assert comparison.same, str(comparison)
