"""The shapes of Pod, PodSpec and Container (Kubernetes core/v1) as far as rules reach into them.

Only the levels that rules commonly read are spelled out; below them a field is `ANY`
and nothing is checked. This is a shipped list rather than the OpenAPI document of a
live cluster, so lint works offline; a field added by a newer Kubernetes is missing
here until the list is updated (lint then reports it, and the author can tell).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Struct:
    """An object with a fixed set of fields."""

    name: str
    fields: dict[str, FieldType]
    open: bool = False  # other fields exist too (unchecked): an object of any kind, whose metadata is known


@dataclass(frozen=True, slots=True)
class ListOf:
    item: FieldType


@dataclass(frozen=True, slots=True)
class MapOf:
    """A map with arbitrary string keys (labels, nodeSelector, resource lists)."""

    value: FieldType


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()
FieldType = Struct | ListOf | MapOf | _Any
STRINGS = MapOf(ANY)


def _struct(name: str, known: dict[str, FieldType] | None = None, *others: str) -> Struct:
    fields: dict[str, FieldType] = {field: ANY for field in others}
    fields.update(known or {})
    return Struct(name, fields)


OBJECT_META = _struct(
    "ObjectMeta",
    {"labels": STRINGS, "annotations": STRINGS},
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
)
RESOURCES = _struct("ResourceRequirements", {"limits": STRINGS, "requests": STRINGS}, "claims")
ENV_VAR = _struct("EnvVar", None, "name", "value", "valueFrom")
SECURITY_CONTEXT = _struct(
    "SecurityContext",
    None,
    "allowPrivilegeEscalation",
    "appArmorProfile",
    "capabilities",
    "privileged",
    "procMount",
    "readOnlyRootFilesystem",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxOptions",
    "seccompProfile",
    "windowsOptions",
)
CONTAINER = _struct(
    "Container",
    {"resources": RESOURCES, "env": ListOf(ENV_VAR), "securityContext": SECURITY_CONTEXT},
    "args",
    "command",
    "envFrom",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "name",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "targetContainerName",  # ephemeral containers
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
)
TOLERATION = _struct("Toleration", None, "key", "operator", "value", "effect", "tolerationSeconds")
NODE_SELECTOR_REQUIREMENT = _struct("NodeSelectorRequirement", None, "key", "operator", "values")
NODE_SELECTOR_TERM = _struct(
    "NodeSelectorTerm",
    {"matchExpressions": ListOf(NODE_SELECTOR_REQUIREMENT), "matchFields": ListOf(NODE_SELECTOR_REQUIREMENT)},
)
NODE_AFFINITY = _struct(
    "NodeAffinity",
    {
        "requiredDuringSchedulingIgnoredDuringExecution": _struct(
            "NodeSelector", {"nodeSelectorTerms": ListOf(NODE_SELECTOR_TERM)}
        ),
    },
    "preferredDuringSchedulingIgnoredDuringExecution",
)
AFFINITY = _struct("Affinity", {"nodeAffinity": NODE_AFFINITY}, "podAffinity", "podAntiAffinity")
POD_SPEC = _struct(
    "PodSpec",
    {
        "containers": ListOf(CONTAINER),
        "initContainers": ListOf(CONTAINER),
        "ephemeralContainers": ListOf(CONTAINER),
        "tolerations": ListOf(TOLERATION),
        "affinity": AFFINITY,
        "nodeSelector": STRINGS,
        "overhead": STRINGS,
    },
    "activeDeadlineSeconds",
    "automountServiceAccountToken",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostUsers",
    "hostname",
    "hostnameOverride",
    "imagePullSecrets",
    "nodeName",
    "os",
    "preemptionPolicy",
    "priority",
    "priorityClassName",
    "readinessGates",
    "resourceClaims",
    "resources",
    "restartPolicy",
    "runtimeClassName",
    "schedulerName",
    "schedulingGates",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "topologySpreadConstraints",
    "volumes",
)
# any object: ObjectMeta is the same for every kind, the rest depends on the kind (unchecked)
KUBE_OBJECT = Struct("object", {"metadata": OBJECT_META}, open=True)
POD = _struct("Pod", {"metadata": OBJECT_META, "spec": POD_SPEC}, "apiVersion", "kind", "status")
NAMESPACE = _struct("Namespace", {"metadata": OBJECT_META}, "apiVersion", "kind", "spec", "status")
# The fields of PodSpec that no workload kind has directly under its own `spec`.
POD_ONLY_SPEC_FIELDS = frozenset(POD_SPEC.fields) - {"resources"}
