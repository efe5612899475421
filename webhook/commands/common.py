"""What every command shares: where the default rules live and how a broken rule set is reported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from webhook.engine import RuleSet, load_rules

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A configuration or usage problem: printed without a traceback, exit code 2."""


def default_rules_dir() -> str:
    """$GPU_WEBHOOK_RULES, else the repository's rules/ (a source checkout), else ./rules."""
    if os.environ.get("GPU_WEBHOOK_RULES"):
        return os.environ["GPU_WEBHOOK_RULES"]
    checkout = Path(__file__).resolve().parents[2] / "rules"
    return str(checkout) if checkout.is_dir() else "rules"


def load_ruleset(paths: list[str] | str) -> RuleSet:
    """Load rules or raise UsageError listing every problem (file:line:column: rule NAME: message)."""
    paths = [paths] if isinstance(paths, str) else paths
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"rules path not found: {path}")
    result = load_rules(paths)
    if result.ruleset is None:
        raise UsageError("\n".join(str(error) for error in result.errors))
    return result.ruleset


def fail(message: str) -> int:
    print(f"gpu-webhook: {message}", file=sys.stderr)
    return EXIT_USAGE
