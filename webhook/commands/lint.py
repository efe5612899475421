"""`gpu-webhook lint RULES...`: report every problem of every rule file; exit 1 on any."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from webhook.commands.common import EXIT_FAILED, EXIT_OK, RULES_DEFAULT, UsageError, rule_paths


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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.authoring.lint import lint

    paths = rule_paths(args.rules, args.site)
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"rules path not found: {path}")
    errors = lint(paths)
    for error in errors:
        print(error)
    if errors:
        print(f"{len(errors)} error{'s' if len(errors) != 1 else ''}", file=sys.stderr)
        return EXIT_FAILED
    # one line on success, so a clean run is told from one that checked nothing (an empty directory)
    rules, files, overlays, exceptions = _counts(paths)
    site = "".join(
        f", {count} {name}{'s' if count != 1 else ''}"
        for count, name in ((overlays, "overlay"), (exceptions, "exception"))
        if count
    )
    print(f"{rules} rule{'s' if rules != 1 else ''} in {files} file{'s' if files != 1 else ''}{site}: no problems")
    return EXIT_OK


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
