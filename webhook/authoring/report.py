"""Plain-text reports of the authoring commands, for people: `test -o text` (pytest-like) and `lint -o text`.

Their rows are in webhook.audit.formats (TEST, LINT), beside every other output format; their
JUnit reports are in webhook.audit.formats.junit.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from webhook.engine import LoadError

    from .suite import CaseResult


class TextReport:
    """One line per case as it finishes, then each failure with its diff, then `N passed, N failed`."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.passed = 0
        self.failed: list[CaseResult] = []

    def _line(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()  # a case's line shows as soon as it has run

    def add(self, result: CaseResult) -> None:
        self._line(f"{result.id} {'PASSED' if result.passed else 'FAILED'}")
        for note in result.excepted:  # a case that passes thanks to an exception says so
            self._line(f"  {note}")
        if result.passed:
            self.passed += 1
        else:
            self.failed.append(result)

    def finish(self) -> None:
        if self.failed:
            self._line("")
            self._line("=" * 30 + " FAILURES " + "=" * 30)
            for result in self.failed:
                self._line(f"{'_' * 10} {result.id} {'_' * 10}")
                for failure in result.failures:
                    for line in failure.splitlines():
                        self._line(line)
                self._line("")
        self._line(f"{self.passed} passed, {len(self.failed)} failed")


class LintReport:
    """Each problem on a line of its own; then their count on stderr, or, when there is none, what was checked
    (so a clean run is told from one that checked nothing: an empty directory)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.errors = 0

    def add(self, error: LoadError) -> None:
        self.errors += 1
        self.out.write(f"{error}\n")

    def finish(self, counts: LintCounts | None) -> None:
        """`counts` when nothing was wrong, else None."""
        if counts is None:
            print(errors_found(self.errors), file=sys.stderr)
        else:
            self.out.write(checked(counts) + "\n")


LintCounts = tuple[int, int, int, int]  # rules, the files holding any, overlays, exceptions


def errors_found(count: int) -> str:
    """What lint says on stderr when it found problems: `3 errors`."""
    return f"{count} error{'s' if count != 1 else ''}"


def checked(counts: LintCounts) -> str:
    """What a clean lint checked: `31 rules in 31 files, 2 overlays: no problems`."""
    rules, files, overlays, exceptions = counts
    site = "".join(
        f", {count} {name}{'s' if count != 1 else ''}"
        for count, name in ((overlays, "overlay"), (exceptions, "exception"))
        if count
    )
    return f"{rules} rule{'s' if rules != 1 else ''} in {files} file{'s' if files != 1 else ''}{site}: no problems"
