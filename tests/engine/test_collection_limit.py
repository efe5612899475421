"""The collection limit refuses only an expression that would map or filter a collection over it
(webhook/engine/limits.py), and webhook/cel/iterated.py names which collections a CEL text maps or filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import cpu_pod
from webhook.cel.iterated import SAFE, UNKNOWN, sources
from webhook.engine import AdmissionInput, Limits, evaluate, load_rules

POLICY = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: r}}
spec:
  failurePolicy: Fail
  match: {{kinds: [Pod]}}
  validate: {{expression: {expression!r}, message: "rule says no"}}
"""
LIMITS = Limits(time_budget=None, max_collection=1000)


def decide(tmp_path: Path, expression: str, pod: dict[str, Any]) -> Any:
    (tmp_path / "r.yaml").write_text(POLICY.format(expression=expression))
    result = load_rules(tmp_path)
    assert result.ruleset is not None, result.errors
    return evaluate(result.ruleset, AdmissionInput(object=pod, kind="Pod", namespace="team-a"), limits=LIMITS)


def labelled(count: int) -> dict[str, Any]:
    pod = cpu_pod()
    pod["metadata"]["labels"] = {f"k{i}": "v" for i in range(count)}
    return pod


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("containers.filter(c, has(c.env)).map(c, c.name)", (("containers",),)),
        ("containers.all(c, c.env.map(e, e.name).size() < 3)", (("containers", "*", "env"),)),
        ("podSpec.volumes.exists(v, has(v.hostPath))", ()),  # exists(): linear, not listed
        ("params.allowed.map(a, a.trim())", (SAFE,)),
        ("['a', 'b'].filter(x, x in object.metadata.labels)", (SAFE,)),
        ("cel.bind(spec, object.spec, spec.tolerations.filter(t, true))", (("object", "spec", "tolerations"),)),
        ("(has(podSpec.tolerations) ? podSpec.tolerations : []).filter(t, true)", (("podSpec", "tolerations"), SAFE)),
        ("object.metadata.annotations['a'].split(',').map(s, s)", (UNKNOWN,)),
        # a literal's length is in the text, its items are what they hold
        ("[object.metadata.labels][0].filter(k, true)", (("object", "metadata", "labels"),)),
        ("[podSpec.volumes].exists(l, l.filter(v, true) == [])", (("podSpec", "volumes"),)),
    ],
)
def test_sources_names_what_map_and_filter_iterate(text: str, expected: tuple[Any, ...]) -> None:
    assert sources(text) == expected


def test_a_large_map_a_rule_only_tests_membership_in_is_evaluated(tmp_path: Path) -> None:
    decision = decide(tmp_path, "!('forbidden' in object.metadata.labels)", labelled(5000))
    assert decision.allowed and not decision.errors


def test_a_large_map_a_rule_walks_with_exists_is_evaluated(tmp_path: Path) -> None:
    decision = decide(tmp_path, "!object.metadata.labels.exists(k, k == 'forbidden')", labelled(5000))
    assert decision.allowed and not decision.errors


def test_a_large_map_a_rule_filters_is_refused(tmp_path: Path) -> None:
    decision = decide(tmp_path, "object.metadata.labels.filter(k, k == 'x').size() == 0", labelled(5000))
    assert not decision.allowed
    assert "/metadata/labels holds 5000 items, and this rule maps or filters it (limit 1000)" in decision.denial_message


def test_the_same_filter_under_the_limit_runs(tmp_path: Path) -> None:
    decision = decide(tmp_path, "object.metadata.labels.filter(k, k == 'x').size() == 0", labelled(900))
    assert decision.allowed and not decision.errors


def test_an_unknown_receiver_counts_every_collection_the_expression_reads(tmp_path: Path) -> None:
    # the text does not say what it filters: whatever it can read is assumed iterated
    expression = (
        "object.metadata.labels.filter(k, k == 'x') == [] || object.metadata.name.split('-').filter(x, true) == []"
    )
    assert sources(expression) == (("object", "metadata", "labels"), UNKNOWN)
    assert not decide(tmp_path, expression, labelled(5000)).allowed
    assert decide(tmp_path, "object.kind == 'Pod' && [1].all(x, true)", labelled(5000)).allowed
