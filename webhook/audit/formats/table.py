"""Plain-text report for a terminal: each object with findings as it is audited, then summaries.

An input that could not be read is a PROBLEM line where it was met. Rules not evaluated for want
of namespace context are folded: one table at the end, each rule once with the objects it could
not judge, under the reason and the fix they share.

Plain aligned text rather than rich tables: it reads the same in a pipe, a CI log and a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from webhook.engine import SEVERITY, Result

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem
from . import ReportOptions

_LABEL = {Result.FAIL: "DENY", Result.ERROR: "ERROR", Result.WARN: "WARN", Result.AUDIT: "AUDIT"}


class TableReport:
    takes_entries = False

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.details = options.details
        self.shows_diffs = options.details  # the summaries alone show no object

    def problem(self, problem: InputProblem) -> None:
        if self.details:
            self.out.write(f"{problem.origin}\n  PROBLEM {problem.reason}: not audited\n\n")

    def add(self, result: ObjectResult) -> None:
        if not self.details or (not result.findings and not result.patch):
            return
        gpus = f", {result.gpus} GPU{'s' if result.gpus != 1 else ''}" if result.gpus else ""
        lines = [f"{result.ref}  ({result.origin}{gpus})"]
        for outcome in sorted(result.findings, key=lambda o: SEVERITY[o.result]):
            for message in outcome.messages or [text(outcome)]:
                lines.append(f"  {_LABEL.get(outcome.result, outcome.result.upper()):<6} {outcome.rule}: {message}")
        if result.patch:
            patched = ", ".join(o.rule for o in result.outcomes if o.patched)
            lines.append(f"  PATCH  {patched}: {len(result.patch)} operation(s)")
            lines.extend(f"    {line}" for line in result.diff().splitlines())
        self.out.write("\n".join(lines) + "\n\n")

    def finish(self, tally: Tally) -> None:
        by = tally.objects_by_worst
        self.out.write(
            f"{tally.objects} objects: {by[Result.FAIL]} denied, {by[Result.ERROR]} with errors, "
            f"{by[Result.WARN]} warned, {by[Result.AUDIT]} audited, "
            + (f"{by[Result.EXCEPTED]} excepted, " if by[Result.EXCEPTED] else "")
            + f"{by[Result.PASS]} passed; "
            f"{tally.patched_objects} would be patched. "
            f"GPUs requested: {tally.gpus}, in objects with findings: {tally.gpus_affected}\n"
        )
        if tally.problems:
            self.out.write(
                f"{tally.problems} input{'s' if tally.problems != 1 else ''} could not be read (PROBLEM above)\n"
            )
        self.out.write("\n")
        rule_rows = [
            [
                name,
                c.results[Result.FAIL],
                c.results[Result.ERROR],
                c.results[Result.WARN],
                c.results[Result.AUDIT],
                c.results[Result.PASS],
                c.results[Result.SKIP],
                c.patched,
                c.gpus_affected,
            ]
            for name, c in sorted(tally.rules.items())
        ]
        self.out.write(
            _table(["RULE", "DENY", "ERROR", "WARN", "AUDIT", "PASS", "SKIPPED", "PATCHED", "GPUS AFFECTED"], rule_rows)
        )
        excepted = [
            f"{name} {c.results[Result.EXCEPTED]}"
            for name, c in sorted(tally.rules.items())
            if c.results[Result.EXCEPTED]
        ]
        if excepted:  # objects a GPUPolicyException let through, per rule (the object lines say which exception)
            self.out.write(f"EXCEPTED: {', '.join(excepted)}\n")
        self.out.write("\n")
        namespace_rows = [
            [
                name,
                c[Result.FAIL],
                c[Result.ERROR],
                c[Result.WARN],
                c[Result.AUDIT],
                c[Result.PASS],
                c[Result.SKIP],
                tally.namespace_gpus_affected[name],
            ]
            for name, c in sorted(tally.namespaces.items())
        ]
        self.out.write(
            _table(
                ["NAMESPACE", "DENIED", "ERRORS", "WARNED", "AUDITED", "PASSED", "SKIPPED", "GPUS AFFECTED"],
                namespace_rows,
            )
        )
        folded = tally.not_evaluated()
        if folded is not None:
            self.out.write(
                f"\n{folded.reason} ({len(folded.rules)} rules, {tally.skipped_objects} objects)\nfix: {folded.fix}\n"
            )
            self.out.write(_table(["NOT EVALUATED", "OBJECTS"], folded.rules))


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, header)), *[list(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    # names left-aligned, counts right-aligned, as kubectl does
    return "".join(
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        + "\n"
        for row in cells
    )
