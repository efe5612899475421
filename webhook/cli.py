"""`gpu-webhook` command line: one sub-command per module in webhook.commands.

Exit codes everywhere: 0 ok, 1 violations or failed tests, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

from webhook.commands.common import UsageError, fail

COMMANDS = ("serve", "audit", "test", "lint", "explain", "schema", "certs", "manifests", "export")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default (none for flags and unset options), as the issue of a new user asks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        flag = action.nargs == 0  # --color, --no-color: a default of True/False says nothing
        if flag or "default" in text.lower() or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def version() -> str:
    try:
        return metadata.version("gpu-webhook")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


class _Commands(argparse._SubParsersAction):
    """Every sub-command gets the shared formatter, and its one-line help as its description."""

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if "description" not in kwargs and kwargs.get("help"):
            text = str(kwargs["help"])
            kwargs["description"] = text[0].upper() + text[1:] + "."
        return super().add_parser(name, **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Admission policy for GPU workloads: serve the webhook, audit manifests or a cluster, "
        "test, lint and explain rules, render the install manifests.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.register("action", "parsers", _Commands)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:  # a missing module is an error of the package, not a command to leave out
        importlib.import_module(f"webhook.commands.{name}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_ports(args)
        return int(args.run(args) or 0)
    except UsageError as error:
        return fail(str(error))
    except BrokenPipeError:  # `gpu-webhook audit ... | head` (an OSError: before the next clause)
        return 0
    except OSError as error:  # a port in use, an unknown host, a path that is a file: the user's to fix
        return fail(describe(error))
    except KeyboardInterrupt:
        return 130


def _check_ports(args: argparse.Namespace) -> None:
    for name in ("port", "metrics_port"):
        port = getattr(args, name, None)
        if port is not None and not 0 <= port <= 65535:
            raise UsageError(f"--{name.replace('_', '-')} {port}: a port is a number from 0 to 65535")


def describe(error: OSError) -> str:
    """An operating-system error as one line a user can act on (no traceback)."""
    import errno
    import socket

    if isinstance(error, socket.gaierror):
        return f"cannot resolve the address to listen on: {error.strerror or error}"
    if error.errno == errno.EADDRINUSE:
        return f"{error.strerror or error}: is another server (or gpu-webhook) already listening there?"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{error.strerror or error}: the address is not one of this machine's"
    where = f"{error.filename}: " if error.filename else ""
    if isinstance(error, FileExistsError | NotADirectoryError):
        return f"{where}exists and is not a directory"
    return f"{where}{error.strerror or error}"


if __name__ == "__main__":
    sys.exit(main())
