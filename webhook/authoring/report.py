"""The reports of the authoring commands: `test -o text` (pytest-like) and `lint -o text` for people,
`test -o junit` and `lint -o junit` for CI (webhook.junit writes them).

Their rows are in webhook.audit.formats (TEST, LINT), beside every other output format.

test's JUnit: one test suite per suite file, one test case per case, a <failure> with the full text.
lint's: one test suite per rule file with problems, a failing case per problem (named by its line and
column); a clean run is one passing case that says what was checked.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from webhook import junit

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


class SuiteJunitReport:
    """`gpu-webhook test -o junit`: the cases kept until the run ends, then the document."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.suites: dict[str, list[junit.Case]] = {}  # suite file -> its cases, in the order they ran

    def add(self, result: CaseResult) -> None:
        outcome = junit.Outcome.PASSED if result.passed else junit.Outcome.FAILURE
        message = "" if result.passed else result.failures[0].splitlines()[0]
        details = None if result.passed else "\n\n".join(result.failures)
        case = junit.Case(result.suite, result.name, outcome, message, details, seconds=result.seconds)
        self.suites.setdefault(result.suite, []).append(case)

    def finish(self) -> None:
        self.out.write(junit.render("gpu-webhook test", self.suites.items()) + "\n")


class LintJunitReport:
    """`gpu-webhook lint -o junit`: the problems kept until lint ends, then the document."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.errors = 0
        self.suites: dict[str, list[junit.Case]] = {}  # rule file -> a case per problem, in file order

    def add(self, error: LoadError) -> None:
        self.errors += 1
        where = error.location
        name = f"{where.line}:{where.column}" + (f" rule {error.rule}" if error.rule else "")
        case = junit.Case(where.file, name, junit.Outcome.FAILURE, error.message, str(error), failure_type="lint")
        self.suites.setdefault(where.file, []).append(case)

    def finish(self, counts: LintCounts | None) -> None:
        """`counts` when nothing was wrong (rules, files, overlays, exceptions), else None."""
        if counts is None:
            print(errors_found(self.errors), file=sys.stderr)
            suites = list(self.suites.items())
        else:
            suites = [("lint", [junit.Case("lint", checked(counts))])]
        self.out.write(junit.render("gpu-webhook lint", suites) + "\n")
