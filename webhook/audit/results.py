"""From engine decisions to audit results: per object, per rule, and counted per rule and namespace.

`audit()` runs the same `engine.evaluate` as the server (CREATE, both phases) on each
object of a stream and yields one ObjectResult at a time. `Tally` is the running count
that every report and the server's audit-mode metrics can share: it keeps counters,
never objects, so it is as small for 100k objects as for ten.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.engine import Action, AdmissionInput, Decision, Mode, Phase, RuleSet, evaluate
from webhook.engine.workloads import get_path, object_target

from .sources import Item

# Outcome of one rule on one object, worst first: a Deny failure, a Warn, an Audit, an evaluation
# error that its failurePolicy let through, and pass (which includes "fixed by a mutation").
FAIL, WARN, AUDIT, ERROR, PASS = "fail", "warn", "audit", "error", "pass"
SEVERITY_ORDER = {FAIL: 0, WARN: 1, AUDIT: 2, ERROR: 3, PASS: 4}
_ACTION_RESULT = {Action.DENY: FAIL, Action.WARN: WARN, Action.AUDIT: AUDIT}

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or metadata.get("generateName") or "<unnamed>"),
            uid=str(metadata.get("uid") or ""),
        )

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(slots=True)
class RuleOutcome:
    """What one rule made of one object, all of its targets (pod templates) folded together."""

    rule: str
    result: str  # fail | warn | audit | error | pass
    messages: list[str] = field(default_factory=list)
    patched: bool = False  # the rule's mutation would change the object

    @property
    def message(self) -> str:
        return "; ".join(self.messages)


@dataclass(slots=True)
class ObjectResult:
    ref: ObjectRef
    origin: str
    gpus: int
    outcomes: list[RuleOutcome]  # one per rule that matched (or denied for missing context)
    patch: list[dict[str, Any]]
    original: dict[str, Any]
    mutated: dict[str, Any] | None

    @property
    def worst(self) -> str:
        return min((o.result for o in self.outcomes), key=SEVERITY_ORDER.__getitem__, default=PASS)

    @property
    def findings(self) -> list[RuleOutcome]:
        return [o for o in self.outcomes if o.result != PASS]

    def diff(self) -> str:
        """The patch as a unified diff of the object's YAML: what a reviewer wants to read."""
        if self.mutated is None:
            return ""
        before = yaml.dump(self.original, Dumper=_Dumper, sort_keys=False).splitlines(keepends=True)
        after = yaml.dump(self.mutated, Dumper=_Dumper, sort_keys=False).splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, "submitted", "after mutation", n=2))


def outcomes(decision: Decision) -> list[RuleOutcome]:
    """Fold a traced Decision into one outcome per rule (needs `trace=True` to see passes)."""
    by_rule: dict[str, RuleOutcome] = {}
    for entry in decision.trace:
        if not entry.matched:
            continue
        outcome = by_rule.setdefault(entry.rule, RuleOutcome(entry.rule, PASS))
        outcome.patched = outcome.patched or bool(entry.patch)
        if entry.result == "error":
            _worsen(outcome, ERROR, entry.message)
    # Violations carry the action after the mode was applied; they win over a traced error.
    for violation in (*decision.violations, *decision.warnings, *decision.audits):
        outcome = by_rule.setdefault(violation.rule, RuleOutcome(violation.rule, PASS))
        _worsen(outcome, _ACTION_RESULT[violation.action], violation.message)
    return list(by_rule.values())


def _worsen(outcome: RuleOutcome, result: str, message: str) -> None:
    if result == ERROR and outcome.result != PASS:
        return  # the error already shows as the violation its failurePolicy made of it
    if SEVERITY_ORDER[result] < SEVERITY_ORDER[outcome.result]:
        outcome.result = result
    if message and message not in outcome.messages:
        outcome.messages.append(message)


def audit(
    ruleset: RuleSet,
    items: Iterable[Item],
    namespaces: Mapping[str, Mapping[str, Any]] | None = None,
    mode: Mode = Mode.ENFORCE,
) -> Iterator[ObjectResult]:
    """Evaluate each object as a CREATE with the server's engine, one at a time."""
    namespaces = namespaces or {}
    accelerators = ruleset.accelerators
    for item in items:
        obj = item.object
        ref = ObjectRef.of(obj)
        namespace_object = namespaces.get(ref.namespace) if ref.namespace else None
        decision = evaluate(
            ruleset,
            AdmissionInput.offline(
                obj, namespace_object=dict(namespace_object) if namespace_object is not None else None
            ),
            phase=Phase.ALL,
            mode=mode,
            trace=True,
        )
        gpus = sum(accelerators.pod_count(get_path(obj, path)) for path in object_target(obj).pod_specs)
        yield ObjectResult(
            ref=ref,
            origin=item.origin,
            gpus=gpus,
            outcomes=outcomes(decision),
            patch=decision.patch,
            original=obj,
            mutated=decision.mutated,
        )


@dataclass(slots=True)
class RuleCount:
    """Objects per result for one rule, and the GPUs those objects ask for."""

    results: Counter[str] = field(default_factory=Counter)
    patched: int = 0
    gpus_affected: int = 0  # GPUs requested by objects this rule failed, warned or audited


@dataclass(slots=True)
class Tally:
    """Running counts over a whole audit; bounded by rules and namespaces, not by objects."""

    objects: int = 0
    objects_by_worst: Counter[str] = field(default_factory=Counter)
    patched_objects: int = 0
    gpus: int = 0
    gpus_affected: int = 0
    rules: dict[str, RuleCount] = field(default_factory=dict)
    namespaces: dict[str, Counter[str]] = field(default_factory=dict)  # namespace -> result -> objects
    namespace_gpus_affected: Counter[str] = field(default_factory=Counter)

    def add(self, result: ObjectResult) -> None:
        worst = result.worst
        self.objects += 1
        self.objects_by_worst[worst] += 1
        self.gpus += result.gpus
        if result.patch:
            self.patched_objects += 1
        namespace = result.ref.namespace or "(cluster)"
        self.namespaces.setdefault(namespace, Counter())[worst] += 1
        if worst != PASS:
            self.gpus_affected += result.gpus
            self.namespace_gpus_affected[namespace] += result.gpus
        for outcome in result.outcomes:
            count = self.rules.setdefault(outcome.rule, RuleCount())
            count.results[outcome.result] += 1
            count.patched += outcome.patched
            if outcome.result != PASS:
                count.gpus_affected += result.gpus

    def failed(self, fail_on: str = "deny") -> bool:
        """Whether the audit should exit 1: any Deny failure, or with fail_on=warn any Warn too."""
        bad = {FAIL} if fail_on == "deny" else {FAIL, WARN}
        return any(self.objects_by_worst[result] for result in bad) or any(
            count.results[result] for count in self.rules.values() for result in bad
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "byResult": {r: self.objects_by_worst[r] for r in SEVERITY_ORDER},
            "patchedObjects": self.patched_objects,
            "gpus": self.gpus,
            "gpusAffected": self.gpus_affected,
            "rules": {
                name: {
                    **{r: count.results[r] for r in SEVERITY_ORDER},
                    "patched": count.patched,
                    "gpusAffected": count.gpus_affected,
                }
                for name, count in sorted(self.rules.items())
            },
            "namespaces": {
                name: {
                    **{r: counts[r] for r in SEVERITY_ORDER},
                    "gpusAffected": self.namespace_gpus_affected[name],
                }
                for name, counts in sorted(self.namespaces.items())
            },
        }
