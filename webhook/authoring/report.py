"""Test-run reports: pytest-like text for people, JUnit XML for CI."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from webhook.junit import Case, Outcome, render

from .suite import CaseResult


def text(results: Iterable[CaseResult]) -> Iterator[str]:
    """One line per case as it finishes, then each failure with its diff, then `N passed, N failed`."""
    failed: list[CaseResult] = []
    passed = 0
    for result in results:
        yield f"{result.id} {'PASSED' if result.passed else 'FAILED'}"
        for note in result.excepted:  # a case that passes thanks to an exception says so
            yield f"  {note}"
        if result.passed:
            passed += 1
        else:
            failed.append(result)
    if failed:
        yield ""
        yield "=" * 30 + " FAILURES " + "=" * 30
        for result in failed:
            yield f"{'_' * 10} {result.id} {'_' * 10}"
            for failure in result.failures:
                yield from failure.splitlines()
            yield ""
    yield f"{passed} passed, {len(failed)} failed"


def junit(results: list[CaseResult]) -> str:
    """One <testsuite> per suite file, one <testcase> per case, a <failure> with the full text."""
    suites: dict[str, list[Case]] = {}
    for result in results:
        outcome = Outcome.PASSED if result.passed else Outcome.FAILURE
        message = "" if result.passed else result.failures[0].splitlines()[0]
        details = None if result.passed else "\n\n".join(result.failures)
        case = Case(result.suite, result.name, outcome, message, details, seconds=result.seconds)
        suites.setdefault(result.suite, []).append(case)
    return render("gpu-webhook test", suites.items())
