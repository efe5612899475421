"""docs/rules.md is generated from the rules and the engine's answers; it must not drift from them."""

from __future__ import annotations

import importlib.util
import sys

from tests.rules.rulekit import ROOT, RULES


def _generator():
    if "gen_rules" not in sys.modules:  # dataclasses look their module up in sys.modules
        spec = importlib.util.spec_from_file_location("gen_rules", ROOT / "docs" / "gen_rules.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gen_rules"] = module
        spec.loader.exec_module(module)
    return sys.modules["gen_rules"]


def test_rules_md_is_current():
    generator = _generator()
    assert (ROOT / "docs" / "rules.md").read_text() == generator.render(), "run: python docs/gen_rules.py"


def test_every_rule_has_a_doc_scenario():
    assert set(_generator().SCENARIOS) == {p.stem for p in RULES.glob("*.yaml")}
