"""A compiled, immutable rule set with its (kind, operation) index.

Cost must grow with the rules that can match an object, not with the rule set's
size: the index maps each (kind, operation) to the rules worth looking at.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .cel import CelEnvironment
from .exceptions import PolicyException
from .policy import Rule
from .resources import Accelerators
from .workloads import WORKLOAD_KINDS

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    env: CelEnvironment
    index: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)
    wildcard: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    references: frozenset[str] = frozenset()  # variables any rule reads: what a shared activation holds
    # GPUPolicyExceptions read with the rules (files an offline door was given); the cluster's come
    # per request (AdmissionInput.exceptions)
    exceptions: tuple[PolicyException, ...] = ()

    @classmethod
    def build(cls, rules: Iterable[Rule], env: CelEnvironment, exceptions: Iterable[PolicyException] = ()) -> RuleSet:
        rules = tuple(rules)
        index: dict[tuple[str, str], list[Rule]] = {}
        wildcard: dict[str, list[Rule]] = {op: [] for op in OPERATIONS}
        for rule in rules:
            for operation in rule.match.operations:
                if "*" in rule.match.kinds:
                    wildcard[operation].append(rule)
                    continue
                for kind in indexed_kinds(rule):
                    index.setdefault((kind, operation), []).append(rule)
        # A wildcard rule also belongs, in file order, to every indexed list of its operation.
        order = {rule.name: position for position, rule in enumerate(rules)}
        merged = {
            key: tuple(sorted({r.name: r for r in (*found, *wildcard[key[1]])}.values(), key=lambda r: order[r.name]))
            for key, found in index.items()
        }
        references = frozenset().union(*(rule.references for rule in rules))
        wildcards = {op: tuple(found) for op, found in wildcard.items()}
        return cls(rules, env, merged, wildcards, references, tuple(exceptions))

    def candidates(self, kind: str, operation: str) -> tuple[Rule, ...]:
        found = self.index.get((kind, operation))
        return found if found is not None else self.wildcard.get(operation, ())

    @property
    def accelerators(self) -> Accelerators:
        return self.env.accelerators


def indexed_kinds(rule: Rule) -> set[str]:
    kinds = set(rule.match.kinds)
    if "Pod" in kinds and rule.autogen:
        kinds |= WORKLOAD_KINDS
    return kinds
