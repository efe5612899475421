"""An activation kept across edits (programs.py `_stale`, `edit_reaches`) changes no decision.

After a mutation edits the working copy, the shared activation is made again only when the edit
reaches a field the next expression reads; one made again holds that expression's own reads.
Every case of the pack's suites and a few generated objects are evaluated twice: as the engine
runs, and with a new full activation after every edit (as before). The decisions must be equal.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.support import RULES, cpu_pod, gpu_pod, load_rule_text
from webhook.authoring.suite import admission, discover
from webhook.engine import AdmissionInput, Decision, Phase, evaluate, load_rules
from webhook.engine.programs import Programs, edit_reaches

TREE = {"metadata": {"labels": None, "name": None}, "spec": {"containers": None, "affinity": {"nodeAffinity": None}}}


@pytest.mark.parametrize(
    ("path", "reaches"),
    [
        (("metadata", "labels", "team"), True),  # below a leaf
        (("metadata", "labels"), True),  # the leaf itself
        (("metadata",), True),  # replaces a node on the way to a leaf
        ((), True),  # the whole object
        (("metadata", "annotations", "x"), False),  # beside every read
        (("spec", "tolerations", "-"), False),
        (("spec", "containers", 0, "env", "-"), True),
        (("spec", "affinity", "nodeAffinity", "required"), True),
        (("spec", "affinity", "podAffinity"), False),
        (("status",), False),
    ],
)
def test_an_edit_reaches_what_the_tree_reads(path: tuple[Any, ...], reaches: bool) -> None:
    assert edit_reaches(TREE, path) is reaches


def test_a_list_index_below_a_cut_node_reaches_it() -> None:
    # project() keeps a list whole even where the tree names fields below it
    assert edit_reaches({"spec": {"containers": {"name": None}}}, ("spec", "containers", 0, "image"))


def test_an_edit_relative_to_a_pod_spec() -> None:
    place = ("spec", "template", "spec")
    tree = {"priorityClassName": None}
    assert edit_reaches(tree, (*place, "priorityClassName"), place)
    assert not edit_reaches(tree, (*place, "tolerations", "-"), place)
    assert not edit_reaches(tree, ("metadata", "labels", "x"), place)
    assert edit_reaches(tree, ("spec", "template"), place)  # replaces the pod spec's ancestor


def _inputs() -> list[tuple[str, AdmissionInput]]:
    found = []
    for suite in discover(str(RULES / "tests")):
        for case in suite.cases:
            found.append((f"{Path(suite.file).name}::{case['name']}", admission(case, Path(suite.file).parent)))
    labels = {"team": "a", "gpu-webhook.io/tenant": "true", "environment": "production"}
    tenant = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}
    pods = {"gpu pod": gpu_pod(), "cpu pod": cpu_pod(), "two gpus": gpu_pod(gpus=2)}
    for name, pod in pods.items():
        found.append((f"generated {name}", AdmissionInput.offline(pod, namespace="team-a", namespace_object=tenant)))
    return found


def _summary(decision: Decision) -> tuple[Any, ...]:
    return (
        decision.allowed,
        decision.patch,
        [(v.rule, v.target, v.message, v.action) for v in decision.violations],
        [(v.rule, v.target, v.message) for v in decision.warnings],
        [(v.rule, v.target, v.message) for v in decision.audits],
        [str(e) for e in decision.errors],
        [(t.rule, t.target, t.result, t.reason, t.message) for t in decision.trace],
        decision.accelerators,
    )


def test_kept_activations_give_the_same_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    ruleset = load_rules([RULES]).ruleset
    assert ruleset is not None
    inputs = _inputs()
    assert len(inputs) > 200  # every suite case was found

    def as_before(self: Programs, target: Any, expression: Any = None) -> Any:
        """A new activation of every read after every edit: the shared activation before it was kept."""
        version = self.copy.version()
        cached = self._activations.get(target.root)
        if cached is None or cached[0] != version:
            projection = self.projection
            cached = (version, self._activation(target, None, projection.references, projection.trees), None, None)
            self._activations[target.root] = cached
        return cached[1]

    differences = []
    for phase in (Phase.ALL, Phase.MUTATE):
        for name, given in inputs:
            expected_input = copy.deepcopy(given)
            with monkeypatch.context() as patched:
                patched.setattr(Programs, "_shared_activation", as_before)
                expected = _summary(evaluate(ruleset, expected_input, phase, trace=True))
            found = _summary(evaluate(ruleset, given, phase, trace=True))
            if found != expected:
                differences.append(f"{phase}: {name}")
    assert differences == []


KEPT_RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: a-tolerate}
spec:
  match: {kinds: [Pod], operations: [CREATE], condition: "object.kind == 'Pod'"}
  mutate:
    - addToleration: {key: example.com/gpu, operator: Exists, effect: NoSchedule}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-reads-the-name}
spec:
  match: {kinds: [Pod], operations: [CREATE], condition: "object.metadata.name != ''"}
  mutate:
    - setLabels: {values: {named: "yes"}}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: c-reads-the-toleration}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
    condition: "has(object.spec.tolerations) && object.spec.tolerations.exists(t, t.key == 'example.com/gpu')"
  mutate:
    - setLabels: {values: {tolerated: "yes"}}
"""


def test_an_edit_beside_what_an_expression_reads_keeps_the_activation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ruleset = load_rule_text(tmp_path, KEPT_RULES)
    made = []
    activation = Programs._activation

    def counted(self: Programs, *args: Any) -> Any:
        made.append(args[0].description)
        return activation(self, *args)

    monkeypatch.setattr(Programs, "_activation", counted)
    decision = evaluate(ruleset, AdmissionInput.offline(gpu_pod()), phase=Phase.MUTATE)
    assert not decision.errors, decision.errors
    assert decision.mutated is not None
    assert decision.mutated["metadata"]["labels"] == {"named": "yes", "tolerated": "yes"}
    # the first activation answers a-tolerate and, past the toleration it added, b-reads-the-name;
    # c-reads-the-toleration reads what the edit wrote: a second one
    assert len(made) == 2
