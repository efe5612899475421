"""`gpu-webhook` command line: one sub-command per module in webhook.commands.

Exit codes everywhere: 0 ok, 1 violations or failed tests, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from webhook.commands.common import UsageError, fail

COMMANDS = ("serve", "audit", "test", "lint", "explain", "schema", "certs", "manifests", "export")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-webhook", description="Admission policy for GPU workloads.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"webhook.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"webhook.commands.{name}":
                raise
            continue  # a command still being built on another branch
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except UsageError as error:
        return fail(str(error))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpu-webhook audit ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
