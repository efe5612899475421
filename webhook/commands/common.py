"""What every command shares: where the default rules live and how a broken rule set is reported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from webhook.engine import RuleSet, load_rules
from webhook.engine.loader import RuleLoadError

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
    try:
        return load_rules([paths] if isinstance(paths, str) else paths).require()
    except RuleLoadError as error:
        raise UsageError(str(error)) from None


def fail(message: str) -> int:
    print(f"gpu-webhook: {message}", file=sys.stderr)
    return EXIT_USAGE
