"""GPUPolicyExceptions as a cluster hands them to the engine (plain mappings, possibly malformed): what the
errors name and where they point, and which exception wins when several cover one rule."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from webhook.engine import PolicyException, RuleLoadError, parse_exception
from webhook.engine.exceptions import excepting, exception_problems, unknown_rules

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def exception(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": "big-run", "namespace": "team-a"},
        "spec": {"rules": ["gpu-ceiling"], "reason": "approved"},
    }
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ({"name": "big-run", "namespace": "team-a"}, "team-a/big-run"),
        ({"name": "big-run"}, "big-run"),
        ({"namespace": "team-a"}, "<unnamed>"),
        ("not-a-map", "<unnamed>"),
        ({"name": 3, "namespace": "team-a"}, "<unnamed>"),
        ({"name": "big-run", "namespace": 3}, "big-run"),
    ],
)
def test_a_cluster_objects_problems_name_it_as_well_as_it_can(metadata: Any, named: str) -> None:
    problems = exception_problems(exception(metadata=metadata, spec={"rules": "all"}))
    assert problems, metadata
    assert all(str(p.message).startswith(f"GPUPolicyException {named}: ") for p in problems), problems
    assert all(
        (p.location.file, p.location.line, p.location.column) == (f"GPUPolicyException {named}", 1, 1) for p in problems
    )
    located = exception_problems(exception(metadata=metadata, spec={"rules": "all"}), origin="cluster object x")
    assert {p.location.file for p in located} == {"cluster object x"}


def test_a_problem_of_the_whole_document_says_document() -> None:
    (problem,) = [p for p in exception_problems({"kind": "GPUPolicyException"}) if "'spec'" in p.message]
    assert problem.message.startswith("GPUPolicyException <unnamed>: document: ")
    with pytest.raises(RuleLoadError):
        parse_exception({"kind": "GPUPolicyException"})


def test_unknown_and_unexceptable_rules_are_named_with_a_hint() -> None:
    parsed = parse_exception(exception(spec={"rules": ["gpu-celing", "no-privileged", "zzz"], "reason": "r"}))
    assert unknown_rules(parsed, {"gpu-ceiling": True, "no-privileged": False}) == [
        "spec.rules: no rule named 'gpu-celing' (did you mean 'gpu-ceiling'?)",
        "spec.rules: rule 'no-privileged' cannot be excepted (spec.exceptable: false)",
        "spec.rules: no rule named 'zzz'",
    ]


def test_an_exception_is_immutable_and_hashable() -> None:
    parsed = parse_exception(exception())
    assert {parsed: 1}[parsed] == 1  # servers keep them in sets and as keys
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.reason = "other"  # type: ignore[misc]


def covering(name: str, rules: list[str], **spec: Any) -> PolicyException:
    return parse_exception(
        exception(metadata={"name": name, "namespace": "team-a"}, spec={"rules": rules, "reason": name, **spec})
    )


POD = {"metadata": {"name": "p", "labels": {"app": "train"}}}


def test_the_first_by_name_wins_whatever_the_order() -> None:
    found = [covering("b-second", ["r1", "r2"]), covering("a-first", ["r1"]), covering("c-third", ["r2", "r3"])]
    for order in (found, found[::-1]):
        chosen = excepting(order, "Pod", POD, "team-a", NOW)
        assert {rule: e.name for rule, e in chosen.items()} == {"r1": "a-first", "r2": "b-second", "r3": "c-third"}


def test_an_expired_or_foreign_exception_does_not_stop_the_others() -> None:
    expired = covering("a-expired", ["r1"], expires="2026-11-30T00:00:00Z")
    elsewhere = covering("a-elsewhere", ["r1"], match={"names": ["other-pod"]})
    valid = covering("z-valid", ["r1"], expires="2026-12-02T00:00:00Z")
    chosen = excepting([expired, elsewhere, valid], "Pod", POD, "team-a", NOW)
    assert {rule: e.name for rule, e in chosen.items()} == {"r1": "z-valid"}
    assert excepting([valid], "Pod", POD, "team-b", NOW) == {}
    assert excepting([valid], "Pod", POD, None, NOW) == {}  # a cluster-scoped object: no namespace to except in
