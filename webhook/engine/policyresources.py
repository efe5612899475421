"""The policy objects as cluster resources: the CRDs' names, scope and printer columns.

One table for every layer that names them: install renders the CRDs and the registration from it,
kube watches its collections, policies checks and writes their status. It sits in the engine,
beside the kinds and schemas it names (schema.py), so that none of those layers imports another
for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .schema import API_VERSION, EXCEPTION_KIND, OVERLAY_KIND, POLICY_KIND

_GROUP, _VERSION = API_VERSION.split("/")


@dataclass(frozen=True)
class PolicyResource:
    """One kind of policy object: its names, scope and the printer columns of `kubectl get`."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    status: bool  # the server writes its status (conditions, byPod)
    columns: tuple[tuple[str, str, str, str], ...]  # (name, type, jsonPath, description)
    group: str = _GROUP
    version: str = _VERSION

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def collection(self) -> str:
        """The path that lists every object (all namespaces for a namespaced kind)."""
        return f"/apis/{self.group}/{self.version}/{self.plural}"


_READY = ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Whether every replica runs it")
_AGE = ("Age", "date", ".metadata.creationTimestamp", "")
_POLICY = PolicyResource(
    POLICY_KIND,
    "gpupolicies",
    ("gpupol",),
    namespaced=False,
    status=True,
    columns=(
        ("Action", "string", ".spec.action", "Deny, Warn or Audit"),
        ("FailurePolicy", "string", ".spec.failurePolicy", "Fail or Ignore when the rule cannot be evaluated"),
        _READY,
        _AGE,
    ),
)
_OVERLAY = PolicyResource(
    OVERLAY_KIND,
    "gpupolicyoverlays",
    ("gpuovl",),
    namespaced=False,
    status=True,
    columns=(("Rules", "string", ".spec.rules[*].name", "The rules it changes"), _READY, _AGE),
)
_EXCEPTION = PolicyResource(
    EXCEPTION_KIND,
    "gpupolicyexceptions",
    ("gpupolex",),
    namespaced=True,
    status=False,
    columns=(
        ("Rules", "string", ".spec.rules", "The rules it lets objects through"),
        ("Expires", "string", ".spec.expires", "When it stops applying"),
        ("Reason", "string", ".spec.reason", ""),
        _AGE,
    ),
)
# kind -> resource, in the order the CRDs are rendered (GPUPolicy, GPUPolicyOverlay, GPUPolicyException)
POLICY_RESOURCES: Mapping[str, PolicyResource] = MappingProxyType({r.kind: r for r in (_POLICY, _OVERLAY, _EXCEPTION)})

# GPUPolicyExceptions applied per namespace: past it, the newest are not applied (webhook/kube/caches.py)
# and the /policies check refuses new ones (webhook/policies/admission.py). An exception is meant to be
# rare and specific (one team's workload, one rule, until a date); 64 leaves room for that and bounds
# what every request of the namespace walks (webhook/engine/exceptions.py `excepting`).
# `serve --max-exceptions-per-namespace` sets it.
MAX_EXCEPTIONS_PER_NAMESPACE = 64
