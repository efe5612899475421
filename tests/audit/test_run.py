"""webhook.audit.run through its API: sources and options in, results to the report, the tally out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.audit.conftest import NS_RULES, PACK_RULES
from webhook.audit.context import namespaces_in
from webhook.audit.results import ObjectResult, Tally
from webhook.audit.run import Options, Runner, Sources
from webhook.audit.sources import InputProblem, SourceError
from webhook.engine import RuleSet, load_rules

POD = """apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  containers:
    - name: main
      image: cuda:12
      resources: {{limits: {{nvidia.com/gpu: 1}}}}
---
"""


class Recorder:
    """A report that keeps what the runner gives it; it shows diffs when told to."""

    takes_entries = False

    def __init__(self, shows_diffs: bool = False) -> None:
        self.shows_diffs = shows_diffs
        self.results: list[ObjectResult] = []
        self.problems: list[InputProblem] = []

    def add(self, result: ObjectResult) -> None:
        self.results.append(result)

    def problem(self, problem: InputProblem) -> None:
        self.problems.append(problem)

    def finish(self, tally: Tally) -> None:
        raise AssertionError("the runner leaves finishing the report to its caller")


def _ruleset(*paths: str) -> RuleSet:
    return load_rules(list(paths)).require()


def _inputs(root: Path) -> Path:
    """Two files of GPU pods in two namespaces, their Namespace objects in a third that sorts last, a broken file."""
    root.mkdir()
    (root / "a.yaml").write_text("".join(POD.format(name=f"a{i}", namespace="locked") for i in range(3)))
    (root / "b.yaml").write_text("".join(POD.format(name=f"b{i}", namespace="open") for i in range(3)))
    (root / "c-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")
    (root / "z-namespaces.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: locked, labels: {gpu-access: none}}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: open, labels: {gpu-access: full}}\n"
    )
    return root


def _seen(report: Recorder) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [(str(r.ref), r.worst.value, [(o.rule, o.result.value) for o in r.outcomes]) for r in report.results]


def test_files_are_judged_with_the_namespaces_found_anywhere_in_them(tmp_path: Path) -> None:
    warned: list[str] = []
    report = Recorder()
    tally = Runner(_ruleset(NS_RULES), report, warn=warned.append).run(Sources([str(_inputs(tmp_path / "in"))]))
    # the Namespace objects sort after the pods and still count; they are context, not audited
    assert [(ref, worst) for ref, worst, _ in _seen(report)] == [
        *((f"Pod locked/a{i}", "fail") for i in range(3)),
        *((f"Pod open/b{i}", "pass") for i in range(3)),
    ]
    assert tally.objects == 6 and tally.failed("deny")
    # the broken file is a problem of the report, counted, and told at once
    assert [p.origin for p in report.problems] == [f"{tmp_path / 'in' / 'c-broken.yaml'}:4:1"]
    assert tally.problems == 1 and warned == [str(report.problems[0])]


def test_namespace_objects_given_apart_are_context_too(tmp_path: Path) -> None:
    root = _inputs(tmp_path / "in")
    namespaces = root / "z-namespaces.yaml"
    pods = tmp_path / "pods.yaml"
    pods.write_text((root / "a.yaml").read_text())
    report = Recorder()
    Runner(_ruleset(NS_RULES), report).run(Sources([str(pods)], namespace_objects=[str(namespaces)]))
    assert {worst for _, worst, _ in _seen(report)} == {"fail"}
    assert set(namespaces_in([str(namespaces)], lambda _: None)) == {"locked", "open"}


@pytest.mark.parametrize("shows_diffs", [False, True])
def test_jobs_give_the_same_results_in_the_same_order(tmp_path: Path, shows_diffs: bool) -> None:
    root = _inputs(tmp_path / "in")
    ruleset = _ruleset(PACK_RULES, NS_RULES)
    reports, tallies = [], []
    for jobs in (1, 2):
        report = Recorder(shows_diffs)
        tallies.append(Runner(ruleset, report, Options(jobs=jobs)).run(Sources([str(root)])).as_dict())
        reports.append(report)
    one, two = reports
    assert _seen(one) == _seen(two) and len(one.results) == 6
    assert [r.diff() for r in one.results] == [r.diff() for r in two.results]
    assert [str(p) for p in one.problems] == [str(p) for p in two.problems]
    assert tallies[0] == tallies[1]
    # the pack patches GPU pods: the diff is rendered only for a report that shows it
    assert any(r.patch for r in one.results)
    assert any(r.diff() for r in one.results) is shows_diffs


def test_an_input_that_does_not_exist_is_a_source_error_and_the_report_is_flushed(tmp_path: Path) -> None:
    flushed: list[Any] = []
    report = Recorder()
    report.flush = lambda: flushed.append(True)  # type: ignore[attr-defined]
    with pytest.raises(SourceError, match="no such file or directory"):
        Runner(_ruleset(NS_RULES), report).run(Sources([str(tmp_path / "missing.yaml")]))
    assert flushed == [True]
