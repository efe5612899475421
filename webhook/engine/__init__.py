"""The policy engine: a pure library. Load rules once, evaluate objects many times.

result = load_rules("rules/")
decision = evaluate(result.ruleset, AdmissionInput.offline(pod, namespace="team-a"))
for outcome in decision.outcomes(): ...
"""

from .evaluate import evaluate
from .loader import LoadResult, load_rules, rule_files
from .model import (
    NO_NAMESPACE_CONTEXT,
    Action,
    AdmissionInput,
    Decision,
    EvaluationError,
    LoadError,
    Mode,
    Phase,
    Result,
    Rule,
    RuleOutcome,
    RuleTrace,
    Violation,
)
from .ruleset import RuleSet

__all__ = [
    "NO_NAMESPACE_CONTEXT",
    "Action",
    "AdmissionInput",
    "Decision",
    "EvaluationError",
    "LoadError",
    "LoadResult",
    "Mode",
    "Phase",
    "Result",
    "Rule",
    "RuleOutcome",
    "RuleSet",
    "RuleTrace",
    "Violation",
    "evaluate",
    "load_rules",
    "rule_files",
]
