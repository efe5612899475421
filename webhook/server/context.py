"""The engine's input for one admission request, with its cluster context.

The context is the request's Namespace, the cluster's PriorityClasses and the DRA claims, claim
templates and GPUPolicyExceptions of the namespace (the engine's ClusterContext). The server reads it from the
watch caches (webhook.kube.ClusterCaches, a `NamespaceSource`) without I/O in the usual case; a
namespace or a claim that the watch has not delivered yet is looked up once with a bounded GET,
so a namespace created a moment ago is not treated as unknown (which would switch tenant rules
off). Requests decided in the evaluation process (offload.py) get the same context as a
Snapshot sent with the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.engine import AdmissionInput, ClusterContext, ClusterSource
from webhook.review import ParsedReview


class NamespaceSource(ClusterSource, Protocol):
    """The server's cluster: `get` and `fill` answer from memory (the engine's ClusterSource); `lookup`
    and `resolve_claims` are the one I/O a request may wait for (a GET on a miss: bounded, shared,
    cached); the rest runs the watches and reports on them (/readyz, metrics)."""

    @property
    def synced(self) -> bool: ...

    async def lookup(self, name: str) -> dict[str, Any] | None: ...

    async def resolve_claims(self, admission: AdmissionInput) -> None: ...

    def detail(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The context of one namespace, as plain data: what the evaluation process is sent."""

    namespace: str
    namespace_object: dict[str, Any] | None
    cluster: ClusterContext = field(default_factory=ClusterContext)  # nothing known beyond the namespace

    def input_for(self, review: ParsedReview) -> AdmissionInput:
        return review.to_input(self.namespace_object).with_context(self.cluster)


async def _namespace_object(source: NamespaceSource, name: str) -> dict[str, Any] | None:
    found = source.get(name)
    if found is None:
        found = await source.lookup(name)  # created after the watch broke, or not delivered yet
    return found


async def admission_input(source: NamespaceSource | None, review: ParsedReview) -> AdmissionInput:
    """The input for a request decided here: namespace (GET on a miss), context, and a Pod's claims."""
    if source is None or not review.namespace:
        return review.to_input(None)
    admission = review.to_input(await _namespace_object(source, review.namespace))
    source.fill(admission)  # PriorityClasses, the namespace's DRA objects: dict reads
    if review.kind == "Pod":
        await source.resolve_claims(admission)  # the claims a pod names, GET on a miss (bounded)
    return admission


async def snapshot(source: NamespaceSource, namespace: str) -> Snapshot:
    """The context of `namespace` for a request decided in the evaluation process.

    The server does not parse large bodies, so it cannot see which claims a pod names: those
    come from the watch only (no GET on a miss), which the evaluation process says nothing
    about; the namespace itself is looked up as for any request.
    """
    scratch = AdmissionInput(object=None, namespace=namespace)
    source.fill(scratch)
    cluster = ClusterContext(
        scratch.priority_classes, scratch.resource_claims, scratch.resource_claim_templates, scratch.exceptions
    )
    return Snapshot(namespace, await _namespace_object(source, namespace), cluster)
