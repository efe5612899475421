"""`gpu-webhook lint RULES...`: report every problem of every rule file; exit 1 on any."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from webhook.audit.formats import LINT
from webhook.commands.common import EXIT_FAILED, EXIT_OK, RULES_DEFAULT, UsageError, add_output, rule_paths


def register(commands: Any) -> None:
    parser = commands.add_parser("lint", help="check rule files: schema, CEL, field references, conflicts")
    parser.add_argument(
        "rules", nargs="*", metavar="RULES", help=f"rule files or directories (default: {RULES_DEFAULT})"
    )
    parser.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="PATH",
        help="the site's overlays, exceptions and rules, checked on top of RULES (or the pack); repeatable",
    )
    add_output(parser, LINT, default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.authoring.lint import lint

    paths = rule_paths(args.rules, args.site)
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"rules path not found: {path}")
    errors = lint(paths)
    report = LINT[args.output].make(sys.stdout)
    for error in errors:
        report.add(error)
    # what was checked, on success: a clean run is told from one that checked nothing (an empty directory)
    report.finish(None if errors else _counts(paths))
    return EXIT_FAILED if errors else EXIT_OK


def _counts(paths: list[str]) -> tuple[int, int, int, int]:
    """GPUPolicy documents and the files holding any, GPUPolicyOverlay and GPUPolicyException documents,
    under `paths` (suites beside the rules not counted).

    Read from the YAML node tree, kinds only: the rules have just loaded without a problem, so this
    is what the loader counted, without compiling them a second time."""
    from webhook.engine import rule_files
    from webhook.engine.documents import EXCEPTION_KIND, OVERLAY_KIND, POLICY_KIND
    from webhook.kubeyaml import document_kinds

    kinds = [document_kinds(Path(file).read_text(encoding="utf-8")) for file in rule_files(paths)]
    per_file = [found.count(POLICY_KIND) for found in kinds]
    overlays = sum(found.count(OVERLAY_KIND) for found in kinds)
    exceptions = sum(found.count(EXCEPTION_KIND) for found in kinds)
    return sum(per_file), sum(1 for n in per_file if n), overlays, exceptions
