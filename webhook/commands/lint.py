"""`gpu-webhook lint RULES...`: report every problem of every rule file; exit 1 on any."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.commands.common import EXIT_FAILED, EXIT_OK, RULES_DEFAULT, UsageError, rule_paths


def register(commands: Any) -> None:
    parser = commands.add_parser("lint", help="check rule files: schema, CEL, field references, conflicts")
    parser.add_argument(
        "rules", nargs="*", metavar="RULES", help=f"rule files or directories (default: {RULES_DEFAULT})"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.authoring.lint import lint

    paths = rule_paths(args.rules)
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"rules path not found: {path}")
    errors = lint(paths)
    for error in errors:
        print(error)
    if errors:
        print(f"{len(errors)} error{'s' if len(errors) != 1 else ''}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
