"""A policy object read from the cluster, as a document of the one loader, and the errors about it.

The loader locates an error by file, line and column. An object has no file: its document is named
`<Kind>/<name>` (`<Kind>/<namespace>/<name>` when namespaced) and the message carries the field path
(`spec.match.kinds[0]: ...`), which is what `kubectl apply` users and the status need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine import LoadError
from webhook.kubeyaml import Document

_METADATA_READ = ("name", "namespace", "labels", "annotations")  # what the loader's schema allows


@dataclass(frozen=True)
class PolicyObject:
    """One GPUPolicy, GPUPolicyOverlay or GPUPolicyException as the cluster stores it."""

    kind: str
    name: str
    namespace: str
    uid: str
    generation: int
    document: Document

    @property
    def label(self) -> str:
        return document_name(self.kind, self.name, self.namespace)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name


def document_name(kind: str, name: str, namespace: str = "") -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def policy_object(obj: Mapping[str, Any]) -> PolicyObject:
    """The object as the loader reads it: apiVersion, kind, spec, and the metadata the schema knows."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    kind, name, namespace = str(obj.get("kind") or ""), str(metadata.get("name") or ""), metadata.get("namespace")
    data: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": kind}
    data["metadata"] = {key: metadata[key] for key in _METADATA_READ if key in metadata}
    if "spec" in obj:
        data["spec"] = obj["spec"]
    label = document_name(kind, name, namespace or "")
    return PolicyObject(
        kind=kind,
        name=name,
        namespace=str(namespace or ""),
        uid=str(metadata.get("uid") or ""),
        generation=int(metadata.get("generation") or 0),
        document=Document(data=data, file=label, index=0),
    )


def errors_about(errors: Iterable[LoadError], label: str) -> list[LoadError]:
    return [error for error in errors if error.location.file == label]


def describe(error: LoadError) -> str:
    """An error about an object, without the line and column its document does not have."""
    prefix = f"rule {error.rule}: " if error.rule else ""
    return f"{prefix}{error.message}"


def summary(errors: Iterable[LoadError], limit: int = 10) -> str:
    """Errors for a condition message or an admission answer: one a line, at most `limit`."""
    lines = [describe(error) for error in errors]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return "\n".join(lines)
