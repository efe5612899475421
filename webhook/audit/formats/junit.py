"""JUnit XML for CI: one test suite per rule, one test case per object and rule that matched it.

Deny failures are <failure>; with --fail-on warn, Warn findings are too. Evaluation errors
are <error>. A rule not evaluated for want of namespace context is <skipped> (counted in
`skipped`). Other findings pass with their message in <system-out>, so a CI page shows them.
"""

from __future__ import annotations

from typing import TextIO

# B406: escapes text for XML we write; parses nothing
from xml.sax.saxutils import escape, quoteattr  # nosec B406

from webhook.engine import Result

from ..results import ObjectResult, Tally, text

FAIL, ERROR, WARN, AUDIT, SKIP = Result.FAIL, Result.ERROR, Result.WARN, Result.AUDIT, Result.SKIP


class JunitReport:
    def __init__(self, out: TextIO, fail_on: str = "deny") -> None:
        self.out = out
        self.failing = {FAIL, WARN} if fail_on == "warn" else {FAIL}
        self.cases: dict[str, list[tuple[str, str, str]]] = {}  # rule -> (object, result, message)

    def add(self, result: ObjectResult) -> None:
        name = f"{result.ref} ({result.origin})"
        for outcome in result.outcomes:
            self.cases.setdefault(outcome.rule, []).append((name, outcome.result, text(outcome)))

    def finish(self, tally: Tally) -> None:
        total = sum(len(cases) for cases in self.cases.values())
        failures = sum(r in self.failing for cases in self.cases.values() for _, r, _ in cases)
        errors = sum(r == ERROR for cases in self.cases.values() for _, r, _ in cases)
        skipped = sum(r == SKIP for cases in self.cases.values() for _, r, _ in cases)
        write = self.out.write
        write('<?xml version="1.0" encoding="UTF-8"?>\n')
        write(
            f'<testsuites name="gpu-webhook audit" tests="{total}" failures="{failures}" errors="{errors}"'
            f' skipped="{skipped}">\n'
        )
        for rule in sorted(self.cases):
            cases = self.cases[rule]
            suite_failures = sum(r in self.failing for _, r, _ in cases)
            suite_errors = sum(r == ERROR for _, r, _ in cases)
            suite_skipped = sum(r == SKIP for _, r, _ in cases)
            write(
                f'  <testsuite name={quoteattr(rule)} tests="{len(cases)}" failures="{suite_failures}"'
                f' errors="{suite_errors}" skipped="{suite_skipped}">\n'
            )
            for name, result, message in cases:
                write(f"    <testcase classname={quoteattr(rule)} name={quoteattr(name)}")
                if result in self.failing:
                    kind = "Deny" if result == FAIL else "Warn"
                    write(f'>\n      <failure type="{kind}" message={quoteattr(message)}>{escape(message)}</failure>\n')
                    write("    </testcase>\n")
                elif result == ERROR:
                    write(f">\n      <error message={quoteattr(message)}>{escape(message)}</error>\n    </testcase>\n")
                elif result == SKIP:
                    write(f">\n      <skipped message={quoteattr(message)}/>\n    </testcase>\n")
                elif result in (WARN, AUDIT):
                    label = "Warn" if result == WARN else "Audit"
                    write(f">\n      <system-out>{label}: {escape(message)}</system-out>\n    </testcase>\n")
                else:
                    write("/>\n")
            write("  </testsuite>\n")
        write("</testsuites>\n")
