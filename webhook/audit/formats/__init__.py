"""Output formats, one system for every command: `-o/--output NAME` picks a row of the command's table.

A table maps each format's name to its factory, named as `module:attribute` and imported only
when the format is made: a command's parser lists the names (`choices`, `--help`) without
importing any writer, so this module imports nothing but the standard library.

A report is made with its output stream and the command's options, hears each item as it
arrives (`add`) and writes what it holds back at the end (`finish`). It declares what it
shows, so the runner does only the work a report uses:
- `shows_diffs`: it prints each patched object's diff (audit renders diffs only then);
- `takes_entries`: it takes the entries `--jobs` workers wrote (`add_entry`) instead of results;
- `writes_cluster` (a row's flag, known before the report is made): its documents can be
  applied to a cluster (`audit --apply`).

Audit's formats stream (table details, json, yaml) or keep one small row per finding, never
the objects themselves.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from webhook.engine import Action

    from ..results import ObjectResult, Tally
    from ..sources import InputProblem


@dataclass(frozen=True, slots=True)
class Format:
    """One row of a format table: where the report is made, and what is known of it before."""

    factory: str  # "package.module:Attribute", imported when the report is made
    writes_cluster: bool = False  # audit --apply: the report's documents can be written to a cluster

    def make(self, *args: Any, **kwargs: Any) -> Any:
        module, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module), attribute)(*args, **kwargs)


Formats = Mapping[str, Format]


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """What audit's flags tell every report; each takes what concerns it."""

    actions: Mapping[str, Action]  # each rule's action (PolicyReport severities)
    details: bool = True  # table: per-object details, not only the summaries (--summary)
    fail_on: str = "deny"  # junit: what counts as a failure (--fail-on)


class Report(Protocol):
    """An audit report: results one at a time, then the document (webhook.audit.run feeds it)."""

    shows_diffs: bool
    takes_entries: bool

    def add(self, result: ObjectResult) -> None: ...

    def problem(self, problem: InputProblem) -> None: ...  # an input that could not be read, with its reason

    def finish(self, tally: Tally) -> None: ...


AUDIT: Formats = {
    "table": Format("webhook.audit.formats.table:TableReport"),
    "json": Format("webhook.audit.formats.structured:JsonReport"),
    "yaml": Format("webhook.audit.formats.structured:YamlReport"),
    "policyreport": Format("webhook.audit.formats.policyreport:PolicyReportReport", writes_cluster=True),
    "junit": Format("webhook.audit.formats.junit:JunitReport"),
    "html": Format("webhook.audit.formats.html:HtmlReport"),
}

# `gpu-webhook test`: each CaseResult as its case finishes, then the verdict
TEST: Formats = {
    "text": Format("webhook.authoring.report:TextReport"),
    "junit": Format("webhook.authoring.report:SuiteJunitReport"),
}

# `gpu-webhook lint`: each problem found, then the count (or what was checked, when nothing was wrong)
LINT: Formats = {
    "text": Format("webhook.authoring.report:LintReport"),
    "junit": Format("webhook.authoring.report:LintJunitReport"),
}

# `gpu-webhook export`: the whole document at once, made from the export's result
EXPORT: Formats = {
    "yaml": Format("webhook.export.render:render"),
    "table": Format("webhook.export.render:table"),
}


def make_report(name: str, out: TextIO, options: ReportOptions) -> Report:
    """The audit report for --output NAME."""
    try:
        row = AUDIT[name]
    except KeyError:
        raise ValueError(f"unknown output format {name!r}") from None
    report: Report = row.make(out, options)
    return report
