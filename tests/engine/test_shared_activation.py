"""Rule params compiled in as constants, so one CEL activation serves every rule of a request."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, Result, evaluate
from webhook.engine.cel import CelCompileError, CelEnvironment, cel_literal
from webhook.engine.resources import DEFAULT

VALUES: list[Any] = [
    {},
    {"taintKey": "nvidia.com/gpu", "labels": ["a", "b"], "n": 3, "ratio": 0.5, "on": True, "none": None},
    {"quote": 'say "hi" \\ bye', "newline": "a\nb\tc\x01", "unicode": "Grüße ✓", "nested": {"x": [{"y": -7}]}},
    {"big": 2**62, "neg": -(2**63), "float": 1e-7, "ints": {1: "one"}},
]


@pytest.fixture(scope="module")
def env() -> CelEnvironment:
    return CelEnvironment(DEFAULT)


@pytest.mark.parametrize("params", VALUES)
def test_the_literal_is_the_same_value_as_the_converted_params(env: CelEnvironment, params: Any) -> None:
    bound = env.compile("params", params=params)
    assert bound.params_bound
    plain = env.compile("params")
    assert not plain.params_bound
    assert bound.evaluate(env.activation({"params": None})) == plain.evaluate(env.activation({"params": params}))


@pytest.mark.parametrize("params", [{"when": datetime.datetime(2026, 1, 1)}, {"huge": 2**70}, {"nan": float("nan")}])
def test_params_without_a_literal_keep_the_per_rule_variable(env: CelEnvironment, params: Any) -> None:
    assert cel_literal(params) is None
    assert not env.compile("has(params.x)", params=params).params_bound


def test_params_are_an_argument_of_compile_not_state_of_the_environment(env: CelEnvironment) -> None:
    assert env.compile("params.a == 1", params={"a": 1}).params_bound
    after = env.compile("params.a == 1")  # nothing left over from the call before
    assert not after.params_bound
    assert after.evaluate(env.activation({"params": {"a": 2}})) is False


def test_trailing_comment_and_error_positions_are_the_authors(env: CelEnvironment) -> None:
    broken = "params.a == 1 &&\n  nosuch.b"
    with pytest.raises(CelCompileError) as plain:
        env.compile(broken)
    assert env.compile("params.a == 1 // the usual", params={"a": 1}).evaluate(env.activation({})) is True
    with pytest.raises(CelCompileError) as bound:
        env.compile(broken, params={"a": 1})
    assert (bound.value.line, bound.value.column) == (plain.value.line, plain.value.column)
    assert bound.value.line == 2 and str(bound.value) == str(plain.value)


RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: small-limit}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "targetGpuCount <= params.max && podSpec.containers.size() == 1", message: small}
  params: {max: 1}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: large-limit}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "targetGpuCount <= params.max && podSpec.containers.size() == 1", message: large}
  params: {max: 8}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: not-a-number}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "params.x == params.x", message: nan}
  params: {x: .nan}
"""


def test_each_rule_sees_its_own_params_on_the_shared_activation(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, RULES)
    bound = {rule.name: rule.validate.expression.params_bound for rule in ruleset.rules if rule.validate}
    assert bound == {"small-limit": True, "large-limit": True, "not-a-number": False}
    decision = evaluate(ruleset, AdmissionInput(object=gpu_pod(gpus=4), namespace="team-a"))
    assert decision.errors == []
    # 4 > 1 warns, 4 <= 8 passes; NaN (no literal, own activation) is not equal to itself: warns
    assert [v.rule for v in decision.warnings] == ["small-limit", "not-a-number"]


def test_params_named_with_a_leading_dot_are_the_rules_params(tmp_path: Path) -> None:
    """`.params` is CEL's leading dot: the variable from the root scope. Bound in as a constant
    (cel.bind), the root variable was never handed over, so every such rule errored (denied under
    failurePolicy Fail); it reads the rule's params like `params` does."""
    expression = "containers.all(c, !has(c.env) || c.env.all(e, !(e.name in {}params.banned)))"
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    for prefix in ("", ".", ". "):
        rule = (
            "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: banned-env}\n"
            "spec:\n  action: Deny\n  match: {kinds: [Pod]}\n  params: {banned: [NVIDIA_VISIBLE_DEVICES]}\n"
            f"  validate:\n    expression: {expression.format(prefix)!r}\n    message: banned\n"
        )
        ruleset = load_rule_text(tmp_path / repr(prefix), rule)
        outcomes = {o.rule: o for o in evaluate(ruleset, AdmissionInput.offline(pod)).outcomes()}
        assert (outcomes["banned-env"].result, outcomes["banned-env"].messages) == (Result.FAIL, ("banned",)), prefix
        assert evaluate(ruleset, AdmissionInput.offline(gpu_pod())).allowed, prefix
