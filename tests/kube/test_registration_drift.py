"""What the registration sync compares and writes (webhook/server/registration_sync.py), as pure functions.

Live configurations here are what `webhook.install.registration.configurations` renders, edited the way a
stale or hand-edited one would be; the real apiserver round trip is tests/e2e/test_registration_sync.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.support import load_rule_text
from webhook.engine import RuleSet
from webhook.install.registration import (
    ENTRIES,
    INPUTS_CHANGED,
    MUTATING,
    VALIDATING,
    configurations,
    derive,
    entry_fields,
)
from webhook.server.registration_sync import (
    atoms,
    covers,
    entry_drift,
    in_step,
    plan,
    uncovered,
    widened,
)

VALIDATE = "validate.gpu-webhook.io"
(VALIDATE_ENTRY,) = [e for e in ENTRIES if e.name == VALIDATE]


def rule(name: str, kinds: str, expression: str = "'true'", body: str = "") -> str:
    return f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  match: {{kinds: {kinds}, operations: [CREATE, UPDATE]}}
  autogen: false
  {body or f"validate: {{expression: {expression}, message: 'no'}}"}
"""


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    """Rules that validate Pods only."""
    return load_rule_text(tmp_path_factory.mktemp("old"), rule("pods", "[Pod]"))


@pytest.fixture(scope="module")
def new(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    """The next version: Jobs too, and a rule reading a label (the UPDATE condition watches labels then)."""
    return load_rule_text(
        tmp_path_factory.mktemp("new"),
        rule("pods", "[Pod]"),
        rule("jobs", "[Job]", "\"!has(object.metadata.labels) || !('x' in object.metadata.labels)\""),
    )


def validating(ruleset: RuleSet) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration as the apiserver returns it (kind, metadata, a caBundle)."""
    (configuration,) = [c for c in configurations(ruleset) if c["kind"] == VALIDATING]
    configuration = copy.deepcopy(configuration)
    configuration["metadata"]["resourceVersion"] = "7"
    configuration["webhooks"][0]["clientConfig"]["caBundle"] = "Q0E="
    configuration["webhooks"][0]["failurePolicy"] = "Ignore"  # an overlay's choice, never ours
    return configuration


def webhook(configuration: dict[str, Any], name: str = VALIDATE) -> dict[str, Any]:
    (found,) = [w for w in configuration["webhooks"] if w["name"] == name]
    return found


def test_resource_patterns_are_matched_as_the_apiserver_does() -> None:
    def sends(resources: list[str], resource: str, scope: str = "*", **other: list[str]) -> bool:
        live = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": resources}
        live.update(other)
        if scope != "*":
            live["scope"] = scope  # type: ignore[assignment]
        return covers(live, ("", "v1", resource, "CREATE", "Namespaced"))

    assert sends(["pods"], "pods")
    assert sends(["*"], "pods") and not sends(["*"], "pods/ephemeralcontainers")  # `*`: no subresources
    assert sends(["*/*"], "pods/ephemeralcontainers") and sends(["pods/*"], "pods/ephemeralcontainers")
    assert sends(["*/ephemeralcontainers"], "pods/ephemeralcontainers") and not sends(["pods/*"], "pods")
    assert not sends(["pods/status"], "pods/ephemeralcontainers") and not sends(["deployments"], "pods")
    assert sends(["pods"], "pods", operations=["*"]) and not sends(["pods"], "pods", operations=["UPDATE"])
    assert sends(["pods"], "pods", apiGroups=["*"], apiVersions=["*"])
    assert not sends(["pods"], "pods", apiVersions=["v2"])
    assert sends(["pods"], "pods", scope="Namespaced") and not sends(["pods"], "pods", scope="Cluster")
    # a declared kind needs scope `*` (it may be either): only `*` (the default) sends every one
    declared = ("", "v1", "services", "CREATE", "*")
    assert covers({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"]}, declared)
    assert not covers(
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"], "scope": "Namespaced"},
        declared,
    )


def test_a_configuration_rendered_from_the_rules_is_in_step(new: RuleSet) -> None:
    live = validating(new)
    drift = entry_drift(VALIDATE, webhook(live), entry_fields(new, VALIDATE_ENTRY))
    assert not drift.drift and drift.found
    assert in_step(webhook(live), entry_fields(new, VALIDATE_ENTRY))
    for exact in (True, False):
        assert plan(live, new, exact=exact).desired is None  # nothing to write


def test_a_missing_kind_and_an_unknown_condition_are_drift(new: RuleSet) -> None:
    live = validating(new)
    entry = webhook(live)
    for rule_ in entry["rules"]:
        rule_["resources"] = [r for r in rule_["resources"] if r != "jobs"]
    entry["rules"] = [r for r in entry["rules"] if r["resources"]]
    entry["matchConditions"].append({"name": "only-gpu", "expression": "false"})

    drift = entry_drift(VALIDATE, entry, entry_fields(new, VALIDATE_ENTRY))

    assert drift.missing == ("batch/v1 jobs CREATE,UPDATE",)
    assert drift.conditions == ("only-gpu",)
    assert drift.detail() == {
        "found": True,
        "drift": True,
        "missing": ["batch/v1 jobs CREATE,UPDATE"],
        "unexpectedMatchConditions": ["only-gpu"],
    }
    # the same name with another expression could skip what the rules act on, too
    changed = copy.deepcopy(webhook(validating(new)))
    changed["matchConditions"][0]["expression"] = "false"
    assert entry_drift(VALIDATE, changed, entry_fields(new, VALIDATE_ENTRY)).conditions == (INPUTS_CHANGED,)


def test_an_entry_or_configuration_that_is_not_there_misses_everything(new: RuleSet) -> None:
    live = validating(new)
    live["webhooks"] = []
    drift, policies = plan(live, new, exact=True).entries
    assert not drift.found and not policies.found
    assert drift.missing == (
        "v1 pods CREATE,UPDATE",
        "v1 pods/ephemeralcontainers UPDATE",
        "batch/v1 jobs CREATE,UPDATE",
    )
    assert plan(live, new, exact=True).desired is None  # entries are never added


def test_a_wider_registration_is_not_drift_but_an_exact_pass_narrows_it(new: RuleSet) -> None:
    live = validating(new)
    entry = webhook(live)
    entry["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]
    del entry["matchConditions"]

    assert not entry_drift(VALIDATE, entry, entry_fields(new, VALIDATE_ENTRY)).drift
    assert plan(live, new, exact=False).desired is None  # the periodic check never narrows
    exact = plan(live, new, exact=True)
    assert exact.changed == (VALIDATE,)
    assert exact.desired == derive([live], new)[0]


def test_an_exact_write_changes_only_rules_and_match_conditions(new: RuleSet, old: RuleSet) -> None:
    live = validating(old)
    desired = plan(live, new, exact=True).desired
    assert desired is not None
    for before, after in zip(live["webhooks"], desired["webhooks"], strict=True):
        fixed = {k: v for k, v in before.items() if k not in ("rules", "matchConditions")}
        assert {k: v for k, v in after.items() if k not in ("rules", "matchConditions")} == fixed
    assert {k: v for k, v in desired.items() if k != "webhooks"} == {k: v for k, v in live.items() if k != "webhooks"}
    assert in_step(webhook(desired), entry_fields(new, VALIDATE_ENTRY))


def test_a_repair_widens_and_is_stable(new: RuleSet, old: RuleSet) -> None:
    live = validating(old)  # the registration of the old rules: no jobs, an UPDATE condition without labels
    fields = entry_fields(new, VALIDATE_ENTRY)
    assert entry_drift(VALIDATE, webhook(live), fields).drift

    repaired = widened(webhook(live), fields)

    assert webhook(live)["rules"] == repaired["rules"][: len(webhook(live)["rules"])]  # nothing taken away
    assert not uncovered(repaired["rules"], fields["rules"])
    assert "matchConditions" not in repaired  # the old UPDATE condition does not watch labels: dropped
    assert not entry_drift(VALIDATE, repaired, fields).drift
    assert widened(repaired, fields) == repaired


def test_replicas_on_old_and_new_rules_do_not_undo_each_other(new: RuleSet, old: RuleSet) -> None:
    """Mid-rollout of a ConfigMap change: each replica's periodic pass may only widen, so after at
    most one repair the registration suits both and nobody writes again."""
    live = plan(validating(old), new, exact=True).desired  # the new replica reloaded first
    assert live is not None
    writes = 0
    for _round in range(3):
        for ruleset in (old, new):
            step = plan(live, ruleset, exact=False)
            if step.desired is not None:
                live, writes = step.desired, writes + 1
    assert writes == 1  # the old replica drops the new UPDATE condition it does not know; then all agree
    for ruleset in (old, new):
        assert not plan(live, ruleset, exact=False).drift
    # the old replica's own reload brings the new rules: its exact write is the derived registration
    final = plan(live, new, exact=True).desired or live
    assert in_step(webhook(final), entry_fields(new, VALIDATE_ENTRY))


def test_atoms_expand_and_deduplicate() -> None:
    rules: list[dict[str, Any]] = [
        {"apiGroups": ["", "apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["a", "b"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["a"], "scope": "*"},
    ]
    assert atoms(rules) == [
        ("", "v1", "a", "CREATE", "*"),
        ("", "v1", "b", "CREATE", "*"),
        ("apps", "v1", "a", "CREATE", "*"),
        ("apps", "v1", "b", "CREATE", "*"),
    ]


def test_the_mutating_configuration_is_compared_by_its_own_entries(tmp_path: Path) -> None:
    mutating = load_rule_text(tmp_path, rule("label", "[Pod]", body="mutate: [{setLabels: {values: {a: b}}}]"))
    (live,) = [c for c in configurations(mutating) if c["kind"] == MUTATING]
    step = plan(live, mutating, exact=True)
    assert [e.webhook for e in step.entries] == ["mutate.gpu-webhook.io", "mutate-tenants.gpu-webhook.io"]
    assert step.desired is None
