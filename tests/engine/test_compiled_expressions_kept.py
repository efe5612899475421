"""Loading rules again compiles only what changed, and never hands one rule another's program.

A reload, a `gpu-webhook test` suite and the doors that load the pack per run share the
expressions compiled before in this process (cel.py, MAX_COMPILED), per accelerator
configuration: the helpers compiled into an expression answer for their own configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, Phase, evaluate

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  params: {params}
  match:
    kinds: [Pod]
    operations: [CREATE]
  validate:
    expression: "{expression}"
    message: "{name} says no"
"""
TPU_CONFIG = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
spec:
  acceleratorResources: ["nvidia.com/gpu", "example.com/tpu"]
"""


def _programs(ruleset: Any) -> list[Any]:
    return [rule.validate.expression for rule in ruleset.rules]


def _denied_by(ruleset: Any, obj: dict[str, Any], namespace: dict[str, Any] | None = None) -> list[str]:
    decision = evaluate(ruleset, AdmissionInput.offline(obj, namespace_object=namespace), phase=Phase.VALIDATE)
    return sorted(v.rule for v in decision.violations)


def test_a_second_load_reuses_the_compiled_programs(tmp_path: Path) -> None:
    rule = RULE.format(name="needs-team", params="{label: team}", expression="params.label in object.metadata.labels")
    first = load_rule_text(tmp_path / "a", rule)
    second = load_rule_text(tmp_path / "b", rule)
    assert _programs(second)[0] is _programs(first)[0]
    unlabelled = gpu_pod()
    assert _denied_by(first, unlabelled) == _denied_by(second, unlabelled) == ["needs-team"]


def test_other_params_are_another_program(tmp_path: Path) -> None:
    text = "params.label in object.metadata.labels"
    ruleset = load_rule_text(
        tmp_path,
        RULE.format(name="needs-team", params="{label: team}", expression=text),
        RULE.format(name="needs-owner", params="{label: owner}", expression=text),
    )
    team, owner = _programs(ruleset)
    assert team is not owner
    obj = gpu_pod()
    obj["metadata"]["labels"] = {"team": "llm"}
    assert _denied_by(ruleset, obj) == ["needs-owner"]


def test_helpers_answer_for_their_own_accelerator_configuration(tmp_path: Path) -> None:
    rule = RULE.format(name="no-tpu-names", params="{}", expression="!isAccelerator('example.com/tpu')")
    default = load_rule_text(tmp_path / "default", rule)
    with_tpus = load_rule_text(tmp_path / "tpu", TPU_CONFIG, rule)
    assert _programs(default)[0] is not _programs(with_tpus)[0]
    assert _denied_by(default, gpu_pod()) == []
    assert _denied_by(with_tpus, gpu_pod()) == ["no-tpu-names"]


def test_params_without_a_cel_literal_keep_a_program_of_their_own(tmp_path: Path) -> None:
    # Infinity has no CEL literal: such params are handed to the rule's own activation, so two
    # rules with the same text must not share a program (nor its per-namespace answers).
    text = "namespaceObject != null && params.label in namespaceObject.metadata.labels"
    ruleset = load_rule_text(
        tmp_path,
        RULE.format(name="needs-team", params="{label: team, most: .inf}", expression=text),
        RULE.format(name="needs-owner", params="{label: owner, most: .inf}", expression=text),
    )
    team, owner = _programs(ruleset)
    assert team is not owner and not team.params_bound
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "uid": "u-1", "resourceVersion": "7", "labels": {"team": "llm"}},
    }
    for _ in range(2):  # the second time from the per-namespace answers
        assert _denied_by(ruleset, gpu_pod(), namespace) == ["needs-owner"]


def test_fused_programs_are_kept_across_loads_too(tmp_path: Path) -> None:
    # the engine compiles a phase's fused program on the first request that needs it (~13 ms):
    # a reload that kept the rules must not make the next requests pay that again
    rule = RULE.format(name="needs-team", params="{label: team}", expression="params.label in object.metadata.labels")
    first = load_rule_text(tmp_path / "a", rule)
    second = load_rule_text(tmp_path / "b", rule)
    text = "[[object.kind == 'Pod'], [has(object.metadata.labels)]]"
    program = first.env.compile_program(text)
    assert program is not None and second.env.compile_program(text) is program
    assert first.env.compile_program("[object.kind ==]") is None  # not CEL: evaluated alone instead
