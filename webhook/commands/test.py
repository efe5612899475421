"""`gpu-webhook test PATH...`: run the GPUPolicyTest suites under each PATH; exit 1 when a case fails.

With several PATHs (`gpu-webhook test rules/ site/`) every suite runs against its own rules plus
the other PATHs' documents: the pack's suites see the site's overlays and exceptions, the site's
suites the pack. With --site PATH, each suite runs against its rules plus the site's documents, and
a suite that names no rules against the pack plus the site (`test --site site/ site/tests/`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.audit.formats import TEST
from webhook.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_output,
    add_rules,
    default_rules_dir,
    load_ruleset,
    warn,
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "test",
        help="run GPUPolicyTest suites against the rules",
        description="Run every GPUPolicyTest case under PATH with the server's engine (both phases) and report "
        "each case; exit 1 when one fails.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="suite file or directory (searched recursively); with several, each suite also loads the "
        "documents of the others (a site directory's overlays and exceptions on top of the pack); "
        "default: the rule pack's own suites ($GPU_WEBHOOK_RULES, else the installed pack)",
    )
    add_rules(parser, default="the suite's spec.rules, else PATH when it is a directory (with --site: the pack)")
    add_output(parser, TEST, default="text")
    parser.set_defaults(run=run_tests)


def run_tests(args: argparse.Namespace) -> int:
    from webhook.authoring.suite import SuiteError, discover, run

    if not args.paths:
        args.paths = [default_rules_dir()]  # the pack and its suites (tests/ beside its rules)
    for path in args.paths:
        if not os.path.exists(path):
            raise UsageError(f"path not found: {path}")
    try:
        unreadable: list[str] = []
        suites = []
        for path in args.paths:
            # --site is "on top of the pack": a suite without spec.rules then runs against the pack and the site
            default = path if os.path.isdir(path) and not args.site else default_rules_dir()
            others = [p for p in args.paths if p != path]
            found = discover(path, args.rules, default, _collect_warning(unreadable), [*others, *args.site])
            suites.extend(found)
        if not suites:
            raise UsageError(f"no GPUPolicyTest suites under {', '.join(args.paths)}")
        report = TEST[args.output].make(sys.stdout)
        results = []
        for result in run(suites, load_ruleset):
            results.append(result)
            report.add(result)
        report.finish()
    except SuiteError as error:
        raise UsageError(str(error)) from None
    if unreadable:
        return EXIT_USAGE
    return EXIT_OK if all(r.passed for r in results) else EXIT_FAILED


def _collect_warning(into: list[str]) -> Any:
    def note(message: str) -> None:
        into.append(message)
        warn(message)

    return note
