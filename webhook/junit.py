"""JUnit XML, the one writer: `gpu-webhook audit -o junit` and `gpu-webhook test -o junit` both use it.

The layout CI servers read (Jenkins, GitLab, GitHub test reporters; the Ant/Jenkins junit.xsd):
<testsuites> of <testsuite>s of <testcase classname name [time]>, each case with at most one of
<failure message type>, <error message> or <skipped message>, and an optional <system-out>. Every
<testsuites>/<testsuite> carries its tests/failures/errors/skipped counts (and time when the cases
have one). ElementTree does the escaping (& < > and quotes, `]]>` included); characters XML 1.0
cannot hold at all (control characters a message may quote from an object) become U+FFFD.
"""

from __future__ import annotations

import re

# B405: builds the XML we write; parses nothing
import xml.etree.ElementTree as ElementTree  # nosec B405
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# what XML 1.0 allows: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class Outcome(StrEnum):
    PASSED = "passed"
    FAILURE = "failure"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Case:
    classname: str
    name: str
    outcome: Outcome = Outcome.PASSED
    message: str = ""  # the one-line summary (the `message` attribute of failure/error/skipped)
    details: str | None = None  # the full text inside <failure>/<error> (default: the message)
    failure_type: str | None = None  # <failure type=...>
    output: str | None = None  # <system-out>: what a passing case still wants shown
    seconds: float | None = None


def _clean(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def _counts(element: ElementTree.Element, cases: list[Case]) -> None:
    element.set("tests", str(len(cases)))
    for outcome, attribute in ((Outcome.FAILURE, "failures"), (Outcome.ERROR, "errors"), (Outcome.SKIPPED, "skipped")):
        element.set(attribute, str(sum(case.outcome == outcome for case in cases)))
    times = [case.seconds for case in cases if case.seconds is not None]
    if times:
        element.set("time", f"{sum(times):.6f}")


def _case(suite: ElementTree.Element, case: Case) -> None:
    attributes = {"classname": _clean(case.classname), "name": _clean(case.name)}
    if case.seconds is not None:
        attributes["time"] = f"{case.seconds:.6f}"
    element = ElementTree.SubElement(suite, "testcase", attributes)
    if case.outcome != Outcome.PASSED:
        child = ElementTree.SubElement(element, case.outcome.value, message=_clean(case.message))
        if case.outcome == Outcome.FAILURE and case.failure_type:
            child.set("type", case.failure_type)
        if case.outcome != Outcome.SKIPPED:
            child.text = _clean(case.details if case.details is not None else case.message)
    if case.output is not None:
        ElementTree.SubElement(element, "system-out").text = _clean(case.output)


def render(name: str, suites: Iterable[tuple[str, list[Case]]]) -> str:
    """The XML document (declaration included, indented) for the suites in order."""
    root = ElementTree.Element("testsuites", name=_clean(name))
    every: list[Case] = []
    for suite_name, cases in suites:
        suite = ElementTree.SubElement(root, "testsuite", name=_clean(suite_name))
        _counts(suite, cases)
        for case in cases:
            _case(suite, case)
        every += cases
    _counts(root, every)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)
