"""Test-run reports: pytest-like text for people, JUnit XML for CI."""

from __future__ import annotations

# B405: builds the JUnit XML we write; parses nothing
import xml.etree.ElementTree as ElementTree  # nosec B405
from collections.abc import Iterable, Iterator

from .suite import CaseResult


def text(results: Iterable[CaseResult]) -> Iterator[str]:
    """One line per case as it finishes, then each failure with its diff, then `N passed, N failed`."""
    failed: list[CaseResult] = []
    passed = 0
    for result in results:
        yield f"{result.id} {'PASSED' if result.passed else 'FAILED'}"
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
    root = ElementTree.Element("testsuites", name="gpu-webhook test")
    suites: dict[str, ElementTree.Element] = {}
    for result in results:
        suite = suites.get(result.suite)
        if suite is None:
            suite = suites[result.suite] = ElementTree.SubElement(root, "testsuite", name=result.suite)
        case = ElementTree.SubElement(
            suite, "testcase", classname=result.suite, name=result.name, time=f"{result.seconds:.6f}"
        )
        if not result.passed:
            failure = ElementTree.SubElement(case, "failure", message=result.failures[0].splitlines()[0])
            failure.text = "\n\n".join(result.failures)
    for element in (root, *suites.values()):
        cases = element.iter("testcase")
        members = list(cases)
        element.set("tests", str(len(members)))
        element.set("failures", str(sum(1 for m in members if m.find("failure") is not None)))
        element.set("time", f"{sum(float(m.get('time', '0')) for m in members):.6f}")
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)
