"""Plain-text report for a terminal: each object with findings as it is audited, then summaries.

Plain aligned text rather than rich tables: it reads the same in a pipe, a CI log and a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from webhook.engine import NO_NAMESPACE_CONTEXT, SEVERITY, Result

from ..results import ObjectResult, Tally, text

_LABEL = {Result.FAIL: "DENY", Result.ERROR: "ERROR", Result.WARN: "WARN", Result.AUDIT: "AUDIT", Result.SKIP: "SKIP"}


class TableReport:
    def __init__(self, out: TextIO, details: bool = True) -> None:
        self.out = out
        self.details = details

    def add(self, result: ObjectResult) -> None:
        if not self.details or (not result.findings and not result.patch):
            return
        gpus = f", {result.gpus} GPU{'s' if result.gpus != 1 else ''}" if result.gpus else ""
        lines = [f"{result.ref}  ({result.origin}{gpus})"]
        for outcome in sorted(result.findings, key=lambda o: SEVERITY[o.result]):
            for message in outcome.messages or [text(outcome)]:
                lines.append(f"  {_LABEL[outcome.result]:<6} {outcome.rule}: {message}")
        if result.patch:
            patched = ", ".join(o.rule for o in result.outcomes if o.patched)
            lines.append(f"  PATCH  {patched}: {len(result.patch)} operation(s)")
            lines.extend(f"    {line}" for line in result.diff().splitlines())
        self.out.write("\n".join(lines) + "\n\n")

    def finish(self, tally: Tally) -> None:
        by = tally.objects_by_worst
        self.out.write(
            f"{tally.objects} objects: {by[Result.FAIL]} denied, {by[Result.ERROR]} with errors, "
            f"{by[Result.WARN]} warned, {by[Result.AUDIT]} audited, {by[Result.PASS]} passed; "
            f"{tally.patched_objects} would be patched. "
            f"GPUs requested: {tally.gpus}, in objects with findings: {tally.gpus_affected}\n"
        )
        if tally.skipped_objects:
            self.out.write(
                f"{tally.skipped_objects} objects with rules {NO_NAMESPACE_CONTEXT} "
                "(add their Namespace objects to the input or pass --namespace-objects FILE)\n"
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


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, header)), *[list(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    # names left-aligned, counts right-aligned, as kubectl does
    return "".join(
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        + "\n"
        for row in cells
    )
