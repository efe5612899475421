"""What an offline door knows about namespaces, and the one way it turns an object into admission input.

`kubectl apply -n NS` (or the current context's namespace, `default` when none) sets the
namespace of a namespaced object that has none, and the apiserver writes it into the object
before admission; `helm template` output has no namespaces at all. Audit and explain both go
through `NamespaceContext.admission`, so they see the same namespace and the same Namespace
object for the same input, and `AdmissionInput.offline` (the engine's) fills the rest.

`audit --cluster` gives it the server's own cluster context (webhook.kube.ClusterCaches, listed
once instead of watched): the Namespace objects, PriorityClasses and DRA claims and templates then
come from the cluster through the server's `get` and `context`, not from the audited objects.

`namespaces_in` reads the Namespace objects of files (`--namespace-objects`, and, scanned
for, those anywhere in the audited files): what an offline NamespaceContext is made with.

GPUPolicyExceptions in the input are context too, as in the cluster: from where they appear they
let their namespace's objects through the rules they name (a broken one is an input problem).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from webhook.engine import AdmissionInput, ClusterSource, PolicyException, RuleLoadError, is_map, parse_exception
from webhook.engine.documents import EXCEPTION_KIND

from .sources import manifest_files, read_namespaces

DEFAULT_NAMESPACE = "default"  # what kubectl uses when neither -n nor the kubeconfig context names one

# Built-in kinds that live outside namespaces; everything else (all workload kinds) is namespaced.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "RuntimeClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
        "IngressClass",
        "APIService",
        "CSIDriver",
        "CSINode",
        "VolumeAttachment",
        "ClusterPolicyReport",
        "ClusterQueue",
        "ResourceFlavor",
    }
)


# Objects the server reads from its caches as context (the CEL priorityClasses, deviceClaims,
# kueueQueues): an input's are context too. PriorityClasses and Kueue's queues and flavors are no
# admission a rule of the pack acts on: context only; ResourceClaims and templates are also what
# tenants create, so they are audited as well.
_CLUSTER_CONTEXT_KINDS = frozenset(
    {"PriorityClass", "ResourceClaim", "ResourceClaimTemplate", "LocalQueue", "ClusterQueue", "ResourceFlavor"}
)
_AUDITED_CONTEXT_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
# Cluster-scoped objects the platform admin writes, which configure what the audited objects may use
# (runtimeClassName, DRA device classes): in the input they are context, not audited objects, as
# Namespaces are (GPUWebhookConfig's accelerator table says which DeviceClasses are GPUs).
_CONTEXT_ONLY = {"RuntimeClass": "node.k8s.io/", "DeviceClass": "resource.k8s.io/"}


class NamespaceContext:
    """Namespace objects by name, and the namespace given to objects that carry none."""

    def __init__(
        self,
        namespaces: Mapping[str, Mapping[str, Any]] | None = None,
        default_namespace: str | None = None,
        cluster: ClusterSource | None = None,
        problem: Callable[[str], None] | None = None,
    ) -> None:
        self.namespaces: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (namespaces or {}).items()}
        self.default_namespace = default_namespace or DEFAULT_NAMESPACE
        self.taken = 0  # Namespace objects found in the input
        # PriorityClasses, DRA claims/templates and Kueue objects met so far: the cluster context the
        # server's watches would give (priorityClasses, deviceClaims, kueueQueues); claims are audited as well
        self.cluster_objects: list[Mapping[str, Any]] = []
        # a live cluster's context (audit --cluster): Namespaces and the rest come from it alone
        self.cluster = cluster
        self.exceptions: list[PolicyException] = []  # GPUPolicyExceptions met so far
        self.problem = problem  # where a broken GPUPolicyException is told (the audit's input problems)

    def take(self, obj: Mapping[str, Any]) -> bool:
        """Keep a context object met in the input (True: it is not audited): a Namespace, a GPUPolicyException,
        a PriorityClass, RuntimeClass, DeviceClass or Kueue queue or flavor; ResourceClaims and templates are
        kept and audited."""
        if obj.get("kind") == EXCEPTION_KIND and str(obj.get("apiVersion", "")).startswith("gpu-webhook.io/"):
            if self.cluster is None:  # a live cluster's exceptions are in its context already
                self._take_exception(obj)
            return True
        kind = obj.get("kind")
        if kind in _CLUSTER_CONTEXT_KINDS:
            if self.cluster is None:  # a live cluster's claims are in its context already: keep none twice
                self.cluster_objects.append(obj)
            return kind not in _AUDITED_CONTEXT_KINDS
        group = _CONTEXT_ONLY.get(str(kind))
        if group is not None and str(obj.get("apiVersion", "")).startswith(group):
            return True
        if obj.get("kind") != "Namespace" or str(obj.get("apiVersion", "")) != "v1":
            return False
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
        if isinstance(name, str) and name:
            self.namespaces[name] = dict(obj)
            self.taken += 1
        return True

    def _take_exception(self, obj: Mapping[str, Any]) -> None:
        try:
            self.exceptions.append(parse_exception(obj))
        except RuleLoadError as error:
            if self.problem is not None:
                self.problem(f"{error} (not applied)")

    def namespace_of(self, obj: Mapping[str, Any] | None) -> str | None:
        if not is_map(obj) or obj.get("kind") in CLUSTER_SCOPED:
            return None
        given = obj.get("metadata")
        metadata = given if is_map(given) else {}
        found = metadata.get("namespace")
        return found if isinstance(found, str) and found else self.default_namespace

    def admission(
        self,
        obj: dict[str, Any] | None,
        *,
        operation: str = "CREATE",
        old_object: dict[str, Any] | None = None,
        namespace: str | None = None,
        namespace_object: dict[str, Any] | None = None,
        user_info: Mapping[str, Any] | None = None,
        cluster_objects: list[Mapping[str, Any]] | None = None,
        exceptions: Iterable[PolicyException] | None = None,
        now: datetime | None = None,
    ) -> AdmissionInput:
        """The admission the apiserver would run for `obj` applied with `kubectl apply -n <default>`;
        `exceptions` in place of those met so far (offline), `now` the instant expiries are compared with."""
        namespace = namespace or self.namespace_of(obj if obj is not None else old_object)
        cluster = self.cluster
        if namespace_object is None and namespace:
            namespace_object = self.namespaces.get(namespace) if cluster is None else cluster.get(namespace)
        if cluster_objects is None and cluster is None:
            cluster_objects = self.cluster_objects or None
        if exceptions is None:
            exceptions = self.exceptions if cluster is None else ()
        return AdmissionInput.offline(
            _with_namespace(obj, namespace),
            operation=operation,
            old_object=_with_namespace(old_object, namespace),
            namespace=namespace,
            # shared, not copied: the engine never edits namespaceObject (the server hands it the watch
            # cache's own dict), and the same object lets it reuse its answers per namespace by identity
            namespace_object=namespace_object,
            # an input's Namespace is taken once and never edited (a second one replaces it whole)
            namespace_unchanging=cluster is None and namespace_object is self.namespaces.get(namespace or ""),
            user_info=user_info,
            cluster_objects=cluster_objects,
            exceptions=exceptions,
            now=now,
            # the server's own context: PriorityClasses, the namespace's DRA objects and exceptions
            cluster=cluster.context(namespace) if cluster is not None else None,
        )


def _with_namespace(obj: dict[str, Any] | None, namespace: str | None) -> dict[str, Any] | None:
    """The object as admission sees it: the apiserver fills an empty metadata.namespace from the request."""
    if obj is None or not namespace:
        return obj
    metadata = obj.get("metadata")
    if is_map(metadata) and metadata.get("namespace"):
        return obj
    return {**obj, "metadata": {**(metadata if is_map(metadata) else {}), "namespace": namespace}}


_NAMESPACE_KIND = re.compile(rb"kind[\"']?\s*:\s*[\"']?Namespace\b")


def namespaces_in(
    paths: Iterable[str], problem: Callable[[str], None], scan: bool = False
) -> dict[str, dict[str, Any]]:
    """Namespace objects in files and directories, by name; with `scan`, only files that mention kind
    Namespace are parsed. SourceError for a path that does not exist."""
    files = list(manifest_files(paths))
    if scan:
        files = [f for f in files if f != "-" and _mentions_namespace(f)]
    return read_namespaces(files, problems=problem) if files else {}


def _mentions_namespace(path: str) -> bool:
    try:
        return _NAMESPACE_KIND.search(Path(path).read_bytes()) is not None
    except OSError:
        return False  # the audit itself reports an unreadable file
