"""Accelerator resources: which resource names are GPUs, and how many a pod asks for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .pointer import is_map
from .quantity import MAX_EXPONENT, QuantityError, parse_quantity, quantity_of

# Configuration, not code: a GPUWebhookConfig document in the rules directory replaces this list.
DEFAULT_ACCELERATORS: tuple[str, ...] = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
)
# DeviceClasses of the DRA drivers that hand out accelerators: NVIDIA k8s-dra-driver-gpu
# (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com for passthrough), AMD's DRA driver
# (gpu.amd.com), Intel's resource driver (gpu.intel.com). `prefix*` patterns as for resources.
# Not compute-domain*.nvidia.com: ComputeDomain IMEX channels are no GPUs.
DEFAULT_DEVICE_CLASSES: tuple[str, ...] = (
    "gpu.nvidia.com",
    "mig.nvidia.com",
    "vfio.gpu.nvidia.com",
    "gpu.amd.com",
    "gpu.intel.com",
)


@dataclass(frozen=True, slots=True)
class Accelerators:
    """Resource names that count as accelerators: exact names and `prefix*` patterns."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    device_classes: frozenset[str] = frozenset(DEFAULT_DEVICE_CLASSES)
    device_class_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_patterns(
        cls, patterns: Iterable[str], device_classes: Iterable[str] = DEFAULT_DEVICE_CLASSES
    ) -> Accelerators:
        patterns = list(patterns)
        classes = list(device_classes)
        return cls(
            exact=frozenset(p for p in patterns if not p.endswith("*")),
            prefixes=tuple(p[:-1] for p in patterns if p.endswith("*")),
            device_classes=frozenset(p for p in classes if not p.endswith("*")),
            device_class_prefixes=tuple(p[:-1] for p in classes if p.endswith("*")),
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.exact or name.startswith(self.prefixes))

    def is_accelerator_class(self, name: object) -> bool:
        """Whether a DRA DeviceClass hands out accelerators."""
        return isinstance(name, str) and (name in self.device_classes or name.startswith(self.device_class_prefixes))

    def container_count(self, container: Mapping[str, Any]) -> int:
        """Accelerators one container asks for; a limit alone counts as the request (pod templates)."""
        resources = container.get("resources")
        if not is_map(resources):
            return 0
        # not named `requests`: bandit takes requests.get() for the HTTP library (B113)
        asked = resources.get("requests")
        limits = resources.get("limits")
        # each name once: its request, else its limit
        amounts = {**(limits if is_map(limits) else {}), **(asked if is_map(asked) else {})}
        total = 0
        exact, prefixes = self.exact, self.prefixes
        for name, value in amounts.items():
            # `name in self`, inline: a pod's few resource names are counted on every request (and
            # once more for every object an audit reads)
            if name in exact or (isinstance(name, str) and name.startswith(prefixes)):
                total += whole_quantity(value)
        return total

    def pod_count(self, pod_spec: Mapping[str, Any] | None, claims: PodClaims | None = None) -> int:
        """Accelerators the scheduler reserves for a pod: its extended resources plus its DRA claims' devices.

        Extended resources as the scheduler sums them (k8s.io/component-helpers/resource
        PodRequests, KEP-753 "Exposing Pod Resource Requirements"): each regular init container
        needs its own request plus every restartable (sidecar) init container started before it;
        sidecars keep running beside the app containers; the pod needs the larger of the two.
        Devices of DRA claims are reserved for the pod's whole life, whichever container uses them.
        """
        if not is_map(pod_spec):
            return 0
        running = 0
        for container in _containers(pod_spec, "containers"):  # a loop, not sum(generator): half the calls
            running += self.container_count(container)
        sidecars = 0  # restartable init containers started so far
        largest_init = 0
        for init in _containers(pod_spec, "initContainers"):
            count = self.container_count(init)
            if init.get("restartPolicy") == "Always":  # a sidecar: starts, then runs beside the app
                running += count
                sidecars += count
                largest_init = max(largest_init, sidecars)
            else:
                largest_init = max(largest_init, count + sidecars)
        devices = claims.devices if claims is not None else 0
        return max(running, largest_init) + devices

    def pod_claims(
        self,
        pod_spec: Mapping[str, Any] | None,
        claims: Mapping[str, Any] | None,
        templates: Mapping[str, Any] | None,
    ) -> PodClaims:
        """The DRA claims of one pod spec, resolved against the namespace's claims and templates.

        `claims`/`templates` map names to ResourceClaim / ResourceClaimTemplate objects of the
        request's namespace; None means the door has no such context (every claim stays unknown).
        """
        entries = pod_spec.get("resourceClaims") if is_map(pod_spec) else None
        if not isinstance(entries, list) or not entries:
            return NO_CLAIMS
        found: list[dict[str, Any]] = []
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            name = entry.get("name")
            source, spec = "", None
            if isinstance(entry.get("resourceClaimName"), str):
                source, target = "ResourceClaim", entry["resourceClaimName"]
                obj = claims.get(target) if isinstance(claims, Mapping) else None
                spec = obj.get("spec") if isinstance(obj, Mapping) else None
            elif isinstance(entry.get("resourceClaimTemplateName"), str):
                source, target = "ResourceClaimTemplate", entry["resourceClaimTemplateName"]
                obj = templates.get(target) if isinstance(templates, Mapping) else None
                outer = obj.get("spec") if isinstance(obj, Mapping) else None
                spec = outer.get("spec") if isinstance(outer, Mapping) else None
            else:
                target = ""
            found.append(self.claim_summary(str(name or ""), source, target, spec))
        return PodClaims(tuple(found))

    def claim_summary(self, name: str, source: str, target: str, spec: Any) -> dict[str, Any]:
        """What rules need to know of one claim: its classes, and the accelerator devices per request.

        `exactly` asks for `count` devices (default 1) or, with allocationMode All, every matching
        device of a node: counted as 1 here (the webhook cannot know the node), and denied in tenant
        namespaces by dra-claim-limits. Of `firstAvailable` alternatives the scheduler picks one:
        the largest accelerator alternative counts (the most the pod may get).
        """
        summary: dict[str, Any] = {
            "name": name,
            "source": source,
            "claimName": target,
            "known": isinstance(spec, Mapping),
            "deviceClasses": [],
            "accelerator": False,
            "devices": 0,
            "requests": {},
        }
        if not isinstance(spec, Mapping):
            summary["accelerator"] = bool(source)  # unresolved: an accelerator until shown otherwise
            return summary
        devices = spec.get("devices")
        requests = devices.get("requests") if isinstance(devices, Mapping) else None
        classes: list[str] = []
        for request in requests if isinstance(requests, list) else []:
            if not isinstance(request, Mapping):
                continue
            alternatives = request.get("firstAvailable")
            if isinstance(alternatives, list):
                options = [a for a in alternatives if isinstance(a, Mapping)]
            else:
                exact = request.get("exactly")
                options = [exact if isinstance(exact, Mapping) else request]  # v1 / v1beta1 shape
            count = 0
            for option in options:
                device_class = option.get("deviceClassName")
                if isinstance(device_class, str):
                    classes.append(device_class)
                if self.is_accelerator_class(device_class):
                    count = max(count, _device_count(option))
            summary["requests"][str(request.get("name", ""))] = count
            summary["devices"] += count
        summary["deviceClasses"] = sorted(set(classes))
        summary["accelerator"] = any(self.is_accelerator_class(c) for c in classes)
        return summary

    def container_claim_count(self, container: Mapping[str, Any], claims: PodClaims) -> int:
        """Accelerator devices of the DRA claims a container names in resources.claims ({name, request})."""
        resources = container.get("resources")
        used = resources.get("claims") if is_map(resources) else None
        if not isinstance(used, list) or not claims.items:
            return 0
        total = 0
        for reference in used:
            if not isinstance(reference, Mapping):
                continue
            claim = claims.by_name.get(str(reference.get("name", "")))
            if claim is None:
                continue
            request = reference.get("request")
            if isinstance(request, str) and request:
                total += claim["requests"].get(request, 0)
            else:
                total += claim["devices"]
        return total

    def container_uses_accelerator_claims(self, container: Mapping[str, Any], claims: PodClaims) -> bool:
        """Whether a container names an accelerator claim (or request), or a claim that is not resolved."""
        resources = container.get("resources")
        used = resources.get("claims") if is_map(resources) else None
        if not isinstance(used, list) or not claims.items:
            return False
        by_name = claims.by_name
        for reference in used:
            claim = by_name.get(str(reference.get("name", ""))) if isinstance(reference, Mapping) else None
            if claim is None:
                continue
            if not claim["known"]:
                return True
            request = reference.get("request")
            if claim["requests"].get(request, 0) > 0 if isinstance(request, str) and request else claim["devices"] > 0:
                return True
        return False


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The DRA claims of one pod spec, summarised (Accelerators.claim_summary): CEL's `deviceClaims`."""

    items: tuple[dict[str, Any], ...] = ()

    @property
    def devices(self) -> int:
        return sum(c["devices"] for c in self.items)

    @property
    def unresolved(self) -> bool:
        """A claim whose class the engine cannot see: treated as an accelerator (see the module doc)."""
        return any(not c["known"] for c in self.items)

    @property
    def accelerator(self) -> bool:
        return any(c["accelerator"] for c in self.items)

    @property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in self.items}


NO_CLAIMS = PodClaims()


def _device_count(request: Mapping[str, Any]) -> int:
    if request.get("allocationMode") == "All":
        return 1
    count = request.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _containers(pod_spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    value = pod_spec.get(field)
    if not isinstance(value, list):
        return []
    return [c for c in value if is_map(c)]


_QUANTITY_CEILING = 10 ** (MAX_EXPONENT + 1)  # parse_quantity refuses an int of more digits


def whole_quantity(value: object) -> int:
    if value.__class__ is int:  # JSON's 8 (not a bool): its own value, within parse_quantity's range
        return value if 0 < value < _QUANTITY_CEILING else 0
    if isinstance(value, str):
        number = quantity_of(value)
    else:
        try:
            number = parse_quantity(value)
        except QuantityError:
            number = None
    return int(number) if number is not None and number > 0 else 0


DEFAULT = Accelerators.from_patterns(DEFAULT_ACCELERATORS)
