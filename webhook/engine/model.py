"""The engine's data: compiled rules going in, decisions and traces coming out.

Everything here is immutable once built (rules) or plain data (decisions), so a
RuleSet can be shared by concurrent requests and swapped atomically on reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cel import CompiledExpression
    from .mutate import Mutation


class Action(StrEnum):
    DENY = "Deny"
    WARN = "Warn"
    AUDIT = "Audit"


class Mode(StrEnum):
    """Server-wide mode: `audit` turns every Deny into Audit for safe roll-outs."""

    ENFORCE = "enforce"
    AUDIT = "audit"


class Phase(StrEnum):
    """Which half of a rule runs: the mutating webhook, the validating one, or both (offline doors)."""

    MUTATE = "mutate"
    VALIDATE = "validate"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one evaluation may cost; exceeding a limit is a rule error under the rule's failurePolicy.

    The CEL runtime has an iteration budget of its own but no cost limit, and its map()/filter()
    results grow quadratically (4,000 items: ~0.2 s for one expression). So a request gets a
    time budget, checked before every expression, and an object whose pod specs hold a list or
    map larger than `max_collection` is not handed to CEL at all.
    """

    time_budget: float | None = 0.1  # seconds of rule evaluation per request; None: unlimited
    max_collection: int = 1000  # items of the largest list or map in a target's pod specs


DEFAULT_LIMITS = Limits()


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
class Match:
    kinds: frozenset[str]
    operations: frozenset[str]
    namespaces_include: frozenset[str] | None = None
    namespaces_exclude: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    gpu: bool | None = None
    condition: CompiledExpression | None = None


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
    on_missing_context: str  # Allow | Deny: when namespaceObject is needed but unknown
    needs_namespace: bool
    source: SourceLocation
    references: frozenset[str] = frozenset()  # variables its expressions read (what to compute for it)


@dataclass(frozen=True, slots=True)
class LoadError:
    """One problem in one rule file, located as precisely as the YAML allows."""

    location: SourceLocation
    message: str
    rule: str | None = None

    def __str__(self) -> str:
        prefix = f"rule {self.rule}: " if self.rule else ""
        return f"{self.location}: {prefix}{self.message}"


@dataclass(frozen=True, slots=True)
class Target:
    """What a rule looks at inside an object: the object itself, or one pod template of it."""

    description: str  # for messages: "pod web-0", "replica Worker of PyTorchJob llama2-training"
    root: tuple[str | int, ...]  # path to the object or template ({metadata, spec})
    pod_specs: tuple[tuple[str | int, ...], ...]  # pod specs this target governs
    is_pod: bool  # a real Pod (not a template): priority and defaulting rules differ

    @property
    def metadata(self) -> tuple[str | int, ...]:
        return (*self.root, "metadata")


@dataclass(slots=True)
class Violation:
    rule: str
    action: Action
    message: str
    target: str
    relaxed: bool = False  # a Deny recorded as Audit because the server runs in audit mode


@dataclass(slots=True)
class RuleTrace:
    """Why a rule did (or did not) act on one target: the raw material of explain and audit."""

    rule: str
    target: str
    matched: bool
    reason: str = ""  # the match clause that failed, when not matched
    result: str = "skip"  # pass | fail | error | skip | mutated
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Decision:
    allowed: bool = True
    violations: list[Violation] = field(default_factory=list)  # Deny results (and errors that fail closed)
    warnings: list[Violation] = field(default_factory=list)
    audits: list[Violation] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    trace: list[RuleTrace] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # evaluation errors, whatever their policy
    mutated: dict[str, Any] | None = None  # the object after the patch, when there is one

    @property
    def denial_message(self) -> str:
        return "; ".join(f"[{v.rule}] {v.message}" for v in self.violations)
