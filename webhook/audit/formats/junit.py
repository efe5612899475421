"""JUnit XML for CI: `audit`'s JunitReport (webhook.junit writes it; `test`'s and `lint`'s are in
webhook.authoring.report).

One test suite per rule, one test case per object and rule that judged it.

Deny failures are <failure>; with --fail-on warn, Warn findings are too. Evaluation errors
are <error>. Rules not evaluated for want of namespace context are folded: one <skipped> case
per rule, named by the objects it could not judge, with the reason and the fix. Other findings
pass with their message in <system-out>, so a CI page shows them. Inputs that could not be read
are <error> cases of the suite `input`, one per file or document.
"""

from __future__ import annotations

from typing import TextIO

from webhook import junit
from webhook.engine import Result

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem
from . import ReportOptions

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
