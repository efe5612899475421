"""A compiled, immutable rule set with its (kind, operation) index.

Cost must grow with the rules that can match an object, not with the rule set's
size: the index maps each (kind, operation) to the rules worth looking at, and an
untraced evaluation leaves out the rules whose `namespaces.include` does not name
the request's namespace (a site's per-team GPUPolicies, one namespace each).
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
_NARROWED_MAX = 65_536


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
    scoped: bool = False  # some rule names its namespaces (namespaces.include): candidates_in narrows
    # (kind, operation, namespace) -> the narrowed candidates; each distinct tuple kept once, so that
    # every namespace no scoped rule names shares one tuple, and so one projection and fused program
    _narrowed: dict[tuple[str, str, str], tuple[Rule, ...]] = field(default_factory=dict, init=False, repr=False)
    _distinct: dict[tuple[int, ...], tuple[Rule, ...]] = field(default_factory=dict, init=False, repr=False)

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
        scoped = any(rule.match.namespaces_include is not None for rule in rules)
        return cls(rules, env, merged, wildcards, references, tuple(exceptions), scoped)

    def candidates(self, kind: str, operation: str) -> tuple[Rule, ...]:
        found = self.index.get((kind, operation))
        return found if found is not None else self.wildcard.get(operation, ())

    def candidates_in(self, kind: str, operation: str, namespace: str) -> tuple[Rule, ...]:
        """candidates() less the rules whose namespaces.include leaves `namespace` out. Only for an
        untraced evaluation: a traced one lists those rules too, with the reason (matching.gate)."""
        found = self.candidates(kind, operation)
        if not self.scoped:
            return found
        key = (kind, operation, namespace)
        narrowed = self._narrowed.get(key)
        if narrowed is None:
            kept = tuple(
                r for r in found if r.match.namespaces_include is None or namespace in r.match.namespaces_include
            )
            narrowed = found if len(kept) == len(found) else self._distinct.setdefault(tuple(map(id, kept)), kept)
            if len(self._narrowed) >= _NARROWED_MAX:  # namespaces come and go: bound what is remembered
                self._narrowed.clear()
            self._narrowed[key] = narrowed
        return narrowed

    @property
    def accelerators(self) -> Accelerators:
        return self.env.accelerators


def indexed_kinds(rule: Rule) -> set[str]:
    kinds = set(rule.match.kinds)
    if "Pod" in kinds and rule.autogen:
        kinds |= WORKLOAD_KINDS
    return kinds
