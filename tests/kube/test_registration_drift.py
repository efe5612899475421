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
    targets,
    uncovered,
    union,
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


def needs(ruleset: RuleSet) -> dict[str, Any]:
    """What a replica with these rules publishes: every entry's derived fields."""
    return {e.name: entry_fields(ruleset, e) for e in ENTRIES}


def writer(live: dict[str, Any], ruleset: RuleSet, *others: RuleSet, keep_live: bool = False) -> dict[str, Any]:
    """The writer's targets for `live`, its own rules `ruleset`, other live replicas on `others`."""
    return targets(needs(ruleset), [needs(o) for o in others], live, keep_live=keep_live)


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
    assert plan(live, new).desired is None  # not the writer: never anything to write
    assert plan(live, new, writer(live, new)).desired is None  # the writer: nothing either


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
    drift, policies = plan(live, new, writer(live, new)).entries
    assert not drift.found and not policies.found
    assert drift.missing == (
        "v1 pods CREATE,UPDATE",
        "v1 pods/ephemeralcontainers UPDATE",
        "batch/v1 jobs CREATE,UPDATE",
    )
    assert plan(live, new, writer(live, new)).desired is None  # entries are never added


def test_a_wider_registration_is_not_drift_and_the_writer_narrows_it_only_when_no_replica_may_need_it(
    new: RuleSet,
) -> None:
    live = validating(new)
    entry = webhook(live)
    entry["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]
    del entry["matchConditions"]

    assert not entry_drift(VALIDATE, entry, entry_fields(new, VALIDATE_ENTRY)).drift
    assert plan(live, new).desired is None  # a replica that is not the writer never writes
    # a replica of unknown needs is alive: whatever the live entry sends stays
    assert plan(live, new, writer(live, new, keep_live=True)).desired is None
    # every live replica said what it needs: the writer narrows to exactly that
    narrowed = plan(live, new, writer(live, new))
    assert narrowed.changed == (VALIDATE,)
    assert narrowed.desired == derive([live], new)[0]


def test_a_write_changes_only_rules_and_match_conditions(new: RuleSet, old: RuleSet) -> None:
    live = validating(old)
    desired = plan(live, new, writer(live, new)).desired
    assert desired is not None
    for before, after in zip(live["webhooks"], desired["webhooks"], strict=True):
        fixed = {k: v for k, v in before.items() if k not in ("rules", "matchConditions")}
        assert {k: v for k, v in after.items() if k not in ("rules", "matchConditions")} == fixed
    assert {k: v for k, v in desired.items() if k != "webhooks"} == {k: v for k, v in live.items() if k != "webhooks"}
    assert in_step(webhook(desired), entry_fields(new, VALIDATE_ENTRY))


def test_the_union_sends_what_either_pack_needs_and_keeps_only_shared_conditions(new: RuleSet, old: RuleSet) -> None:
    old_fields, new_fields = entry_fields(old, VALIDATE_ENTRY), entry_fields(new, VALIDATE_ENTRY)
    assert uncovered(old_fields["rules"], new_fields["rules"])  # the new pack needs jobs, the old one does not

    both = union([old_fields, new_fields])

    assert both["rules"][: len(old_fields["rules"])] == old_fields["rules"]  # the first one's rules, in order
    assert not uncovered(both["rules"], new_fields["rules"]) and not uncovered(both["rules"], old_fields["rules"])
    # the UPDATE conditions differ (the new pack watches labels): one that the old one derives could skip a
    # label-only UPDATE the new one acts on, so neither is kept
    assert "matchConditions" not in both
    assert not entry_drift(VALIDATE, both, new_fields).drift and not entry_drift(VALIDATE, both, old_fields).drift
    assert union([new_fields, new_fields]) == new_fields  # alike: exactly the derived fields
    assert union([both, new_fields]) == both  # stable
    # an entry without rules is never called: it does not take the others' conditions away
    assert union([new_fields, {"rules": []}]) == new_fields


def test_writers_on_either_pack_write_the_same_union_and_nobody_writes_again(new: RuleSet, old: RuleSet) -> None:
    """Mid-rollout: whichever replica holds the Lease, given both records it writes one registration
    that sends what both need, and a later pass by the other as writer finds nothing to write."""
    live = validating(old)
    # the records are read in digest order, the same for every writer
    ordered = sorted([old, new], key=lambda r: repr(needs(r)))
    first = plan(live, ordered[0], writer(live, ordered[0], ordered[1])).desired
    assert first is not None
    assert plan(first, ordered[1], writer(first, ordered[1], ordered[0])).desired is None
    for ruleset in (old, new):
        assert not plan(first, ruleset).drift
    # the old replica is gone (its record withdrawn or expired): the writer narrows to the new pack's fields
    final = plan(first, new, writer(first, new)).desired
    assert final is not None and in_step(webhook(final), entry_fields(new, VALIDATE_ENTRY))


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
    step = plan(live, mutating, writer(live, mutating))
    assert [e.webhook for e in step.entries] == ["mutate.gpu-webhook.io", "mutate-tenants.gpu-webhook.io"]
    assert step.desired is None
