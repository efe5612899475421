"""`gpu-webhook export`: the rules that can run inside the apiserver, as admission policies.

Writes the validating rules as few ValidatingAdmissionPolicies (+ bindings) as their bindings allow
(webhook/export/merge.py; one per rule with --policy-per-rule) and a MutatingAdmissionPolicy
(+ binding) per mutating rule; every rule that cannot be exported
gets one line on stderr saying why (it stays with the webhook; with --table, its row says it).
A rule that GPUPolicyExceptions may lift is never exported (webhook.export.EXCEPTABLE): one warning
names those that would otherwise export, with --table too.
Exit 0 when the file is written, 2 on a usage or rule error.

-o/--output names a format, as in every command (yaml, or table: the same as --table); the file
is --out FILE. An -o value that is no format is still taken as the file, with a deprecation
message on stderr naming --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.audit.formats import EXPORT
from webhook.commands.common import (
    CLAIMS_MODES,
    CLAIMS_REFUSE,
    DEFAULT_KUBERNETES_VERSION,
    EXIT_OK,
    UsageError,
    add_rules,
    load_ruleset,
    rule_paths,
)

if TYPE_CHECKING:
    from webhook.export import Refusal

TARGETS = ("vap", "map", "all")  # webhook.export.TARGETS, without importing the exporter to build the parser


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "export", help="write the rules as ValidatingAdmissionPolicy / MutatingAdmissionPolicy objects"
    )
    add_rules(parser)
    parser.add_argument("--target", choices=TARGETS, default="all", help="vap, map or all (default: all)")
    parser.add_argument(
        "--kubernetes-version",
        metavar="X.Y",
        default=DEFAULT_KUBERNETES_VERSION,
        help=f"the cluster's release: picks the API versions (default: {DEFAULT_KUBERNETES_VERSION})",
    )
    parser.add_argument(
        "--claims",
        choices=CLAIMS_MODES,
        default=CLAIMS_REFUSE,
        help="rules that count accelerators (gpu:, targetGpuCount, gpuCount, containerGpuCount): "
        "refuse them (default: the webhook resolves the pod's DRA claims, a policy cannot), or export them "
        "as the engine decides without claim context: every resourceClaims entry is unresolved, "
        "an accelerator pod that adds 0 devices to the counts (docs/native.md, 'Accelerator rules')",
    )
    parser.add_argument(
        "--policy-per-rule",
        action="store_true",
        help="a ValidatingAdmissionPolicy per validating rule (each can be disabled alone) instead of one per "
        "group of rules that share a binding (the apiserver pays per policy; docs/native.md)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FORMAT",
        help=f"{' or '.join(EXPORT)}: the policies, or the Markdown table of docs/native.md (as --table); "
        "default: yaml. A FILE here is deprecated: use --out FILE",
    )
    parser.add_argument("--out", metavar="FILE", help="write to FILE (default: stdout)")
    parser.add_argument("--table", action="store_true", help="print the Markdown table of docs/native.md instead")
    parser.set_defaults(run=run)


def lifted_warning(lifted: list[Refusal]) -> str:
    """The one warning for rules that would export but exceptions may lift (webhook.export.EXCEPTABLE):
    `export` and `manifests --native` both print it, the table has their `exceptable` column."""
    names = ", ".join(refusal.rule for refusal in lifted)
    return (
        f"{len(lifted)} rules would export but stay with the webhook because a GPUPolicyException may lift "
        f"them, which no admission policy can honour: {names}; to run one natively, set exceptable: false "
        "for it (a GPUPolicyOverlay among the rules, which the webhook then loads too; docs/native.md, Exceptions)"
    )


def output_and_file(output: str | None, out: str | None, table: bool) -> tuple[str, str | None]:
    """The format and the file (None: stdout) that -o/--output, --out and --table name together. An -o that
    is no format is the file, as before --out existed: said once on stderr, deprecated."""
    if not output or output in EXPORT:
        chosen = output or "yaml"
        return ("table" if table else chosen), out
    if out is not None:
        raise UsageError(f"-o/--output {output}: not a format ({', '.join(EXPORT)}), and --out names the file")
    print(
        f"gpu-webhook export: warning: -o/--output FILE is deprecated: write --out {output} "
        f"(-o names a format: {', '.join(EXPORT)})",
        file=sys.stderr,
    )
    return ("table" if table else "yaml"), output


def run(args: argparse.Namespace) -> int:
    from webhook.export import export
    from webhook.export.versions import Release

    output, path = output_and_file(args.output, args.out, args.table)
    try:
        release = Release.parse(args.kubernetes_version)
        result = export(
            load_ruleset(rule_paths(args.rules, args.site)), args.target, release, args.claims, args.policy_per_rule
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    text: str = EXPORT[output].make(result)
    if path is not None:
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {path}: {error}") from None
    else:
        sys.stdout.write(text)
    # the table has a row per rule with its note or its reason: saying each again on stderr is noise
    tabled = output == "table"
    for rule in () if tabled else result.rules:
        if rule.note:
            print(f"gpu-webhook export: {rule.rule}: exported {rule.note}", file=sys.stderr)
    for refusal in () if tabled else result.refused:
        print(f"gpu-webhook export: {refusal}", file=sys.stderr)
    if result.lifted:
        print(f"gpu-webhook export: warning: {lifted_warning(result.lifted)}", file=sys.stderr)
    if result.release.map_note() and any(rule.mutating for rule in result.rules):
        print(f"gpu-webhook export: note: {result.release.map_note()}", file=sys.stderr)
    print(
        f"gpu-webhook export: {len(result.exported)} rules exported, {len(result.refused)} kept by the webhook",
        file=sys.stderr,
    )
    return EXIT_OK
