"""Differential: handing CEL only the variables an expression references changes no decision.

Every case of the pack's suites (rules/tests) and a few generated pods are evaluated twice with
the default pack: as the engine runs (references read as variables, not fields of the same
name; each activation holds those alone), and as before (every mention of a name counted, every
variable handed to every activation). The decisions must be the same: allowed, patch, every
violation, warning, audit and error, and the trace.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import RULES, cpu_pod, gpu_pod
from webhook.authoring.suite import admission, discover
from webhook.engine import AdmissionInput, Decision, Phase, RuleSet, evaluate, load_rules
from webhook.engine import cel as cel_module
from webhook.engine.programs import Programs

ALL_VARIABLES = frozenset((*cel_module.VARIABLES, *cel_module.TARGET_VARIABLES))


def _every_mention(source: str) -> frozenset[str]:
    """The reference rule before this change: any mention of a variable's name."""
    return frozenset(name for name in ALL_VARIABLES if re.search(rf"\b{name}\b", source))


def _load(monkeypatch: pytest.MonkeyPatch, references: Any) -> RuleSet:
    with monkeypatch.context() as patched:
        patched.setattr(cel_module, "_RUNTIMES", {})  # compile anew with this reference rule
        patched.setattr(cel_module, "_references", references)
        ruleset = load_rules([RULES]).ruleset
    assert ruleset is not None
    return ruleset


def _inputs() -> Iterator[tuple[str, AdmissionInput]]:
    for suite in discover(str(RULES / "tests")):
        for case in suite.cases:
            yield f"{Path(suite.file).name}::{case['name']}", admission(case, Path(suite.file).parent)
    labels = {"team": "a", "gpu-webhook.io/tenant": "true"}
    tenant = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}
    pods = {"gpu pod": gpu_pod(), "cpu pod": cpu_pod(), "two gpus, hostIPC": gpu_pod(gpus=2, hostIPC=True)}
    for name, pod in pods.items():
        yield f"generated {name}", AdmissionInput.offline(pod, namespace="team-a", namespace_object=tenant)


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


def test_only_the_referenced_variables_give_the_same_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    now = _load(monkeypatch, cel_module._references)
    before = _load(monkeypatch, _every_mention)
    inputs = list(_inputs())
    assert len(inputs) > 200  # every suite case was found

    handed_everything = Programs._activation

    def everything(self: Programs, target: Any, params: Any, references: frozenset[str], trees: Any) -> Any:
        return handed_everything(self, target, params, references | ALL_VARIABLES, trees)

    differences = []
    for name, given in inputs:
        expected_input = copy.deepcopy(given)
        with monkeypatch.context() as patched:
            patched.setattr(Programs, "_activation", everything)
            expected = _summary(evaluate(before, expected_input, Phase.ALL, trace=True))
        found = _summary(evaluate(now, given, Phase.ALL, trace=True))
        if found != expected:
            differences.append(name)
    assert differences == []
