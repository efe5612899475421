"""JUnit XML for CI: `audit`'s JunitReport, `test`'s SuiteJunitReport, `lint`'s LintJunitReport (webhook.junit).

audit: one test suite per rule, one test case per object and rule that judged it.

Deny failures are <failure>; with --fail-on warn, Warn findings are too. Evaluation errors
are <error>. Rules not evaluated for want of namespace context are folded: one <skipped> case
per rule, named by the objects it could not judge, with the reason and the fix. Other findings
pass with their message in <system-out>, so a CI page shows them. Inputs that could not be read
are <error> cases of the suite `input`, one per file or document.

test: one test suite per suite file, one test case per case, a <failure> with the full text.

lint: one test suite per rule file with problems, a failing case per problem (named by its
line and column); a clean run is one passing case that says what was checked.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from webhook import junit
from webhook.engine import Result

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem
from . import ReportOptions

if TYPE_CHECKING:
    from webhook.authoring.report import LintCounts
    from webhook.authoring.suite import CaseResult
    from webhook.engine import LoadError

FAIL, ERROR, WARN, AUDIT, SKIP = Result.FAIL, Result.ERROR, Result.WARN, Result.AUDIT, Result.SKIP
INPUT_SUITE = "input"


class JunitReport:
    shows_diffs = takes_entries = False

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.failing = {FAIL, WARN} if options.fail_on == "warn" else {FAIL}
        self.cases: dict[str, list[junit.Case]] = {}  # rule -> its cases, in the order of the objects
        self.problems: list[junit.Case] = []

    def problem(self, problem: InputProblem) -> None:
        self.problems.append(
            junit.Case(INPUT_SUITE, problem.origin, junit.Outcome.ERROR, f"{problem.reason}: not audited")
        )

    def add(self, result: ObjectResult) -> None:
        name = f"{result.ref} ({result.origin})"
        for outcome in result.outcomes:
            if outcome.result is not SKIP:
                self.cases.setdefault(outcome.rule, []).append(
                    self._case(outcome.rule, name, outcome.result, text(outcome))
                )

    def _case(self, rule: str, name: str, result: Result, message: str) -> junit.Case:
        if result in self.failing:
            kind = "Deny" if result == FAIL else "Warn"
            return junit.Case(rule, name, junit.Outcome.FAILURE, message, failure_type=kind)
        if result == ERROR:
            return junit.Case(rule, name, junit.Outcome.ERROR, message)
        if result == Result.EXCEPTED:  # not judged: a GPUPolicyException let the object through
            return junit.Case(rule, name, junit.Outcome.SKIPPED, message)
        if result in (WARN, AUDIT):
            return junit.Case(rule, name, output=f"{'Warn' if result == WARN else 'Audit'}: {message}")
        return junit.Case(rule, name)

    def finish(self, tally: Tally) -> None:
        cases = {rule: list(found) for rule, found in self.cases.items()}
        folded = tally.not_evaluated()
        if folded is not None:
            for rule, objects in folded.rules:
                name = f"{objects} object{'s' if objects != 1 else ''} not evaluated"
                message = f"{folded.reason}; fix: {folded.fix}"
                cases.setdefault(rule, []).append(junit.Case(rule, name, junit.Outcome.SKIPPED, message))
        suites = [(rule, cases[rule]) for rule in sorted(cases)]
        if self.problems:
            suites.insert(0, (INPUT_SUITE, self.problems))
        self.out.write(junit.render("gpu-webhook audit", suites) + "\n")


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
        from webhook.authoring.report import checked, errors_found

        if counts is None:
            print(errors_found(self.errors), file=sys.stderr)
            suites = list(self.suites.items())
        else:
            suites = [("lint", [junit.Case("lint", checked(counts))])]
        self.out.write(junit.render("gpu-webhook lint", suites) + "\n")
