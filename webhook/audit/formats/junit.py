"""JUnit XML for CI: one test suite per rule, one test case per object and rule that matched it.

Deny failures are <failure>; with --fail-on warn, Warn findings are too. Evaluation errors
are <error>. A rule not evaluated for want of namespace context is <skipped> (counted in
`skipped`). Other findings pass with their message in <system-out>, so a CI page shows them.
"""

from __future__ import annotations

from typing import TextIO

from webhook import junit
from webhook.engine import Result

from ..results import ObjectResult, Tally, text

FAIL, ERROR, WARN, AUDIT, SKIP = Result.FAIL, Result.ERROR, Result.WARN, Result.AUDIT, Result.SKIP


class JunitReport:
    def __init__(self, out: TextIO, fail_on: str = "deny") -> None:
        self.out = out
        self.failing = {FAIL, WARN} if fail_on == "warn" else {FAIL}
        self.cases: dict[str, list[junit.Case]] = {}  # rule -> its cases, in the order of the objects

    def add(self, result: ObjectResult) -> None:
        name = f"{result.ref} ({result.origin})"
        for outcome in result.outcomes:
            self.cases.setdefault(outcome.rule, []).append(self._case(outcome.rule, name, outcome.result, text(outcome)))

    def _case(self, rule: str, name: str, result: Result, message: str) -> junit.Case:
        if result in self.failing:
            kind = "Deny" if result == FAIL else "Warn"
            return junit.Case(rule, name, junit.Outcome.FAILURE, message, failure_type=kind)
        if result == ERROR:
            return junit.Case(rule, name, junit.Outcome.ERROR, message)
        if result == SKIP:
            return junit.Case(rule, name, junit.Outcome.SKIPPED, message)
        if result == Result.EXCEPTED:  # not judged: a GPUPolicyException let the object through
            return junit.Case(rule, name, junit.Outcome.SKIPPED, message)
        if result in (WARN, AUDIT):
            return junit.Case(rule, name, output=f"{'Warn' if result == WARN else 'Audit'}: {message}")
        return junit.Case(rule, name)

    def finish(self, tally: Tally) -> None:
        self.out.write(junit.render("gpu-webhook audit", ((rule, self.cases[rule]) for rule in sorted(self.cases))) + "\n")
