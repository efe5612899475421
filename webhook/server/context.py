"""The cluster context of one admission request, read as data: a Snapshot.

The context is the request's Namespace, the cluster's PriorityClasses and the DRA claims, claim
templates and GPUPolicyExceptions of the namespace (the engine's ClusterContext). The server reads it from the
watch caches (webhook.kube.ClusterCaches, a `NamespaceSource`) without I/O in the usual case; a
namespace or a claim that the watch has not delivered yet is looked up once with a bounded GET,
so a namespace created a moment ago is not treated as unknown (which would switch tenant rules
off). Requests decided in the evaluation process (offload.py) are sent the same Snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.engine import ClusterContext, ClusterSource
from webhook.review import ParsedReview


class NamespaceSource(ClusterSource, Protocol):
    """The server's cluster: `get` and `context` answer from memory (the engine's ClusterSource); `lookup`
    and `resolve_claims` are the one I/O a request may wait for (a GET on a miss: bounded, shared,
    cached); the rest runs the watches and reports on them (/readyz, metrics)."""

    @property
    def synced(self) -> bool: ...

    def synced_for(self, references: frozenset[str]) -> bool:
        """Whether every cache the rules read (their CEL variables) has listed once."""
        ...

    async def lookup(self, name: str) -> dict[str, Any] | None: ...

    async def resolve_claims(self, namespace: str, pod: Any) -> None: ...

    def detail(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The context of one namespace, as plain data: what a request is decided with, here or in the
    evaluation process."""

    namespace: str
    namespace_object: dict[str, Any] | None
    cluster: ClusterContext = field(default_factory=ClusterContext)  # nothing known beyond the namespace


UNKNOWN = Snapshot("", None)  # no cluster, or a cluster-scoped request: nothing known beyond the request


async def _namespace_object(source: NamespaceSource, name: str) -> dict[str, Any] | None:
    found = source.get(name)
    if found is None:
        found = await source.lookup(name)  # created after the watch broke, or not delivered yet
    return found


async def request_snapshot(source: NamespaceSource | None, review: ParsedReview) -> Snapshot:
    """The context of a request decided here: namespace (GET on a miss), context, and a Pod's claims."""
    if source is None or not review.namespace:
        return UNKNOWN
    namespace_object = await _namespace_object(source, review.namespace)
    if review.kind == "Pod":
        await source.resolve_claims(review.namespace, review.object)  # the claims it names, GET on a miss (bounded)
    return Snapshot(review.namespace, namespace_object, source.context(review.namespace))


async def snapshot(source: NamespaceSource, namespace: str) -> Snapshot:
    """The context of `namespace` for a request decided in the evaluation process.

    The server does not parse large bodies, so it cannot see which claims a pod names: those
    come from the watch only (no GET on a miss), which the evaluation process says nothing
    about; the namespace itself is looked up as for any request.
    """
    cluster = source.context(namespace)
    return Snapshot(namespace, await _namespace_object(source, namespace), cluster)
