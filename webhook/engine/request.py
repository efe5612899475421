"""What a door hands evaluate() besides the rule set: the admission, the phase, the mode, the limits.

The server makes an AdmissionInput from the AdmissionReview (webhook.review's ParsedReview.to_input);
every offline door (audit, test, explain, export) uses `AdmissionInput.offline`, the one place that
says what the apiserver would have sent. Either builds it whole, context included: it is frozen.
`priority_class_table` turns PriorityClass objects into the table `AdmissionInput.priority_classes`
holds, for the server's cache and the offline doors alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from .exceptions import PolicyException
from .kueue import by_name, is_kueue, queue_table
from .pointer import is_map


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
    time budget, checked before every expression, and an expression that would map() or filter()
    a list or map of the object larger than `max_collection` is not run (limits.py).

    The time budget is CPU time of the evaluating thread (time.thread_time), not wall-clock time:
    a pause that is not the rules' doing (CPU throttling under limits.cpu, a GC pause of the
    process, VM steal, a neighbour's load) must never turn a compliant object into a denial.
    It is sized against the apiserver's webhook timeout (5 s in our manifests, 10 s by default),
    not against the typical request (~1 ms): 0.5 s of CPU leaves a tenfold margin for a
    contended CPU while still stopping a runaway rule long before the apiserver gives up.
    """

    time_budget: float | None = 0.5  # CPU seconds of rule evaluation per request; None: unlimited
    max_collection: int = 1000  # items of the largest list or map of the object an expression maps or filters


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class AdmissionInput:
    """What any door hands the engine: the AdmissionRequest's facts, already parsed, and its context.

    The server builds it from the AdmissionReview (`from_request`, through webhook.review's
    ParsedReview.to_input); every offline door (audit, test, explain, export) uses
    `AdmissionInput.offline`, the one place that says what the apiserver would have sent, so the
    doors cannot disagree on `request`. Frozen: built once, with all it holds, and then only read.
    """

    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str = "CREATE"
    namespace: str | None = None
    namespace_object: dict[str, Any] | None = None  # None: unknown (cache not synced, or offline)
    request: dict[str, Any] = field(default_factory=dict)  # the CEL `request` variable
    kind: str | None = None
    sub_resource: str = ""
    # Cluster context beyond the namespace. None: unknown to this door.
    # PriorityClasses by name: {"value": int, "preemptionPolicy": str, "globalDefault": bool}
    # (priority_class_table() makes it from PriorityClass objects); the CEL `priorityClasses`.
    priority_classes: Mapping[str, Mapping[str, Any]] | None = None
    # DRA objects of the request's namespace by name: ResourceClaims and ResourceClaimTemplates
    # (resource.k8s.io/v1), to resolve a pod's spec.resourceClaims (resources.Accelerators.pod_claims).
    resource_claims: Mapping[str, Mapping[str, Any]] | None = None
    resource_claim_templates: Mapping[str, Mapping[str, Any]] | None = None
    # Kueue's LocalQueues of the request's namespace by name, each with its ClusterQueue's flavors
    # (kueue.queue_table); the CEL `kueueQueues`.
    kueue_queues: Mapping[str, Mapping[str, Any]] | None = None
    # Commas in the JSON text the objects were parsed from (the server: the request body), when
    # known: every collection in them has at most this many items plus one, so the collection
    # limit needs no second look at an object whose text had fewer commas than the limit.
    json_commas: int | None = None
    # GPUPolicyExceptions from the cluster (the server's watch cache, `audit --cluster`'s list); those
    # given with the rules are the RuleSet's. Only those of the object's namespace can apply.
    exceptions: tuple[PolicyException, ...] = ()
    # the instant exceptions' expiries are compared with; None: evaluate takes the current UTC time
    now: datetime | None = None
    # The door never edits namespace_object while the rule set lives (an audit's Namespaces): the
    # answers of expressions that read the namespace alone are kept for that very dict, as the server
    # keeps them per (uid, resourceVersion). Without it (or an API identity) nothing is kept.
    namespace_unchanging: bool = False

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
        kueue_queues: Mapping[str, Mapping[str, Any]] | None = None,
        cluster_objects: Iterable[Any] | None = None,
        exceptions: Iterable[PolicyException] = (),
        now: datetime | None = None,
        namespace_unchanging: bool = False,
        cluster: ClusterContext | None = None,
    ) -> AdmissionInput:
        """An admission as the apiserver would send it for `obj`, for doors that have no AdmissionRequest.

        `namespace` defaults to the object's metadata.namespace; `request` carries the same fields
        as an AdmissionRequest (kind, resource-free; name, namespace, operation, userInfo, dryRun).
        Cluster context the door has (PriorityClasses, DRA claims and templates of the namespace, its
        Kueue queues) goes in as the fields of the same names; None means "unknown", as in the server.
        Or give `cluster_objects`, the objects as read from files (PriorityClass, ResourceClaim,
        ResourceClaimTemplate, Kueue's LocalQueue, ClusterQueue and ResourceFlavor; others are
        ignored): the fields are made from them (cluster_context). And `cluster`, what a ClusterSource
        read (its `context`), replaces each of the fields it knows.
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
            kueue_queues = kueue_queues if kueue_queues is not None else found.kueue_queues
        if cluster is not None:  # what it knows wins over the objects read from files
            if cluster.priority_classes is not None:
                priority_classes = cluster.priority_classes
            if cluster.resource_claims is not None:
                resource_claims = cluster.resource_claims
            if cluster.resource_claim_templates is not None:
                resource_claim_templates = cluster.resource_claim_templates
            if cluster.kueue_queues is not None:
                kueue_queues = cluster.kueue_queues
            exceptions = cluster.exceptions or exceptions
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
            kueue_queues=kueue_queues,
            exceptions=tuple(exceptions),
            now=now,
            namespace_unchanging=namespace_unchanging,
        )

    @classmethod
    def from_request(
        cls,
        request: dict[str, Any],
        obj: dict[str, Any] | None,
        old_object: dict[str, Any] | None,
        *,
        operation: str,
        namespace: str | None,
        kind: str,
        sub_resource: str,
        namespace_object: dict[str, Any] | None = None,
        cluster: ClusterContext | None = None,
        json_commas: int | None = None,
    ) -> AdmissionInput:
        """The admission of an AdmissionRequest the apiserver sent (the server's door): `request` is
        the CEL `request` variable, the AdmissionRequest without its objects; `cluster` the context
        the server read for it (None: none), `json_commas` those of the request body."""
        cluster = NO_CLUSTER if cluster is None else cluster
        return cls(
            object=obj,
            old_object=old_object,
            operation=operation,
            namespace=namespace,
            namespace_object=namespace_object,
            request=request,
            kind=kind,
            sub_resource=sub_resource,
            priority_classes=cluster.priority_classes,
            resource_claims=cluster.resource_claims,
            resource_claim_templates=cluster.resource_claim_templates,
            kueue_queues=cluster.kueue_queues,
            json_commas=json_commas,
            exceptions=cluster.exceptions,
        )

    def with_context(self, context: ClusterContext) -> AdmissionInput:
        """A copy of this admission with the cluster's PriorityClasses, the namespace's DRA objects, Kueue
        queues and exceptions in place of its own."""
        return replace(
            self,
            priority_classes=context.priority_classes,
            resource_claims=context.resource_claims,
            resource_claim_templates=context.resource_claim_templates,
            kueue_queues=context.kueue_queues,
            exceptions=context.exceptions,
        )

    def __post_init__(self) -> None:
        if not self.request:  # built directly (tests, library users): the same request as offline()
            request = offline_request(self.subject, self.operation, self.namespace, None, False, self.kind)
            object.__setattr__(self, "request", request)  # frozen: this is still its construction

    @property
    def subject(self) -> dict[str, Any] | None:
        """The object rules look at: the new one, or on DELETE the old one."""
        return self.object if self.object is not None else self.old_object


@dataclass(frozen=True, slots=True)
class ClusterContext:
    """The cluster beyond the request's Namespace that rules read: PriorityClasses (the CEL
    `priorityClasses`), the ResourceClaims and templates of the namespace (`deviceClaims`), by
    name, and the namespace's Kueue queues (`kueueQueues`). None: unknown to the door (not listed,
    not watched, or not served by the cluster)."""

    priority_classes: Mapping[str, Mapping[str, Any]] | None = None
    resource_claims: Mapping[str, Mapping[str, Any]] | None = None
    resource_claim_templates: Mapping[str, Mapping[str, Any]] | None = None
    kueue_queues: Mapping[str, Mapping[str, Any]] | None = None
    # the cluster's GPUPolicyExceptions (any namespace: evaluate keeps those of the object's)
    exceptions: tuple[PolicyException, ...] = ()


NO_CLUSTER = ClusterContext()  # a door that knows nothing of the cluster beyond the request


class ClusterSource(Protocol):
    """Where a door reads the cluster from memory (the server's watch caches, the audit's one list):
    the Namespace by name, and the rest of a namespace's context as data. No I/O in either."""

    def get(self, name: str) -> dict[str, Any] | None: ...

    def context(self, namespace: str | None) -> ClusterContext: ...


def cluster_context(objects: Iterable[Any], namespace: str | None) -> ClusterContext:
    """The cluster context an offline door can give from objects it read: PriorityClasses (None when
    there are none: the door does not know the cluster's classes), the ResourceClaims and
    ResourceClaimTemplates (resource.k8s.io, any version) of `namespace`, by name, and the Kueue
    queues of `namespace` (None when there is no Kueue object at all)."""
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
        if not _of_namespace(obj, namespace) or not isinstance(metadata.get("name"), str):
            continue
        (claims if kind == "ResourceClaim" else templates)[metadata["name"]] = obj
    return ClusterContext(
        priority_class_table(classes) if classes else None, claims, templates, _kueue_context(objects, namespace)
    )


def _of_namespace(obj: Mapping[str, Any], namespace: str | None) -> bool:
    """Whether an object read from files is of `namespace`: one without a namespace is the door's, as
    `kubectl apply -n` gives it."""
    metadata = obj.get("metadata")
    return ((metadata.get("namespace") if is_map(metadata) else None) or namespace) == namespace


def _kueue_context(objects: list[Mapping[str, Any]], namespace: str | None) -> dict[str, dict[str, Any]] | None:
    """The `kueueQueues` of `namespace` that Kueue objects read from files give; None without any."""
    if not any(is_kueue(o) for o in objects):
        return None
    local = [o for o in objects if is_kueue(o, "LocalQueue") and _of_namespace(o, namespace)]
    return queue_table(local, by_name(objects, "ClusterQueue"), by_name(objects, "ResourceFlavor"))


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
