"""The validating rules' expressions run as one CEL program per target (programs.Programs, "fused evaluation").

What a user must not be able to tell: every rule still gets its own answer, an expression that
errs is reported by its own rule with the error it gives alone, a rule that does not apply (a
plain check or its condition says no) changes nothing, and the iteration budget still counts per
expression. The tests count the single evaluations to show which path ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules
from webhook.engine.cel import MAX_FUSED_PER_RULE_SET, CompiledExpression

RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: a-passes}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: "object.kind == params.kind"
  params: {kind: Pod}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-denies}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: "containers.filter(c, c.name == params.name).map(c, 'container ' + c.name + ' is not allowed')"
  params: {name: trainer}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: c-errs-without-team}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE, UPDATE]}
  validate:
    expression: "object.metadata.labels[params.label] == 'a'"
  params: {label: team}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: d-guarded-by-condition}
spec:
  action: Deny
  match:
    kinds: [Pod]
    operations: [CREATE, UPDATE]
    condition: "has(object.metadata.labels) && params.label in object.metadata.labels"
  validate:
    expression: "object.metadata.labels[params.label] == 'yes'"
  params: {label: guarded}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: e-other-namespaces}
spec:
  action: Deny
  match:
    kinds: [Pod]
    operations: [CREATE, UPDATE]
    namespaceSelector: {matchLabels: {tier: other}}
  validate:
    expression: "object.metadata.labels[params.label] == 'x'"
  params: {label: nowhere}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: f-warns}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE, UPDATE], gpu: true}
  validate:
    expression: "targetGpuCount <= params.most"
    message: too many GPUs
  params: {most: 0}
"""

NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "uid": "u-1", "resourceVersion": "7", "labels": {"tier": "gold"}},
}


@pytest.fixture
def ruleset(tmp_path: Path) -> Any:
    return load_rule_text(tmp_path, RULES)


@pytest.fixture
def singles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts of the expressions evaluated alone (not as part of a fused program)."""
    evaluated: list[str] = []
    original = CompiledExpression.evaluate

    def evaluate_alone(self: CompiledExpression, activation: Any) -> Any:
        evaluated.append(self.text)
        return original(self, activation)

    monkeypatch.setattr(CompiledExpression, "evaluate", evaluate_alone)
    return evaluated


def _validate(ruleset: Any, pod: dict[str, Any], phase: Phase = Phase.VALIDATE) -> Any:
    return evaluate(ruleset, AdmissionInput.offline(pod, namespace="team-a", namespace_object=NAMESPACE), phase=phase)


def _outcomes(decision: Any) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {o.rule: (str(o.result), tuple(o.messages)) for o in decision.outcomes()}


def test_one_program_answers_every_rule(ruleset: Any, singles: list[str]) -> None:
    pod = gpu_pod(name="p")
    pod["metadata"]["labels"] = {"team": "a", "guarded": "no"}
    decision = _validate(ruleset, pod)
    assert singles == []  # all of it from the fused program
    assert not decision.errors
    outcomes = _outcomes(decision)
    assert outcomes["b-denies"] == ("fail", ("container trainer is not allowed",))
    assert outcomes["d-guarded-by-condition"][0] == "fail"  # its condition held: its validation ran
    assert outcomes["f-warns"] == ("warn", ("too many GPUs",))
    assert outcomes["a-passes"][0] == outcomes["c-errs-without-team"][0] == "pass"
    assert outcomes["e-other-namespaces"][0] == "skip"


def test_an_error_is_reported_by_its_own_rule_only(ruleset: Any, singles: list[str], tmp_path: Path) -> None:
    pod = gpu_pod(name="p")  # no labels: c-errs-without-team cannot read its label
    decision = _validate(ruleset, pod)
    assert singles  # the fused program erred: each expression ran alone
    [error] = decision.errors
    assert error.rule == "c-errs-without-team"
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "c.yaml").write_text(next(doc for doc in RULES.split("---\n") if "c-errs" in doc))
    alone = load_rules(tmp_path / "alone").ruleset
    assert alone is not None and len(alone.rules) == 1
    single = evaluate(alone, _input(pod), phase=Phase.VALIDATE)
    assert [str(e) for e in single.errors] == [str(error)]  # the same message as the rule alone gives
    assert "Key not found" in str(error)
    outcomes = _outcomes(decision)
    assert outcomes["c-errs-without-team"][0] == "error"
    assert outcomes["b-denies"] == ("fail", ("container trainer is not allowed",))
    assert outcomes["f-warns"] == ("warn", ("too many GPUs",))
    # the condition kept d's validation (which would err on this pod too) from running
    assert outcomes["d-guarded-by-condition"][0] == "skip"
    assert [v.rule for v in decision.violations] == ["b-denies", "c-errs-without-team"]  # failurePolicy Fail


def _input(pod: dict[str, Any]) -> AdmissionInput:
    return AdmissionInput.offline(pod, namespace="team-a", namespace_object=NAMESPACE)


def test_rules_that_do_not_apply_change_nothing(ruleset: Any, singles: list[str]) -> None:
    # e-other-namespaces (namespaceSelector) and d-guarded-by-condition (condition false) would both err
    # on this pod; neither is evaluated, so the others still share one program
    pod = gpu_pod(name="p")
    pod["metadata"]["labels"] = {"team": "b"}
    decision = _validate(ruleset, pod)
    assert singles == []
    assert not decision.errors
    assert _outcomes(decision)["c-errs-without-team"] == ("fail", ("pod p violates c-errs-without-team",))


def test_validation_sees_the_mutations_of_the_same_evaluation(tmp_path: Path, singles: list[str]) -> None:
    (tmp_path / "rules.yaml").write_text(
        RULES
        + """\
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: m-labels}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - setLabels: {values: {team: a, guarded: "yes"}}
"""
    )
    ruleset = load_rules(tmp_path).ruleset
    assert ruleset is not None
    decision = evaluate(ruleset, _input(gpu_pod(name="p")), phase=Phase.ALL)
    assert not decision.errors  # c and d read the labels the mutation wrote
    assert [v.rule for v in decision.violations] == ["b-denies"]
    assert not any("labels" in text for text in singles)  # the validations ran fused


def test_the_iteration_budget_still_counts_per_expression(tmp_path: Path, singles: list[str]) -> None:
    # each expression takes 6,000 comprehension steps: alone within the 10,000 per expression, together not
    rule = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: loop-{n}}}
spec:
  action: Deny
  match: {{kinds: [Pod], operations: [CREATE]}}
  validate:
    expression: "object.metadata.labels.all(k, params.steps.all(i, i >= 0))"
  params: {{steps: [{steps}]}}
"""
    steps = ", ".join(["1"] * 600)
    (tmp_path / "rules.yaml").write_text("---\n".join(rule.format(n=n, steps=steps) for n in range(2)))
    ruleset = load_rules(tmp_path).ruleset
    assert ruleset is not None
    pod = gpu_pod(name="p")
    pod["metadata"]["labels"] = {f"k{i}": "v" for i in range(10)}
    decision = evaluate(ruleset, _input(pod), phase=Phase.VALIDATE)
    assert not decision.errors and decision.allowed
    assert len(singles) == 2  # after the fused program ran out of steps


def test_tenants_cannot_make_the_engine_compile_and_keep_fused_programs_without_bound(tmp_path: Path) -> None:
    # Which rules pass the plain checks is the tenant's choice (here: labels), and each distinct
    # set would be its own fused program (~1-2 MiB, ~13 ms). 6 rules give 57 sets of two or more.
    rules = "---\n".join(
        f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: r{i}}}
spec:
  params: {{n: {i}}}
  match: {{kinds: [Pod], objectSelector: {{matchLabels: {{r{i}: "y"}}}}}}
  validate: {{expression: "params.n < 0", message: "r{i} says no"}}
"""
        for i in range(6)
    )
    (tmp_path / "rules.yaml").write_text(rules)
    ruleset = load_rules(tmp_path).require()
    for subset in range(64):
        chosen = {f"r{i}" for i in range(6) if subset >> i & 1}
        pod = gpu_pod()
        pod["metadata"]["labels"] = dict.fromkeys(chosen, "y")
        decision = evaluate(ruleset, AdmissionInput.offline(pod), phase=Phase.VALIDATE)
        assert {v.rule for v in decision.violations} == chosen  # fused or alone, the same answers
    assert ruleset.env.fused_programs == MAX_FUSED_PER_RULE_SET
