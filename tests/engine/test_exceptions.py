"""GPUPolicyException in the engine: who it lets through which rule, until when, and what it says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.engine import (
    AdmissionInput,
    ClusterContext,
    Phase,
    PolicyException,
    Result,
    RuleLoadError,
    evaluate,
    parse_exception,
)
from webhook.engine.exceptions import excepting
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

RULES = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: needs-team}
spec:
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate: {expression: "has(object.metadata.labels) && 'team' in object.metadata.labels", message: "label team"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: no-privileged}
spec:
  exceptable: false
  match: {kinds: [Pod]}
  validate:
    expression: "!podSpec.containers.exists(c, has(c.securityContext) && c.securityContext.privileged == true)"
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: label-it}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate: [{setLabels: {values: {managed: "yes"}}}]
"""
FUTURE = "2099-01-01T00:00:00Z"


def exception(name: str = "debug", namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    spec = {"rules": ["needs-team"], "reason": "vendor debugging", **spec}
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def load(*extra: dict[str, Any]) -> Any:
    import yaml

    text = RULES + "".join("---\n" + yaml.safe_dump(doc) for doc in extra)
    return compile_documents(load_documents(text, "rules.yaml"))


def deployment(name: str = "train", namespace: str = "team-a", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }


def outcome(decision: Any, rule: str) -> Any:
    return next(o for o in decision.outcomes() if o.rule == rule)


def test_an_exception_lets_one_object_through_one_rule_and_says_so():
    ruleset = load(exception(match={"kinds": ["Deployment"], "names": ["train"]}, expires=FUTURE)).require()
    decision = evaluate(ruleset, AdmissionInput.offline(deployment()))
    assert decision.allowed
    found = outcome(decision, "needs-team")
    assert found.result == Result.EXCEPTED
    assert found.reason == "excepted by team-a/debug: vendor debugging"
    assert not found.blocks and not found.patch
    assert decision.exceptions_used == [("team-a/debug", "needs-team")]
    # the rule it does not name still acts: label-it patches the template
    assert outcome(decision, "label-it").patch
    # another Deployment of the namespace is denied by the rule
    other = evaluate(ruleset, AdmissionInput.offline(deployment("serve")))
    assert not other.allowed and outcome(other, "needs-team").result == Result.FAIL
    assert other.exceptions_used == []


def test_never_outside_its_namespace():
    ruleset = load(exception()).require()
    assert evaluate(ruleset, AdmissionInput.offline(deployment())).allowed
    elsewhere = evaluate(ruleset, AdmissionInput.offline(deployment(namespace="team-b")))
    assert not elsewhere.allowed
    # a cluster-scoped object (no namespace) is never excepted
    cluster = ClusterContext(exceptions=(parse_exception(exception(namespace="default")),))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    admission = AdmissionInput.offline(pod).with_context(cluster)
    assert admission.namespace is None
    assert not evaluate(load().require(), admission).allowed


def test_an_expired_exception_stops_applying_with_no_reload():
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    ruleset = load(exception(expires="2030-01-01T00:00:00Z")).require()
    before = AdmissionInput.offline(deployment(), now=expires - timedelta(seconds=1))
    after = AdmissionInput.offline(deployment(), now=expires)
    assert outcome(evaluate(ruleset, before), "needs-team").result == Result.EXCEPTED
    assert outcome(evaluate(ruleset, after), "needs-team").result == Result.FAIL
    # without `now`, evaluate compares with the current time
    past = load(exception(expires="2001-01-01T00:00:00+02:00")).require()
    assert not evaluate(past, AdmissionInput.offline(deployment())).allowed


def test_kinds_names_and_selector_all_must_match():
    selected = exception(match={"objectSelector": {"matchLabels": {"debug": "true"}}, "kinds": ["Deployment"]})
    ruleset = load(selected).require()
    assert not evaluate(ruleset, AdmissionInput.offline(deployment())).allowed
    assert evaluate(ruleset, AdmissionInput.offline(deployment(labels={"debug": "true"}))).allowed
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {"debug": "true"}},
    }
    pod["spec"] = {"containers": [{"name": "c", "image": "x"}]}
    assert not evaluate(ruleset, AdmissionInput.offline(pod)).allowed  # kinds: [Deployment] only


def test_a_rule_marked_not_exceptable_is_never_excepted():
    result = load(exception(rules=["no-privileged"]))
    assert not result.ok
    assert "rule 'no-privileged' cannot be excepted (spec.exceptable: false)" in str(result.errors[0])
    # one that reached evaluate anyway (from the cluster) is ignored
    pod = deployment()
    pod["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    pod["metadata"]["labels"] = {"team": "a"}
    sneaky = parse_exception(exception(rules=["no-privileged", "needs-team"]))
    admission = AdmissionInput.offline(pod).with_context(ClusterContext(exceptions=(sneaky,)))
    decision = evaluate(load().require(), admission)
    assert outcome(decision, "no-privileged").result == Result.FAIL
    assert not decision.allowed


def test_an_excepted_mutation_does_not_patch():
    ruleset = load(exception(rules=["label-it"])).require()
    decision = evaluate(ruleset, AdmissionInput.offline(deployment(labels={"team": "a"})))
    assert decision.patch == []
    assert outcome(decision, "label-it").result == Result.EXCEPTED


def test_the_server_path_without_a_trace_reports_it():
    ruleset = load(exception()).require()
    decision = evaluate(ruleset, AdmissionInput.offline(deployment()), phase=Phase.VALIDATE, trace=False)
    assert [(o.rule, o.result) for o in decision.outcomes()] == [("needs-team", Result.EXCEPTED)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"rules": ["nothere"]}, "no rule named 'nothere'"),
        ({"expires": "next week"}, "spec.expires: 'next week' is not an RFC 3339 time"),
        ({"expires": "2030-01-01T00:00:00"}, "is not an RFC 3339 time with a zone"),
        ({"reason": ""}, "spec.reason"),
        ({"rules": []}, "spec.rules"),
    ],
)
def test_bad_exceptions_are_load_errors_at_their_place(spec, expected):
    result = load(exception(**spec))
    assert not result.ok
    assert any(expected in str(error) for error in result.errors), result.errors
    assert all(error.location.file == "rules.yaml" and error.location.line > 1 for error in result.errors)


def test_an_exception_needs_its_namespace():
    document = exception()
    del document["metadata"]["namespace"]
    with pytest.raises(RuleLoadError, match="'namespace' is a required property"):
        parse_exception(document)


def test_parse_exception_of_a_cluster_object():
    found = parse_exception(exception(match={"names": ["a", "b"]}, expires="2030-01-01T01:00:00+01:00"))
    assert found == PolicyException(
        name="debug",
        namespace="team-a",
        rules=frozenset({"needs-team"}),
        names=frozenset({"a", "b"}),
        expires=datetime(2030, 1, 1, tzinfo=UTC),
        reason="vendor debugging",
        source=found.source,
    )
    at = datetime(2029, 1, 1, tzinfo=UTC)
    assert excepting([found], "Pod", {"metadata": {"name": "a"}}, "team-a", at) == {"needs-team": found}
    assert excepting([found], "Pod", {"metadata": {"name": "c"}}, "team-a", at) == {}


def test_of_two_covering_exceptions_the_first_by_name_is_reported():
    ruleset = load(exception("zeta"), exception("alpha", reason="first")).require()
    decision = evaluate(ruleset, AdmissionInput.offline(deployment()))
    assert outcome(decision, "needs-team").reason == "excepted by team-a/alpha: first"
    assert decision.exceptions_used == [("team-a/alpha", "needs-team")]
