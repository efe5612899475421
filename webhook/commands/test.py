"""`gpu-webhook test PATH`: run the GPUPolicyTest suites under PATH; exit 1 when a case fails."""

from __future__ import annotations

import argparse
import os
from typing import Any

from webhook.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
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
    parser.add_argument("path", metavar="PATH", help="suite file or directory (searched recursively)")
    add_rules(parser, default="the suite's spec.rules, else PATH when it is a directory")
    parser.add_argument("-o", "--output", choices=("text", "junit"), default="text", help="report format")
    parser.set_defaults(run=run_tests)


def run_tests(args: argparse.Namespace) -> int:
    from webhook.authoring import report
    from webhook.authoring.suite import SuiteError, discover, run

    if not os.path.exists(args.path):
        raise UsageError(f"path not found: {args.path}")
    default = args.path if os.path.isdir(args.path) else default_rules_dir()
    try:
        unreadable: list[str] = []
        suites = discover(args.path, args.rules, default, unreadable=_collect_warning(unreadable))
        if not suites:
            raise UsageError(f"no GPUPolicyTest suites under {args.path}")
        if args.output == "junit":
            results = list(run(suites, load_ruleset))
            print(report.junit(results))
        else:
            results = []
            for line in report.text(_collect(run(suites, load_ruleset), results)):
                print(line, flush=True)
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


def _collect(results: Any, into: list[Any]) -> Any:
    for result in results:
        into.append(result)
        yield result
