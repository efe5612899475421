"""Plain-text report for a terminal: each object with findings as it is audited, then summaries.

Plain aligned text rather than rich tables: it reads the same in a pipe, a CI log and a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ..results import AUDIT, ERROR, FAIL, PASS, WARN, ObjectResult, Tally

_LABEL = {FAIL: "DENY", WARN: "WARN", AUDIT: "AUDIT", ERROR: "ERROR"}


class TableReport:
    def __init__(self, out: TextIO, details: bool = True) -> None:
        self.out = out
        self.details = details

    def add(self, result: ObjectResult) -> None:
        if not self.details or (not result.findings and not result.patch):
            return
        gpus = f", {result.gpus} GPU{'s' if result.gpus != 1 else ''}" if result.gpus else ""
        lines = [f"{result.ref}  ({result.origin}{gpus})"]
        for outcome in sorted(result.findings, key=lambda o: o.result):
            for message in outcome.messages or [""]:
                lines.append(f"  {_LABEL[outcome.result]:<6} {outcome.rule}: {message}")
        if result.patch:
            patched = ", ".join(o.rule for o in result.outcomes if o.patched)
            lines.append(f"  PATCH  {patched}: {len(result.patch)} operation(s)")
            lines.extend(f"    {line}" for line in result.diff().splitlines())
        self.out.write("\n".join(lines) + "\n\n")

    def finish(self, tally: Tally) -> None:
        by = tally.objects_by_worst
        self.out.write(
            f"{tally.objects} objects: {by[FAIL]} denied, {by[WARN]} warned, {by[AUDIT]} audited, "
            f"{by[ERROR]} with errors, {by[PASS]} passed; {tally.patched_objects} would be patched. "
            f"GPUs requested: {tally.gpus}, in objects with findings: {tally.gpus_affected}\n\n"
        )
        rule_rows = [
            [
                name,
                c.results[FAIL],
                c.results[WARN],
                c.results[AUDIT],
                c.results[ERROR],
                c.results[PASS],
                c.patched,
                c.gpus_affected,
            ]
            for name, c in sorted(tally.rules.items())
        ]
        self.out.write(
            _table(["RULE", "DENY", "WARN", "AUDIT", "ERROR", "PASS", "PATCHED", "GPUS AFFECTED"], rule_rows)
        )
        self.out.write("\n")
        namespace_rows = [
            [name, c[FAIL], c[WARN], c[AUDIT], c[ERROR], c[PASS], tally.namespace_gpus_affected[name]]
            for name, c in sorted(tally.namespaces.items())
        ]
        self.out.write(
            _table(["NAMESPACE", "DENIED", "WARNED", "AUDITED", "ERRORS", "PASSED", "GPUS AFFECTED"], namespace_rows)
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
