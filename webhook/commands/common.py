"""What every command shares: where the default rules live, shared options, and how problems are reported.

Light on purpose: every command's register() imports this module to build the parser (`--help`,
`--version`), so the engine is imported when a command loads rules, not before.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.engine import LoadResult, RuleSet
    from webhook.kubeyaml import Document

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_CHECKOUT = Path(__file__).resolve().parents[2]


class UsageError(Exception):
    """A configuration or usage problem: printed without a traceback, exit code 2."""


def packaged(name: str) -> Path:
    """A directory shipped inside the package (webhook/data/NAME: the rule pack, the manifests)."""
    from importlib import resources

    return Path(str(resources.files("webhook") / "data" / name))


def _source_or_packaged(name: str) -> str:
    """The checkout's top-level NAME/ when running from a source tree (edits show at once), else the wheel's copy."""
    checkout = _CHECKOUT / name
    if checkout.is_dir() and (_CHECKOUT / "pyproject.toml").is_file():
        return str(checkout)
    return str(packaged(name))


def default_rules_dir() -> str:
    """$GPU_WEBHOOK_RULES, else the checkout's rules/, else the rule pack installed with the package."""
    return os.environ.get("GPU_WEBHOOK_RULES") or _source_or_packaged("rules")


def default_manifests_dir() -> str:
    return _source_or_packaged("manifests")


def rule_paths(given: list[str] | None, site: Sequence[str] | None = None) -> list[str]:
    """The --rules paths given, else the default rules (the one default of every command but `test`),
    then the --site paths: a site's overlays, exceptions and rules on top of the pack, not instead."""
    return [*(given or [default_rules_dir()]), *(site or ())]


def load_rules(paths: Sequence[str | os.PathLike[str]], objects: Sequence[Document] = ()) -> LoadResult:
    """webhook.engine.load_rules, imported on the first call (a module attribute: tests share one load)."""
    from webhook.engine import load_rules as load

    return load(paths, objects)


def load_ruleset(
    paths: Sequence[str | os.PathLike[str]] | str, announce: bool = True, objects: Sequence[Document] = ()
) -> RuleSet:
    """Load rules or raise UsageError listing every problem (file:line:column: rule NAME: message).

    `objects`: policy objects read from a cluster (`audit --cluster`), loaded with the files as the
    server loads them. With `announce`, one line on stderr says how many rules and from where, so a
    --rules that names the wrong path, or the default where a site's rules were meant, shows at once
    (stderr: stdout stays the command's output, which programs read).
    """
    from webhook.engine import RuleLoadError

    named = [paths] if isinstance(paths, str) else list(paths)
    try:
        ruleset = load_rules(named, objects).require()
    except RuleLoadError as error:
        raise UsageError(str(error)) from None
    if announce:
        cluster = (
            f" and {len(objects)} policy object{'s' if len(objects) != 1 else ''} of the cluster" if objects else ""
        )
        warn(describe_rules(len(ruleset.rules), named) + cluster)
    return ruleset


def describe_rules(count: int, paths: Sequence[str | os.PathLike[str]]) -> str:
    """'31 rules from rules/ (the installed pack)', '33 rules from rules/, site/': what a command runs with."""
    return f"{count} rule{'s' if count != 1 else ''} from " + ", ".join(_shown(os.fspath(p)) for p in paths)


def _shown(path: str) -> str:
    """PATH relative to the current directory when that is shorter; a directory ends in /; the default named."""
    absolute = os.path.abspath(path)
    shown = min(absolute, os.path.relpath(absolute), key=len)
    if os.path.isdir(absolute) and not shown.endswith(os.sep):
        shown += os.sep
    if path == os.environ.get("GPU_WEBHOOK_RULES"):
        return f"{shown} ($GPU_WEBHOOK_RULES)"
    if os.path.realpath(absolute) == os.path.realpath(_source_or_packaged("rules")):
        return f"{shown} (the installed pack)"
    return shown


def fail(message: str) -> int:
    print(f"gpu-webhook: {message}", file=sys.stderr)
    return EXIT_USAGE


def warn(message: str) -> None:
    print(f"gpu-webhook: {message}", file=sys.stderr)


# -- options several commands share: one spelling, one help text ------------------------------------


RULES_DEFAULT = "$GPU_WEBHOOK_RULES, else the rule pack installed with gpu-webhook"

# `export` and `manifests --native` show these; their owners (webhook.export.policies, .versions) import
# the exporter and the engine, so the parser keeps copies (tests/authoring/test_cli_startup.py: equal)
CLAIMS_REFUSE, CLAIMS_UNRESOLVED = "refuse", "unresolved"
CLAIMS_MODES = (CLAIMS_REFUSE, CLAIMS_UNRESOLVED)
DEFAULT_KUBERNETES_VERSION = "1.36"


def add_rules(parser: argparse.ArgumentParser, default: str = RULES_DEFAULT) -> None:
    """--rules PATH and --site PATH, repeatable, the documents of every PATH merged (read them with
    rule_paths(args.rules, args.site))."""
    parser.add_argument(
        "--rules",
        action="append",
        metavar="PATH",
        help=f"rule file or directory; repeat to use the rules of several together (default: {default})",
    )
    parser.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="PATH",
        help="file or directory of the site's GPUPolicyOverlay, GPUPolicyException (and GPUPolicy) documents, "
        "loaded on top of the rules (the pack, or --rules) rather than instead of them; repeatable",
    )


def add_namespace_objects(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace-objects",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML/JSON with Namespace objects (e.g. `kubectl get ns -o yaml`), for namespaceSelector and "
        "namespaceObject; repeatable. Namespace objects in the input are used too",
    )


def add_output(
    parser: argparse.ArgumentParser, formats: Mapping[str, object], default: str | None = None, help: str = ""
) -> None:
    """-o/--output NAME, one of the command's formats (a table of webhook.audit.formats): the one meaning of -o."""
    parser.add_argument("-o", "--output", choices=tuple(formats), default=default, help=help or "report format")


def namespaces_in(
    paths: Iterable[str], problem: Callable[[str], None], scan: bool = False
) -> dict[str, dict[str, Any]]:
    """Namespace objects in files and directories (webhook.audit.context.namespaces_in); a usage error for a
    path that does not exist."""
    from webhook.audit.context import namespaces_in as read
    from webhook.audit.sources import SourceError

    try:
        return read(paths, problem, scan)
    except SourceError as error:
        raise UsageError(str(error)) from None
