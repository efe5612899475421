"""Rules going in: what the loader builds from GPUPolicy documents, and what it reports when it cannot.

A Rule is immutable once built, so a RuleSet (ruleset.py) can be shared by concurrent requests
and swapped atomically on reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .cel import CompiledExpression
from .mutate import Mutation


class Action(StrEnum):
    DENY = "Deny"
    WARN = "Warn"
    AUDIT = "Audit"


@dataclass(frozen=True, slots=True)
class SourceLocation:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes LabelSelector: matchLabels AND every matchExpression."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, Any] | None) -> bool:
        labels = labels or {}
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class KindApi:
    """Where the apiserver serves a kind: its group ('' for core), a version and the plural resource."""

    kind: str
    group: str
    version: str
    resource: str


@dataclass(frozen=True, slots=True)
class Match:
    kinds: frozenset[str]
    operations: frozenset[str]
    namespaces_include: frozenset[str] | None = None
    namespaces_exclude: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    gpu: bool | None = None
    condition: CompiledExpression | None = None
    # kinds outside the kind table, with the API the rule named for them (the registration sends them)
    declared: tuple[KindApi, ...] = ()


@dataclass(frozen=True, slots=True)
class Validation:
    expression: CompiledExpression
    message: str | None = None
    message_expression: CompiledExpression | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    description: str
    action: Action
    match: Match
    validate: Validation | None
    mutations: tuple[Mutation, ...]
    params: Mapping[str, Any]
    autogen: bool
    failure_policy: str  # Fail | Ignore: what an evaluation error does
    on_missing_context: str  # Allow | Deny | Evaluate (namespaceObject null): when namespaceObject is needed but unknown
    needs_namespace: bool
    source: SourceLocation
    references: frozenset[str] = frozenset()  # variables its expressions read (what to compute for it)
    # On UPDATE a Deny denies only messages the old object did not already produce, and no rule acts
    # on a target whose inputs the update left unchanged (evaluate.py, ratcheting.py)
    ratcheting: bool = True
    exceptable: bool = True  # false: no GPUPolicyException applies to it (exceptions.py)
    overlaid_by: str = ""  # the GPUPolicyOverlays that changed it and what they set (overlays.py)
    # The object fields it reads or writes (ratcheting.py). None: any change counts (the whole object is
    # read, or the rule was not built by the loader)
    inputs: frozenset[tuple[str, ...]] | None = None


@dataclass(frozen=True, slots=True)
class LoadError:
    """One problem in one rule file, located as precisely as the YAML allows."""

    location: SourceLocation
    message: str
    rule: str | None = None

    def __str__(self) -> str:
        prefix = f"rule {self.rule}: " if self.rule else ""
        return f"{self.location}: {prefix}{self.message}"


class RuleLoadError(ValueError):
    """Rules (or exceptions) that could not be loaded: every problem, one `file:line:column: ...` per line."""

    def __init__(self, errors: list[LoadError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = errors
