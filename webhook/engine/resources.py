"""Accelerator resources: which resource names are GPUs, and how many a pod asks for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .quantity import QuantityError, parse_quantity, quantity_of

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


@dataclass(frozen=True, slots=True)
class Accelerators:
    """Resource names that count as accelerators: exact names and `prefix*` patterns."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]

    @classmethod
    def from_patterns(cls, patterns: Iterable[str]) -> Accelerators:
        patterns = list(patterns)
        return cls(
            exact=frozenset(p for p in patterns if not p.endswith("*")),
            prefixes=tuple(p[:-1] for p in patterns if p.endswith("*")),
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.exact or name.startswith(self.prefixes))

    def container_count(self, container: Mapping[str, Any]) -> int:
        """Accelerators one container asks for; a limit alone counts as the request (pod templates)."""
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            return 0
        # not named `requests`: bandit takes requests.get() for the HTTP library (B113)
        asked = resources.get("requests")
        limits = resources.get("limits")
        asked = asked if isinstance(asked, Mapping) else {}
        limits = limits if isinstance(limits, Mapping) else {}
        total = 0
        for name in set(asked) | set(limits):
            if name in self:
                total += whole_quantity(asked.get(name, limits.get(name)))
        return total

    def pod_count(self, pod_spec: Mapping[str, Any] | None) -> int:
        """max(sum of app and sidecar containers, largest regular init container) as the scheduler counts."""
        if not isinstance(pod_spec, Mapping):
            return 0
        running = sum(self.container_count(c) for c in _containers(pod_spec, "containers"))
        largest_init = 0
        for init in _containers(pod_spec, "initContainers"):
            count = self.container_count(init)
            if init.get("restartPolicy") == "Always":  # a sidecar runs beside the app containers
                running += count
            else:
                largest_init = max(largest_init, count)
        return max(running, largest_init)


def _containers(pod_spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    value = pod_spec.get(field)
    if not isinstance(value, list):
        return []
    return [c for c in value if isinstance(c, Mapping)]


def whole_quantity(value: object) -> int:
    if isinstance(value, str):
        number = quantity_of(value)
    else:
        try:
            number = parse_quantity(value)
        except QuantityError:
            number = None
    return int(number) if number is not None and number > 0 else 0


DEFAULT = Accelerators.from_patterns(DEFAULT_ACCELERATORS)
