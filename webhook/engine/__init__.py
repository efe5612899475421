"""The policy engine: a pure library. Load rules once, evaluate objects many times.

result = load_rules("rules/")
decision = evaluate(result.ruleset, AdmissionInput(object=pod, namespace="team-a"))
"""

from .evaluate import AdmissionInput, evaluate
from .loader import LoadResult, load_rules, rule_files
from .model import Action, Decision, LoadError, Mode, Phase, Rule, RuleTrace, Violation
from .ruleset import RuleSet

__all__ = [
    "Action",
    "AdmissionInput",
    "Decision",
    "LoadError",
    "LoadResult",
    "Mode",
    "Phase",
    "Rule",
    "RuleSet",
    "RuleTrace",
    "Violation",
    "evaluate",
    "load_rules",
    "rule_files",
]
