"""Report formats: each one takes ObjectResults one at a time and writes its document at the end.

Streaming formats (table details, json, yaml) write as objects arrive; the others keep one
small row per finding, never the objects themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TextIO

from webhook.engine import Action

from ..results import ObjectResult, Tally
from ..sources import InputProblem


class Report(Protocol):
    def add(self, result: ObjectResult) -> None: ...

    def problem(self, problem: InputProblem) -> None: ...  # an input that could not be read, with its reason

    def finish(self, tally: Tally) -> None: ...


FORMATS = ("table", "json", "yaml", "policyreport", "junit", "html")


def make_report(
    name: str, out: TextIO, actions: Mapping[str, Action], details: bool = True, fail_on: str = "deny"
) -> Report:
    """The report for --output NAME; `actions` maps each rule to its action (for severities)."""
    if name == "table":
        from .table import TableReport

        return TableReport(out, details=details)
    if name in ("json", "yaml"):
        from .structured import JsonReport, YamlReport

        return JsonReport(out) if name == "json" else YamlReport(out)
    if name == "policyreport":
        from .policyreport import PolicyReportReport

        return PolicyReportReport(out, actions)
    if name == "junit":
        from .junit import JunitReport

        return JunitReport(out, fail_on=fail_on)
    if name == "html":
        from .html import HtmlReport

        return HtmlReport(out)
    raise ValueError(f"unknown output format {name!r}")
