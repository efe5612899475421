"""An activation holds the variables its expressions read, and no others.

`Activation()` costs per variable handed to it, and the pod-spec facts (containers, GPU counts)
cost a walk of the pod: neither is paid for a variable no expression reads. A field of another
value (`object.spec.containers`) is not the variable of the same name (`containers`); CEL's
leading dot (`.containers`) is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, evaluate
from webhook.engine.cel import CelEnvironment, _references
from webhook.engine.resources import DEFAULT

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  action: Deny
  match: {{kinds: [Pod], operations: [CREATE]}}
  validate:
    expression: {expression!r}
    message: denied
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("object.spec.containers.all(c, has(c.resources))", {"object"}),
        ("object.spec.containers.size() > 0 && target != ''", {"object", "target"}),
        ("f(object).containers", {"object"}),  # selected from a call's result
        ("object.?spec.?containers.hasValue()", {"object"}),  # optional selection
        ("containers.all(c, has(c.resources))", {"containers"}),
        (".containers.size() == 1", {"containers"}),  # CEL's leading dot: the variable itself
        ("1 in .targetGpuCount", {"targetGpuCount"}),  # after the `in` operator, a leading dot too
        ("(.containers).size() + size(podSpec)", {"containers", "podSpec"}),
        ("'containers' == target // and podSpecs", {"target"}),  # a string and a comment name nothing
    ],
)
def test_references_are_variables_not_fields_of_the_same_name(text: str, expected: set[str]) -> None:
    assert _references(text) == frozenset(expected)


def test_a_leading_dot_reference_is_handed_its_variable() -> None:
    env = CelEnvironment(DEFAULT)
    compiled = env.compile(".containers.all(c, has(c.resources))")
    assert "containers" in compiled.references
    assert compiled.evaluate(env.activation({"containers": [{"resources": {}}]})) is True


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[set[str]]]:
    """The names of the variables each activation of the test's evaluations was given."""
    found: list[set[str]] = []
    activation = CelEnvironment.activation

    def spy(self: CelEnvironment, variables: Mapping[str, Any]) -> Any:
        found.append(set(variables))
        return activation(self, variables)

    monkeypatch.setattr(CelEnvironment, "activation", spy)
    yield found


def _decide(tmp_path: Path, expression: str, pod: dict[str, Any]) -> bool:
    ruleset = load_rule_text(tmp_path, RULE.format(name="only-what-it-reads", expression=expression))
    return evaluate(ruleset, AdmissionInput.offline(pod, namespace="team-a")).allowed


def test_an_activation_gets_only_what_its_expression_reads(tmp_path: Path, handed: list[set[str]]) -> None:
    # denies a pod with a container that asks for no resources, reading them through `object`
    expression = "object.spec.containers.all(c, has(c.resources))"
    assert _decide(tmp_path, expression, gpu_pod()) is True
    bare = gpu_pod()
    del bare["spec"]["containers"][0]["resources"]
    assert _decide(tmp_path, expression, bare) is False
    assert handed and all(names == {"object"} for names in handed)


def test_the_facts_variables_are_handed_when_read(tmp_path: Path, handed: list[set[str]]) -> None:
    assert _decide(tmp_path, "targetGpuCount == 1 && size(containers) == 1", gpu_pod()) is True
    assert handed and all(names == {"targetGpuCount", "containers"} for names in handed)
