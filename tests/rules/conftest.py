"""Fixtures for the rule-pack tests: one rule of the pack alone (the whole pack: `pack`, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.rules.rulekit import RULES
from webhook.engine import RuleSet, load_rules


@pytest.fixture(scope="session")
def rule_pack() -> Callable[[str], RuleSet]:
    """One rule of the pack alone, so a test sees that rule's effect and nothing else's."""
    cache: dict[str, RuleSet] = {}

    def load(name: str) -> RuleSet:
        if name not in cache:
            result = load_rules(RULES / f"{name}.yaml")
            assert result.ok, "\n".join(map(str, result.errors))
            cache[name] = result.ruleset
        return cache[name]

    return load
