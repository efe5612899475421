"""From engine decisions to audit results: per object, per rule, and counted per rule and namespace.

`audit()` runs the same `engine.evaluate` as the server (CREATE, both phases) on each
object of a stream and yields one ObjectResult at a time. The per-rule results are the
engine's own `Decision.outcomes()`: this module only chooses which of them a report shows
and counts them. `Tally` keeps counters, never objects, so it is as small for 100k objects
as for ten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from webhook.engine import (
    NO_NAMESPACE_CONTEXT,
    SEVERITY,
    Limits,
    Mode,
    Phase,
    Result,
    RuleOutcome,
    RuleSet,
    evaluate,
    is_map,
)
from webhook.kubeyaml import plain_yaml_pair

from .context import NamespaceContext
from .linediff import unified_diff
from .sources import Item

# what a report counts, worst first (Result's own order); `skip` only counts rules that were
# not evaluated for want of namespace context, never rules that simply did not match
RESULTS: tuple[Result, ...] = tuple(Result)
_PASS_RANK = SEVERITY[Result.PASS]
# the worst of PASS and the outcomes' results: an object is `pass` when its rules passed or were skipped
_BY_RANK = [min(result, Result.PASS, key=SEVERITY.__getitem__) for result in sorted(SEVERITY, key=SEVERITY.__getitem__)]
_RESULT, _BLOCKS, _REASON = attrgetter("result"), attrgetter("blocks"), attrgetter("reason")
_RULE, _PATCH = attrgetter("rule"), attrgetter("patch")
Signature = tuple[tuple[str, ...], tuple[Result, ...], tuple[bool, ...] | None]
_SIGNATURES = 1 << 12  # distinct sequences of outcomes kept before they are folded into counts per rule

# The server's per-request time budget guards it against costly objects; offline, a report must
# not depend on how busy the machine is (a loaded CI runner turned passes into errors), so audit
# keeps the collection limit and drops the clock.
AUDIT_LIMITS = Limits(time_budget=None, max_collection=Limits().max_collection)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], namespace: str | None = None) -> ObjectRef:
        given = obj.get("metadata")
        metadata = given if is_map(given) else {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            namespace=str(namespace or metadata.get("namespace") or ""),
            name=str(metadata.get("name") or metadata.get("generateName") or "<unnamed>"),
            uid=str(metadata.get("uid") or ""),
        )

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def text(outcome: RuleOutcome) -> str:
    """What a report says about one rule: its messages, or why it was not evaluated."""
    return outcome.message or (outcome.reason if outcome.result in _REASONED else "")


_SKIP = Result.SKIP
_REASONED = (Result.SKIP, Result.EXCEPTED)  # results whose reason is what there is to say ("excepted by ...")


@dataclass(slots=True)
class ObjectResult:
    ref: ObjectRef
    origin: str
    gpus: int
    outcomes: list[RuleOutcome]  # the engine's, for every rule that matched or lacked namespace context
    patch: list[dict[str, Any]]
    original: dict[str, Any]
    mutated: dict[str, Any] | None
    rendered_diff: str | None = None  # set by --jobs workers, which send results without the objects
    # the object's result (its worst rule; `skip` only when nothing matched but rules lacked context),
    # whether the apiserver would refuse it (a Deny failure, or an error under failurePolicy Fail),
    # and whether a rule was not evaluated: folded from the outcomes once, read by tally and reports
    worst: Result = field(init=False)
    blocked: bool = field(init=False)
    incomplete: bool = field(init=False)

    def __post_init__(self) -> None:
        # folded by C iterators (min, any, `in`) rather than a Python loop over the outcomes
        outcomes = self.outcomes
        self.worst = _BY_RANK[min(map(SEVERITY.__getitem__, map(_RESULT, outcomes)), default=_PASS_RANK)]
        self.blocked = any(map(_BLOCKS, outcomes))
        self.incomplete = NO_NAMESPACE_CONTEXT in map(_REASON, outcomes)

    @property
    def findings(self) -> list[RuleOutcome]:
        """What a reader must look at: failures, errors, warnings and audits (rules not evaluated are
        folded: once per rule per run, see NotEvaluated)."""
        return [o for o in self.outcomes if o.result is not Result.PASS and o.result is not _SKIP]

    @property
    def not_evaluated(self) -> tuple[str, ...]:
        """The rules not evaluated for want of namespace context (the only skips audit() keeps)."""
        return tuple(o.rule for o in self.outcomes if o.result is _SKIP)

    def diff(self) -> str:
        """The patch as a unified diff of the object's YAML: what a reviewer wants to read."""
        if self.rendered_diff is not None:
            return self.rendered_diff
        if self.mutated is None:
            return ""
        before, after = plain_yaml_pair(self.original, self.mutated)
        return unified_diff(before, after, "submitted", "after mutation", 2)


def audit(
    ruleset: RuleSet,
    items: Iterable[Item],
    context: NamespaceContext | None = None,
    mode: Mode = Mode.ENFORCE,
    diffs: bool = True,
) -> Iterator[ObjectResult]:
    """Evaluate each object as a CREATE with the server's engine, one at a time.

    `context` supplies the namespace of namespace-less manifests and the Namespace objects
    (from --namespace-objects, the input itself, or the cluster); Namespace objects met in
    `items` become context for what follows and are not audited themselves. Without `diffs`
    (--no-diff) no report shows a diff: rendering one is most of the cost of a patched object.
    """
    context = context if context is not None else NamespaceContext()
    take, admission_of, rendered = context.take, context.admission, None if diffs else ""
    for item in items:
        given = item.object
        if take(given):
            continue
        admission = admission_of(given)
        decision = evaluate(ruleset, admission, Phase.ALL, mode, True, AUDIT_LIMITS)
        yield ObjectResult(
            ObjectRef.of(given, admission.namespace),
            item.origin,
            decision.accelerators,
            # what a report shows: every outcome but a rule that did not match (inline: one per rule and object)
            [o for o in decision.outcomes() if o.result is not _SKIP or o.reason == NO_NAMESPACE_CONTEXT],
            decision.patch,
            admission.object or given,
            decision.mutated,
            rendered,
        )


@dataclass(slots=True)
class RuleCount:
    """Objects per result for one rule, and the GPUs those objects ask for."""

    results: Counter[str] = field(default_factory=Counter)
    patched: int = 0
    gpus_affected: int = 0  # GPUs requested by objects this rule failed, errored, warned or audited


@dataclass(slots=True)
class Tally:
    """Running counts over a whole audit; bounded by rules and namespaces, not by objects."""

    objects: int = 0
    objects_by_worst: Counter[str] = field(default_factory=Counter)
    blocked_objects: int = 0  # the apiserver would refuse them (Deny failures and errors under Fail)
    patched_objects: int = 0
    skipped_objects: int = 0  # objects with at least one rule not evaluated (no namespace context)
    namespaces_without_context: set[str] = field(default_factory=set)  # where those objects are
    problems: int = 0  # inputs that could not be read (each reported as an entry of its own)
    gpus: int = 0
    gpus_affected: int = 0
    namespaces: dict[str, Counter[str]] = field(default_factory=dict)  # namespace -> result -> objects
    namespace_gpus_affected: Counter[str] = field(default_factory=Counter)
    # per rule: objects counted by the sequence of their (rule, result) pairs (and which rules patched), one dict
    # update per object, folded into (rule, result) -> objects when a report reads `rules` (or when
    # there are many sequences: memory stays bounded)
    # (the rules, their results, which patched or None): a count in a one-item list, so that an object
    # already seen hashes its key once
    signatures: dict[Signature, list[int]] = field(default_factory=dict)
    rule_results: Counter[tuple[str, Result]] = field(default_factory=Counter)
    rule_patched: Counter[str] = field(default_factory=Counter)
    rule_gpus_affected: Counter[str] = field(default_factory=Counter)
    live: bool = False  # a live cluster's audit: namespace context comes from its API, not the input

    def add(self, result: ObjectResult) -> None:
        worst = result.worst
        gpus = result.gpus
        self.objects += 1
        self.objects_by_worst[worst] += 1
        self.gpus += gpus
        self.blocked_objects += result.blocked
        namespace = result.ref.namespace or "(cluster)"
        if result.incomplete:
            self.skipped_objects += 1
            self.namespaces_without_context.add(namespace)
        counts = self.namespaces.get(namespace)
        if counts is None:  # not setdefault(namespace, Counter()): that builds a Counter per object
            counts = self.namespaces[namespace] = Counter()
        counts[worst] += 1
        outcomes = result.outcomes
        patched = None
        if result.patch:
            self.patched_objects += 1
            patched = tuple(map(bool, map(_PATCH, outcomes)))
        signature = (tuple(map(_RULE, outcomes)), tuple(map(_RESULT, outcomes)), patched)
        signatures = self.signatures
        count = signatures.get(signature)
        if count is not None:
            count[0] += 1
        else:
            signatures[signature] = [1]
        if len(signatures) > _SIGNATURES:
            self.fold()
        if worst is not Result.PASS and worst is not Result.SKIP:
            self.gpus_affected += gpus
            self.namespace_gpus_affected[namespace] += gpus
            if gpus:  # GPUs of the objects each rule failed, errored, warned or audited
                for outcome in outcomes:
                    if outcome.result is not Result.PASS and outcome.result is not Result.SKIP:
                        self.rule_gpus_affected[outcome.rule] += gpus

    def merge(self, other: Tally) -> None:
        """Add the counts of another audit's tally (an `audit --jobs` worker's, for one file): the
        same counts as adding its objects here. Not their first-seen order of rules, which
        `rules` follows: only reports that sort it (as_dict) take merged tallies."""
        self.objects += other.objects
        self.objects_by_worst.update(other.objects_by_worst)
        self.blocked_objects += other.blocked_objects
        self.patched_objects += other.patched_objects
        self.skipped_objects += other.skipped_objects
        self.namespaces_without_context.update(other.namespaces_without_context)
        self.problems += other.problems
        self.gpus += other.gpus
        self.gpus_affected += other.gpus_affected
        for namespace, counts in other.namespaces.items():
            mine = self.namespaces.get(namespace)
            if mine is None:
                self.namespaces[namespace] = Counter(counts)
            else:
                mine.update(counts)
        self.namespace_gpus_affected.update(other.namespace_gpus_affected)
        other.fold()
        self.rule_results.update(other.rule_results)
        self.rule_patched.update(other.rule_patched)
        self.rule_gpus_affected.update(other.rule_gpus_affected)

    def fold(self) -> None:
        """Move the counts per sequence of outcomes into the counts per rule."""
        for (names, results, patched), (objects,) in self.signatures.items():
            for pair in zip(names, results, strict=True):
                self.rule_results[pair] += objects
            if patched is not None:
                for name, edited in zip(names, patched, strict=True):
                    if edited:
                        self.rule_patched[name] += objects
        self.signatures.clear()

    @property
    def rules(self) -> dict[str, RuleCount]:
        """Counts per rule (every rule with an outcome in the report), in first-seen order."""
        self.fold()
        rules: dict[str, RuleCount] = {}
        for (name, outcome), objects in self.rule_results.items():
            count = rules.get(name)
            if count is None:
                count = rules[name] = RuleCount(patched=self.rule_patched[name])
                count.gpus_affected = self.rule_gpus_affected[name]
            count.results[outcome] = objects
        return rules

    def failed(self, fail_on: str = "deny") -> bool:
        """Whether the audit should exit 1: anything the apiserver would refuse, or with fail_on=warn a Warn."""
        if fail_on == "never":
            return False
        return bool(self.blocked_objects) or (fail_on == "warn" and bool(self.objects_by_worst[Result.WARN]))

    def as_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "byResult": {r.value: self.objects_by_worst[r] for r in RESULTS},
            "blockedObjects": self.blocked_objects,
            "patchedObjects": self.patched_objects,
            "objectsWithRulesNotEvaluated": self.skipped_objects,
            "inputProblems": self.problems,
            "gpus": self.gpus,
            "gpusAffected": self.gpus_affected,
            "rules": {
                name: {
                    **{r.value: count.results[r] for r in RESULTS},
                    "patched": count.patched,
                    "gpusAffected": count.gpus_affected,
                }
                for name, count in sorted(self.rules.items())
            },
            "namespaces": {
                name: {
                    **{r.value: counts[r] for r in RESULTS},
                    "gpusAffected": self.namespace_gpus_affected[name],
                }
                for name, counts in sorted(self.namespaces.items())
            },
            "notEvaluated": [
                {"rule": rule, "objects": objects, "reason": folded.reason, "fix": folded.fix}
                for folded in [self.not_evaluated()]
                if folded is not None
                for rule, objects in folded.rules
            ],
        }

    def not_evaluated(self) -> NotEvaluated | None:
        """The rules that could not be evaluated for want of namespace context, once each with
        their count, the reason and the fix (None when every rule had its context)."""
        rules = [(name, count.results[_SKIP]) for name, count in sorted(self.rules.items()) if count.results[_SKIP]]
        if not rules:
            return None
        names = sorted(self.namespaces_without_context)
        listed = " ".join(names[:_NAMED])
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        if self.live:
            fix = "let the audit's account list and get namespaces, so that it reads their Namespace objects"
        else:
            fix = (
                "add the Namespace objects to the input or pass --namespace-objects FILE "
                f"(e.g. `kubectl get namespace {listed} -o yaml > namespaces.yaml`)"
            )
        return NotEvaluated(
            rules, f"{NO_NAMESPACE_CONTEXT}: no Namespace object for {', '.join(names[:_NAMED])}{more}", fix
        )


_NAMED = 5  # namespaces a reason names before "and N more"


@dataclass(frozen=True, slots=True)
class NotEvaluated:
    """Rules not evaluated for want of namespace context, folded: each once per run, with the
    objects it could not judge, and the one reason and fix they share. Every format reports it so;
    PolicyReport also keeps one `skip` result per rule and object (its schema asks for them)."""

    rules: list[tuple[str, int]]  # (rule, objects), by rule name
    reason: str
    fix: str
