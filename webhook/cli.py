"""`gpu-webhook` command line: one sub-command per module in webhook.commands.

Exit codes everywhere: 0 ok, 1 violations or failed tests, 2 usage or configuration error.

Every command module is light: its register() uses argparse and webhook.commands.common only,
and its run() imports the machinery it needs (the engine, aiohttp, the kubernetes client,
cryptography, the exporter, rich) when it runs. So `--help` and `--version`, which import every
command module to list them all, import none of that machinery (tests/authoring/test_cli_startup.py
names the modules that building the parser must not import).
Only the module of the command being run is imported; the other commands get empty placeholders
that argparse never shows. A command module that is missing or fails to import, or a module its
run() imports that is, is an error of the installation, reported as such (exit 2), never a
command left out or a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

EXIT_USAGE = 2  # webhook.commands.common.EXIT_USAGE, without importing the engine before a command needs it

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
    """The program's version and the default rule pack's digest (the pack `serve` and every door load
    unless told otherwise): two facts, since a pack may change without the program, and back."""
    from webhook.commands.common import default_rules_dir
    from webhook.version import installed_version, pack_digest

    rules = default_rules_dir()
    try:
        pack = f"rule pack sha256:{pack_digest([rules])} ({rules})"
    except OSError as error:
        pack = f"rule pack unreadable ({rules}: {error.strerror or error})"
    return f"{installed_version()}\n{pack}"


class _Version(argparse.Action):
    """--version, looked up when asked for (argparse's own action formats it at parser build time)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"{parser.prog} {version()}")  # on stdout, as argparse's own action
        parser.exit()


class CommandModuleError(Exception):
    """A command's module is missing or broken: the installation is, not the user's input."""


def load_command(name: str) -> ModuleType:
    """webhook.commands.NAME, or a clear error naming the module (never a command silently left out)."""
    module_name = f"webhook.commands.{name}"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # ImportError, or anything its own imports raise
        raise CommandModuleError(
            f"the `{name}` command cannot be loaded ({module_name}: {type(error).__name__}: {error}): "
            "the installation is incomplete or broken; reinstall gpu-webhook"
        ) from error
    if not callable(getattr(module, "register", None)):
        raise CommandModuleError(f"the `{name}` command cannot be loaded ({module_name} has no register())")
    return module


class _Commands(argparse._SubParsersAction):
    """Every sub-command gets the shared formatter, and its one-line help as its description."""

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if "description" not in kwargs and kwargs.get("help"):
            text = str(kwargs["help"])
            kwargs["description"] = text[0].upper() + text[1:] + "."
        return super().add_parser(name, **kwargs)  # type: ignore[arg-type]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that command's module is imported (the others are placeholders)."""
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Admission policy for GPU workloads: serve the webhook, audit manifests or a cluster, "
        "test, lint and explain rules, render the install manifests.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.register("action", "parsers", _Commands)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if only is None or name == only:
            load_command(name).register(commands)
        else:
            commands.add_parser(name, add_help=False)  # never shown: the command line names `only`
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the first argument names the command, or it is --help/--version/a typo: then every command loads
    only = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        parser = build_parser(only)
    except CommandModuleError as error:
        print(f"gpu-webhook: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    from webhook.commands.common import UsageError, fail

    try:
        _check_ports(args)
        return int(args.run(args) or 0)
    except UsageError as error:
        return fail(str(error))
    except ImportError as error:  # what run() imports when it runs: a dependency missing or broken
        print(
            f"gpu-webhook: error: the `{args.command}` command cannot run ({type(error).__name__}: {error}): "
            "the installation is incomplete or broken; reinstall gpu-webhook",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except BrokenPipeError:  # `gpu-webhook audit ... | head` (an OSError: before the next clause)
        return 0
    except OSError as error:  # a port in use, an unknown host, a path that is a file: the user's to fix
        return fail(describe(error))
    except KeyboardInterrupt:
        return 130


def _check_ports(args: argparse.Namespace) -> None:
    from webhook.commands.common import UsageError

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
