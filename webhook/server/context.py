"""The engine's input for one admission request, with its cluster context.

The context is the request's Namespace, the cluster's PriorityClasses and the DRA claims and
claim templates of the namespace. The server reads it from the watch caches
(webhook.kube.ClusterContext) without I/O in the usual case; a namespace or a claim that the
watch has not delivered yet is looked up once with a bounded GET, so a namespace created a
moment ago is not treated as unknown (which would switch tenant rules off). Requests decided in
the evaluation process (webhook.server.offload) get the same context as a Snapshot sent with the body.

Sources are read through getattr: a source that has only `get(name)` (tests, simple set-ups)
gives the namespace and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine import AdmissionInput
from webhook.server.admission import ParsedReview


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The context of one namespace, as plain data: what the evaluation process is sent."""

    namespace: str
    namespace_object: dict[str, Any] | None
    priority_classes: Mapping[str, Mapping[str, Any]] | None = None
    resource_claims: Mapping[str, Mapping[str, Any]] | None = None
    resource_claim_templates: Mapping[str, Mapping[str, Any]] | None = None

    def input_for(self, review: ParsedReview) -> AdmissionInput:
        admission = review.to_input(self.namespace_object)
        admission.priority_classes = self.priority_classes
        admission.resource_claims = self.resource_claims
        admission.resource_claim_templates = self.resource_claim_templates
        return admission


async def _namespace_object(source: Any, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = source.get(name)
    lookup = getattr(source, "lookup", None)
    if found is None and lookup is not None:
        found = await lookup(name)  # created after the watch broke, or not delivered yet
    return found


def _fill(source: Any, admission: AdmissionInput) -> None:
    fill = getattr(source, "fill", None)
    if fill is not None:
        fill(admission)  # PriorityClasses, the namespace's DRA objects: dict reads


async def admission_input(source: Any | None, review: ParsedReview) -> AdmissionInput:
    """The input for a request decided here: namespace (GET on a miss), context, and a Pod's claims."""
    if source is None or not review.namespace:
        return review.to_input(None)
    admission = review.to_input(await _namespace_object(source, review.namespace))
    _fill(source, admission)
    resolve = getattr(source, "resolve_claims", None)
    if resolve is not None and review.kind == "Pod":
        await resolve(admission)  # the claims a pod names, GET on a miss (bounded)
    return admission


async def snapshot(source: Any, namespace: str) -> Snapshot:
    """The context of `namespace` for a request decided in the evaluation process.

    The server does not parse large bodies, so it cannot see which claims a pod names: those
    come from the watch only (no GET on a miss), which the evaluation process says nothing
    about; the namespace itself is looked up as for any request.
    """
    scratch = AdmissionInput(object=None, namespace=namespace)
    _fill(source, scratch)
    return Snapshot(
        namespace,
        await _namespace_object(source, namespace),
        scratch.priority_classes,
        scratch.resource_claims,
        scratch.resource_claim_templates,
    )
