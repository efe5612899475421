"""Overlays as a site writes them: on match fields, twice under one name, with params for a rule that has
none. Each problem is a LoadError at the overlay (the loader reports, the server keeps its last good
rules), never a silent choice and never a crash."""

from __future__ import annotations

from typing import Any

from tests.engine.test_overlays import PACK, POD, overlay
from webhook.engine import AdmissionInput, evaluate
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

PARAMLESS = """
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: no-params}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "has(object.metadata.labels)", message: "labels please"}
"""


def load(*overlays: str) -> Any:
    documents = load_documents(PACK + PARAMLESS, "pack.yaml")
    for index, text in enumerate(overlays):
        documents += load_documents(text, f"site-{index}.yaml")
    return compile_documents(documents)


def messages(result: Any) -> list[str]:
    assert not result.ok
    return [str(error) for error in result.errors]


def test_two_overlays_setting_one_match_field_is_an_error() -> None:
    result = load(
        overlay("a", {"name": "needs-label", "match": {"namespaces": {"exclude": ["team-a"]}}}),
        overlay("b", {"name": "needs-label", "match": {"namespaces": {"include": ["team-b"]}}}),
    )
    (message,) = messages(result)
    assert message.startswith("site-1.yaml:")
    assert "GPUPolicyOverlay b: rule 'needs-label': match.namespaces also set by GPUPolicyOverlay a" in message


def test_each_match_field_is_its_own_field() -> None:
    selector = {"matchLabels": {"tier": "prod"}}
    ruleset = load(
        overlay("a", {"name": "needs-label", "match": {"namespaces": {"exclude": ["team-b"]}}}),
        overlay("b", {"name": "needs-label", "match": {"objectSelector": selector}}),
        overlay("c", {"name": "needs-label", "match": {"namespaceSelector": {"matchLabels": {"gpu": "true"}}}}),
    ).require()
    (rule,) = [r for r in ruleset.rules if r.name == "needs-label"]
    assert rule.match.namespaces_exclude == frozenset({"team-b"})
    assert rule.match.object_selector is not None and rule.match.namespace_selector is not None
    assert rule.overlaid_by == "a (match.namespaces); b (match.objectSelector); c (match.namespaceSelector)"
    # the overlaid objectSelector decides: an unlabelled pod is no longer judged
    unlabelled = {**POD, "metadata": {"name": "p", "namespace": "team-a"}}
    assert "needs-label" not in [v.rule for v in evaluate(ruleset, AdmissionInput.offline(unlabelled)).violations]


def test_a_duplicate_overlay_name_is_an_error_at_the_second() -> None:
    result = load(
        overlay("site", {"name": "needs-label", "action": "Warn"}),
        overlay("site", {"name": "placement", "enabled": False}),
    )
    (message,) = messages(result)
    assert message.startswith("site-1.yaml:")
    assert "GPUPolicyOverlay site: duplicate name (first at site-0.yaml:" in message


def test_a_params_overlay_on_a_rule_without_params_is_a_load_error() -> None:
    result = load(overlay("site", {"name": "no-params", "params": {"key": "team"}}))
    (message,) = messages(result)
    assert message.startswith("site-0.yaml:")
    assert "GPUPolicyOverlay site: rule 'no-params' has no param 'key' (its params: none)" in message


def test_a_params_overlay_naming_several_missing_params_reports_each() -> None:
    result = load(overlay("site", {"name": "needs-label", "params": {"kee": "x", "other": "y"}}))
    assert [m.split(": ", 1)[1] for m in messages(result)] == [
        "GPUPolicyOverlay site: rule 'needs-label' has no param 'kee' (did you mean 'key'?)",
        "GPUPolicyOverlay site: rule 'needs-label' has no param 'other' (its params: key)",
    ]


def test_an_overlay_on_a_rule_whose_own_document_is_broken_is_not_reported_twice() -> None:
    broken = PARAMLESS.replace("no-params", "broken").replace("has(object.metadata.labels)", "object.(")
    documents = load_documents(PACK + PARAMLESS + broken, "pack.yaml")
    documents += load_documents(overlay("site", {"name": "broken", "action": "Warn"}), "site-0.yaml")
    result = compile_documents(documents)
    assert not result.ok
    assert all("site-0.yaml" not in str(error) for error in result.errors), result.errors


def test_an_overlay_that_changes_nothing_leaves_the_rule_as_shipped() -> None:
    ruleset = load(overlay("site", {"name": "needs-label", "params": {}})).require()
    (rule,) = [r for r in ruleset.rules if r.name == "needs-label"]
    assert rule.params == {"key": "team"}
    assert rule.overlaid_by == "site ()"
    untouched = [r for r in ruleset.rules if r.name == "no-params"]
    assert untouched[0].overlaid_by == ""


def test_every_problem_is_reported_not_only_the_first() -> None:
    result = load(
        overlay("site", {"name": "needs-label", "action": "Warn"}),
        overlay("site", {"name": "placement", "action": "Warn"}),  # a duplicate name
        overlay(
            "later",
            {"name": "needs-label", "params": {"nope": 1}},  # a missing param
            {"name": "needs-label", "action": "Audit"},  # a clash with `site`
            {"name": "no-params", "action": "Audit", "enabled": False},
            {"name": "placment", "action": "Warn"},  # a missing rule, after the others
        ),
    )
    found = [m.split(": ", 1)[1] for m in messages(result)]
    assert [m.split(":")[0] for m in found] == ["GPUPolicyOverlay site", *["GPUPolicyOverlay later"] * 3]
    assert "duplicate name" in found[0]
    assert "has no param 'nope'" in found[1]
    assert "action also set by GPUPolicyOverlay site" in found[2]
    assert "no rule named 'placment' in the rules loaded (did you mean 'placement'?)" in found[3]


def test_a_clash_names_the_overlay_that_set_the_first_field() -> None:
    result = load(
        overlay("a", {"name": "needs-label", "action": "Warn"}),
        overlay("b", {"name": "needs-label", "failurePolicy": "Ignore"}),
        overlay("c", {"name": "needs-label", "action": "Audit", "failurePolicy": "Fail"}),
    )
    (message,) = messages(result)
    assert "GPUPolicyOverlay c: rule 'needs-label': action, failurePolicy also set by GPUPolicyOverlay a;" in message


def test_disabling_the_first_rule_keeps_the_others() -> None:
    ruleset = load(overlay("off", {"name": "needs-label", "enabled": False})).require()
    assert [rule.name for rule in ruleset.rules] == ["placement", "no-params"]


SITE_OVERLAY = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyOverlay
metadata: {name: site}
spec:
  rules:
    - name: needs-lable
      params:
        kee: x
"""


def test_errors_point_at_the_rule_name_and_at_the_param_key() -> None:
    documents = load_documents(PACK + PARAMLESS, "pack.yaml") + load_documents(SITE_OVERLAY, "site.yaml")
    (missing_rule,) = compile_documents(documents).errors
    assert (missing_rule.location.line, missing_rule.location.column) == (6, 13)  # the value `needs-lable`
    documents = load_documents(PACK + PARAMLESS, "pack.yaml")
    documents += load_documents(SITE_OVERLAY.replace("needs-lable", "needs-label"), "site.yaml")
    (missing_param,) = compile_documents(documents).errors
    assert (missing_param.location.line, missing_param.location.column) == (8, 9)  # the key `kee`
