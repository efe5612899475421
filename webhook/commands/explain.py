"""`gpu-webhook explain -f FILE`: show which rules matched one object, why, and what they did."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import yaml

from webhook.authoring.explain import explain
from webhook.authoring.suite import admission
from webhook.commands.common import EXIT_FAILED, EXIT_OK, UsageError, default_rules_dir, load_ruleset


def register(commands: Any) -> None:
    parser = commands.add_parser("explain", help="explain the decision on one object, rule by rule")
    parser.add_argument("-f", "--file", required=True, help="the object (YAML or JSON; - for stdin)")
    parser.add_argument("--namespace-object", metavar="FILE", help="the Namespace, for namespaceSelector and CEL")
    parser.add_argument("--operation", default="CREATE", choices=("CREATE", "UPDATE", "DELETE", "CONNECT"))
    parser.add_argument("--old", metavar="FILE", help="the old object (UPDATE, DELETE)")
    parser.add_argument("--namespace", help="default: the object's metadata.namespace, else 'default'")
    parser.add_argument("--user", default="gpu-webhook-explain", help="request.userInfo.username")
    parser.add_argument("--rules", help="rules file or directory (default: the rules dir)")
    parser.add_argument("--color", action="store_true", default=None, help="colour even when not on a terminal")
    parser.add_argument("--no-color", dest="color", action="store_false")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.operation == "UPDATE" and not args.old:
        raise UsageError("--operation UPDATE needs --old FILE")
    ruleset = load_ruleset(args.rules or default_rules_dir())
    case: dict[str, Any] = {
        "operation": args.operation,
        "object": _read(args.file) if args.operation != "DELETE" else None,
        "oldObject": _read(args.old) if args.old else None,
        "namespaceObject": _read(args.namespace_object) if args.namespace_object else None,
        "userInfo": {"username": args.user},
    }
    if args.namespace:
        case["namespace"] = args.namespace
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ if args.color is None else args.color
    decision, lines = explain(ruleset, admission(case, os.getcwd()), color=color)
    for line in lines:
        print(line)
    return EXIT_OK if decision.allowed else EXIT_FAILED


def _read(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"{path}: {error}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise UsageError(f"{path}: expected exactly one object")
    return documents[0]
