"""The engine's data: compiled rules going in, decisions and traces coming out.

Everything here is immutable once built (rules) or plain data (decisions), so a
RuleSet can be shared by concurrent requests and swapped atomically on reload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .pointer import is_map

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
    time budget, checked before every expression, and an object holding a list or map larger
    than `max_collection` anywhere in it (metadata too, not only its pod specs) is not handed to CEL at all.

    The time budget is CPU time of the evaluating thread (time.thread_time), not wall-clock time:
    a pause that is not the rules' doing (CPU throttling under limits.cpu, a GC pause of the
    process, VM steal, a neighbour's load) must never turn a compliant object into a denial.
    It is sized against the apiserver's webhook timeout (5 s in our manifests, 10 s by default),
    not against the typical request (~1 ms): 0.5 s of CPU leaves a tenfold margin for a
    contended CPU while still stopping a runaway rule long before the apiserver gives up.
    """

    time_budget: float | None = 0.5  # CPU seconds of rule evaluation per request; None: unlimited
    max_collection: int = 1000  # items of the largest list or map anywhere in the object as sent


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
    on_missing_context: str  # Allow | Deny: when namespaceObject is needed but unknown
    needs_namespace: bool
    source: SourceLocation
    references: frozenset[str] = frozenset()  # variables its expressions read (what to compute for it)
    # On UPDATE a Deny denies only messages the old object did not already produce, and no rule acts
    # on a target whose inputs the update left unchanged (evaluate.py, inputs.py)
    ratcheting: bool = True
    # The object fields it reads or writes (inputs.py). None: any change counts (the whole object is
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
class AdmissionInput:
    """What any door hands the engine: the AdmissionRequest's facts, already parsed.

    The server builds it from the AdmissionReview (admission.ParsedReview.to_input); every
    offline door (audit, test, explain, export) uses `AdmissionInput.offline`, the one place
    that says what the apiserver would have sent, so the doors cannot disagree on `request`.
    """

    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str = "CREATE"
    namespace: str | None = None
    namespace_object: dict[str, Any] | None = None  # None: unknown (cache not synced, or offline)
    request: dict[str, Any] = field(default_factory=dict)  # the CEL `request` variable
    kind: str | None = None
    sub_resource: str = ""
    # Cluster context beyond the namespace (i11-engine). None: unknown to this door.
    # PriorityClasses by name: {"value": int, "preemptionPolicy": str, "globalDefault": bool}
    # (priority_class_table() makes it from PriorityClass objects); the CEL `priorityClasses`.
    priority_classes: Mapping[str, Mapping[str, Any]] | None = None
    # DRA objects of the request's namespace by name: ResourceClaims and ResourceClaimTemplates
    # (resource.k8s.io/v1), to resolve a pod's spec.resourceClaims (resources.Accelerators.pod_claims).
    resource_claims: Mapping[str, Mapping[str, Any]] | None = None
    resource_claim_templates: Mapping[str, Mapping[str, Any]] | None = None
    # Commas in the JSON text the objects were parsed from (the server: the request body), when
    # known: every collection in them has at most this many items plus one, so the collection
    # limit needs no second look at an object whose text had fewer commas than the limit.
    json_commas: int | None = None

    @classmethod
    def offline(
        cls,
        obj: dict[str, Any] | None,
        *,
        operation: str = "CREATE",
        old_object: dict[str, Any] | None = None,
        namespace: str | None = None,
        namespace_object: dict[str, Any] | None = None,
        user_info: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        sub_resource: str = "",
        priority_classes: Mapping[str, Mapping[str, Any]] | None = None,
        resource_claims: Mapping[str, Mapping[str, Any]] | None = None,
        resource_claim_templates: Mapping[str, Mapping[str, Any]] | None = None,
        cluster_objects: Iterable[Any] | None = None,
    ) -> AdmissionInput:
        """An admission as the apiserver would send it for `obj`, for doors that have no AdmissionRequest.

        `namespace` defaults to the object's metadata.namespace; `request` carries the same fields
        as an AdmissionRequest (kind, resource-free; name, namespace, operation, userInfo, dryRun).
        Cluster context the door has (PriorityClasses, DRA claims and templates of the namespace)
        goes in as the fields of the same names; None means "unknown", as in the server. Or give
        `cluster_objects`, the objects as read from files (PriorityClass, ResourceClaim,
        ResourceClaimTemplate; others are ignored): the fields are made from them (cluster_context).
        """
        subject = obj if obj is not None else old_object
        if namespace is None:
            metadata = subject.get("metadata") if isinstance(subject, Mapping) else None
            found = metadata.get("namespace") if isinstance(metadata, Mapping) else None
            namespace = found if isinstance(found, str) and found else None
        request = offline_request(subject, operation, namespace, user_info, dry_run)
        if cluster_objects is not None:
            found = cluster_context(cluster_objects, namespace)
            priority_classes = priority_classes if priority_classes is not None else found.priority_classes
            resource_claims = resource_claims if resource_claims is not None else found.resource_claims
            if resource_claim_templates is None:
                resource_claim_templates = found.resource_claim_templates
        return cls(
            object=obj,
            old_object=old_object,
            operation=operation,
            namespace=namespace or None,
            namespace_object=namespace_object,
            request=request,
            kind=request["kind"]["kind"] or None,
            sub_resource=sub_resource,
            priority_classes=priority_classes,
            resource_claims=resource_claims,
            resource_claim_templates=resource_claim_templates,
        )

    def __post_init__(self) -> None:
        if not self.request:  # built directly (tests, library users): the same request as offline()
            self.request = offline_request(self.subject, self.operation, self.namespace, None, False, self.kind)

    @property
    def subject(self) -> dict[str, Any] | None:
        """The object rules look at: the new one, or on DELETE the old one."""
        return self.object if self.object is not None else self.old_object


@dataclass(frozen=True, slots=True)
class ClusterContext:
    priority_classes: dict[str, dict[str, Any]] | None
    resource_claims: dict[str, Any]
    resource_claim_templates: dict[str, Any]


def cluster_context(objects: Iterable[Any], namespace: str | None) -> ClusterContext:
    """The cluster context an offline door can give from objects it read: PriorityClasses (None when
    there are none: the door does not know the cluster's classes), and the ResourceClaims and
    ResourceClaimTemplates (resource.k8s.io, any version) of `namespace`, by name."""
    objects = [o for o in objects if isinstance(o, Mapping)]
    classes = [o for o in objects if o.get("kind") == "PriorityClass"]
    claims: dict[str, Any] = {}
    templates: dict[str, Any] = {}
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        if not str(obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
            continue
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        if (metadata.get("namespace") or namespace) != namespace or not isinstance(metadata.get("name"), str):
            continue
        (claims if kind == "ResourceClaim" else templates)[metadata["name"]] = obj
    return ClusterContext(priority_class_table(classes) if classes else None, claims, templates)


def priority_class_table(objects: Any) -> dict[str, dict[str, Any]]:
    """PriorityClass objects (scheduling.k8s.io/v1) -> the `priorityClasses` table the engine reads.

    Fields as the API defines them (k8s.io/api/scheduling/v1 PriorityClass): `value` (int32),
    `globalDefault` (bool, at most one class), `preemptionPolicy` (PreemptLowerPriority | Never,
    defaulted to PreemptLowerPriority). Anything that is not a PriorityClass is skipped.
    """
    table: dict[str, dict[str, Any]] = {}
    for obj in objects or ():
        if not isinstance(obj, Mapping) or obj.get("kind", "PriorityClass") != "PriorityClass":
            continue
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            continue
        value = obj.get("value", 0)
        table[name] = {
            "value": value if isinstance(value, int) and not isinstance(value, bool) else 0,
            "globalDefault": obj.get("globalDefault") is True,
            "preemptionPolicy": str(obj.get("preemptionPolicy") or "PreemptLowerPriority"),
        }
    return table


def default_priority_class(table: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    """The class the Priority admission plugin writes into pods that name none (globalDefault: true)."""
    for name, entry in (table or {}).items():
        if entry.get("globalDefault") is True:
            return name
    return None


def offline_request(
    subject: Mapping[str, Any] | None,
    operation: str,
    namespace: str | None,
    user_info: Mapping[str, Any] | None,
    dry_run: bool,
    kind: str | None = None,
) -> dict[str, Any]:
    """The CEL `request` an apiserver would send for `subject`: the fields of an AdmissionRequest."""
    subject = subject if is_map(subject) else {}
    found = subject.get("metadata")
    metadata: Mapping[str, Any] = found if is_map(found) else {}
    group, _, version = str(subject.get("apiVersion", "")).rpartition("/")
    return {
        "uid": "",
        "kind": {"group": group, "version": version, "kind": kind or str(subject.get("kind", ""))},
        "name": str(metadata.get("name") or ""),
        "namespace": namespace or "",
        "operation": operation,
        "userInfo": dict(user_info or {}),
        "dryRun": dry_run,
    }


@dataclass(slots=True)
class Violation:
    rule: str
    action: Action
    message: str
    target: str
    relaxed: bool = False  # a Deny recorded as Audit because the server runs in audit mode
    error: bool = False  # made by an evaluation error under failurePolicy Fail (or missing context, Deny)


@dataclass(frozen=True, slots=True)
class EvaluationError:
    """A rule that could not be evaluated on one target, whatever its failurePolicy made of it."""

    rule: str
    target: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.target}: {self.message}"


class RuleError(Exception):
    """A rule failed to evaluate on one target; its failurePolicy decides what that means."""


class Result(StrEnum):
    """What one rule made of one object, all targets folded: the one vocabulary of every door."""

    FAIL = "fail"  # a Deny rule's validation failed (the request is denied; in audit mode: would be)
    ERROR = "error"  # the rule could not be evaluated; `blocks` says whether failurePolicy denied
    WARN = "warn"
    AUDIT = "audit"
    # matched, and validated or mutated without complaint (B105: a result's name, not a password)
    PASS = "pass"  # nosec B105
    SKIP = "skip"  # did not match, or was not evaluated (`reason` says which)


# worst first: how a rule's targets fold into one result, and how objects sort in reports
SEVERITY: dict[Result, int] = {r: i for i, r in enumerate(Result)}
NO_NAMESPACE_CONTEXT = "not evaluated: no namespace context"


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """One rule on one object: the summary every door reports (audit, test, explain, metrics)."""

    rule: str
    result: Result
    messages: tuple[str, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()  # the operations this rule contributed
    blocks: bool = False  # this rule makes the request denied (a Deny failure, or an error under Fail)
    relaxed: bool = False  # a Deny failure turned into Audit by the server's audit mode (would deny)
    reason: str = ""  # why a skipped rule did not act (NO_NAMESPACE_CONTEXT, the match clause that failed)

    @property
    def patched(self) -> bool:
        return bool(self.patch)

    @property
    def message(self) -> str:
        return "; ".join(self.messages)

    @property
    def context_missing(self) -> bool:
        return self.reason == NO_NAMESPACE_CONTEXT

    @property
    def plain(self) -> bool:
        """Nothing of its own to say (no messages, patch, block or relaxation): its rule, result and
        reason are all of it, and shared_outcome serves one instance for every object."""
        return not (self.messages or self.patch or self.blocks or self.relaxed)


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
    errors: list[EvaluationError] = field(default_factory=list)  # evaluation errors, whatever their policy
    mutated: dict[str, Any] | None = None  # the object after the patch, when there is one
    # Accelerators the object asks for, as received (before any patch): extended resources plus
    # resolved DRA claims' devices, the scheduler's arithmetic, summed over its pod specs
    # (resources.Accelerators.pod_count). Audit counts GPUs with it; counted once, by the engine.
    accelerators: int = 0

    @property
    def denial_message(self) -> str:
        return "; ".join(f"[{v.rule}] {v.message}" for v in self.violations)

    def outcomes(self) -> list[RuleOutcome]:
        """One outcome per rule the engine considered, in rule order: THE summary of a decision.

        With `trace=True` (offline doors) every candidate rule appears, passes and skips included;
        without a trace (the server's hot path) only rules that failed, warned, audited or errored.
        An error is an error: a rule that could not be evaluated is `error` (with `blocks` when its
        failurePolicy denied), never a failure plus an error.
        """
        # One pass over the trace (every candidate rule, in order), then the few findings
        # (errors, violations) when there are any. A rule that passed or was skipped without
        # anything of its own (messages, patch) gets a shared outcome: they are immutable, and
        # building ~30 of them per object was most of the cost of this summary offline.
        order: dict[str, str | None] = {}  # rule -> the reason it did not match; None once it matched
        patches: dict[str, list[dict[str, Any]]] = {}
        for entry in self.trace:
            rule = entry.rule
            if entry.matched:
                order[rule] = None
                if entry.patch:
                    found = patches.get(rule)
                    if found is None:
                        patches[rule] = list(entry.patch)
                    else:
                        found.extend(entry.patch)
            elif order.get(rule, "") == "":  # not matched so far and no reason yet
                order[rule] = entry.reason
        findings = self._findings(order) if self.errors or self.violations or self.warnings or self.audits else None
        shared = _SHARED.get  # the lookup shared_outcome makes, inline: this loop runs for every rule
        summary = [
            _quiet(rule, None, patches[rule])
            if rule in patches
            else shared(key := (rule, _PASS, "") if reason is None else (rule, _SKIP, reason)) or shared_outcome(*key)
            for rule, reason in order.items()
        ]
        if findings is None:
            return summary
        # the few rules with findings: their outcome replaces what the trace alone said
        results, messages, blocks, relaxed = findings
        for index, rule in enumerate(order):
            result = results.get(rule)
            if result is None:
                continue
            said = messages.get(rule)
            if said is None and rule not in blocks and rule not in relaxed:
                summary[index] = _quiet(rule, order[rule], patches.get(rule), result)
                continue
            summary[index] = RuleOutcome(  # a finding (never skip: no reason to give)
                rule=rule,
                result=result,
                messages=tuple(said or ()),
                patch=tuple(patches.get(rule, ())),
                blocks=rule in blocks,
                relaxed=rule in relaxed,
            )
        return summary

    def _findings(
        self, order: dict[str, str | None]
    ) -> tuple[dict[str, Result], dict[str, list[str]], set[str], set[str]]:
        """Per rule, from the errors and violations: its worst result, its messages (each once, errors
        first), whether it blocks, whether it was relaxed. Rules met only here join `order`."""
        results: dict[str, Result] = {}
        messages: dict[str, list[str]] = {}
        blocks: set[str] = set()
        relaxed: set[str] = set()

        def worsen(rule: str, result: Result, message: str = "") -> None:
            order.setdefault(rule, "")
            if rule not in results or SEVERITY[result] < SEVERITY[results[rule]]:
                results[rule] = result
            if message and message not in messages.setdefault(rule, []):
                messages[rule].append(message)

        for error in self.errors:
            worsen(error.rule, Result.ERROR, error.message)
        for bucket in (self.violations, self.warnings, self.audits):
            for violation in bucket:
                if violation.action == Action.DENY:
                    blocks.add(violation.rule)
                if violation.relaxed:
                    relaxed.add(violation.rule)
                if violation.error:
                    if violation.rule not in results:  # missing context under onMissingContext: Deny
                        worsen(violation.rule, Result.ERROR, violation.message)
                    continue
                worsen(violation.rule, _ACTION_RESULT[violation.action], violation.message)
        return results, messages, blocks, relaxed


_PASS, _SKIP = Result.PASS, Result.SKIP
_SHARED: dict[tuple[str, Result, str], RuleOutcome] = {}
_SHARED_LIMIT = 1 << 12  # distinct shared outcomes kept (rules x results x reasons); cleared when full


def shared_outcome(rule: str, result: Result, reason: str = "") -> RuleOutcome:
    """RuleOutcome(rule, result, reason=reason) for a rule with nothing of its own to say (no messages,
    patch, block or relaxation): immutable, so one instance serves every object (most rules, offline)."""
    key = (rule, result, reason)
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        found = _SHARED[key] = RuleOutcome(rule, result, reason=reason)
    return found


def _quiet(
    rule: str, reason: str | None, patch: list[dict[str, Any]] | None, result: Result | None = None
) -> RuleOutcome:
    """The outcome of a rule without messages or a block: a finding's `result`, or else as the trace
    says, pass (matched: reason None) or skip (with the reason)."""
    if result is None:
        result = Result.PASS if reason is None else Result.SKIP
    if patch:
        return RuleOutcome(rule, result, patch=tuple(patch))
    return shared_outcome(rule, result, (reason or "") if result is Result.SKIP else "")


_ACTION_RESULT = {Action.DENY: Result.FAIL, Action.WARN: Result.WARN, Action.AUDIT: Result.AUDIT}
