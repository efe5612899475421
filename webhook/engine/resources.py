"""Accelerator resources: which resource names are GPUs, and how many a pod asks for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webhook.cel import celsyntax
from webhook.cel.quantity import MAX_EXPONENT, QuantityError, parse_quantity, quantity_of

from .pointer import is_map

# Configuration, not code: a GPUWebhookConfig document in the rules directory replaces these lists.
# Resource names that hand a container accelerator devices, one device per unit: the NVIDIA device
# plugin (whole GPUs, MIG slices under the mixed strategy, time-sliced replicas), AMD, Intel, Habana,
# and Volcano's device plugins (volcano-sh/volcano pkg/scheduler/api: `volcano.sh/gpu-number`,
# whole cards of GPU sharing; `volcano.sh/vgpu-number`, vGPUs). HAMi hands out its vGPUs as
# `nvidia.com/gpu` (Project-HAMi/HAMi, docs: resourceCountName).
DEFAULT_ACCELERATORS: tuple[str, ...] = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
    "volcano.sh/gpu-number",
    "volcano.sh/vgpu-number",
)
# Resource names that give a container a share of a GPU's memory or compute, not devices: Volcano's
# GPU sharing (`volcano.sh/gpu-memory`: a container asking for it alone gets part of one card) and
# vGPU (`volcano.sh/vgpu-memory`, `-memory-percentage`, `-cores`), HAMi (`nvidia.com/gpumem`,
# `-percentage`, `nvidia.com/gpucores`). A container with any of them has a GPU (it is never a CPU
# container); alone, they count as one device (a share of one GPU), beside a device resource as nothing.
DEFAULT_SHARE_RESOURCES: tuple[str, ...] = (
    "volcano.sh/gpu-memory",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-memory-percentage",
    "volcano.sh/vgpu-cores",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
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
# Devices that are a part of one GPU, not a whole GPU (what a ceiling counting whole GPUs leaves
# out): MIG slices, time-sliced replicas and vGPUs, as resources and as the DRA classes of MIG devices.
DEFAULT_SLICE_RESOURCES: tuple[str, ...] = ("nvidia.com/mig-*", "nvidia.com/gpu.shared", "volcano.sh/vgpu-number")
DEFAULT_SLICE_DEVICE_CLASSES: tuple[str, ...] = ("mig.nvidia.com",)

# GPU allocators that mark a container by something other than a resource name or a DRA claim: the
# allocator table. The resource- and claim-marked allocators are the lists above: the NVIDIA, AMD,
# Intel and Habana device plugins and DRA drivers, HAMi (its vGPUs as `nvidia.com/gpu` beside
# `nvidia.com/gpumem` / `nvidia.com/gpucores`, Project-HAMi/HAMi docs/config.md, resourceCountName,
# resourceMemoryName, resourceCoreName) and Volcano (`volcano.sh/vgpu-number`, `volcano.sh/vgpu-memory`,
# `volcano.sh/vgpu-cores`; volcano-sh/devices README and volcano-sh/volcano
# pkg/scheduler/api/devices/nvidia/vgpu); their device plugins write the device variables when the
# container is created, outside the pod spec, so every device variable in the spec is the tenant's.
# An annotation-marked allocator (Allocator below) also writes device variables into the pod spec
# itself; those entries, in the allocator's own form, are not the tenant's (allocator_env).
#
# NVIDIA KAI Scheduler (kai-scheduler/api constants/constants.go: GpuFraction "gpu-fraction",
# GpuMemory "gpu-memory", GpuFractionContainerName "gpu-fraction-container-name",
# GpuFractionsNumDevices "gpu-fraction-num-devices", DefaultSchedulerName "kai-scheduler"): a pod
# with a `gpu-fraction` or `gpu-memory` annotation and no nvidia.com/gpu request gets a share of a GPU
# (docs/gpu-sharing/README.md). The share goes to the first app container, or to the container the
# `gpu-fraction-container-name` annotation names, init containers looked up first (pkg/common/resources
# GetFractionContainerRef). KAI's binder mutates that container at admission
# (NVIDIA/KAI-Scheduler pkg/binder/plugins/gpusharing/gpu_sharing.go, Mutate): NVIDIA_VISIBLE_DEVICES
# and GPU_PORTION as valueFrom.configMapKeyRef and an envFrom configMapRef (pkg/binder/common/
# gpu_access.go, AddVisibleDevicesEnvVars), every ConfigMap named after the pod's
# `runai/shared-gpu-configmap` annotation (pkg/binder/common/gpusharingconfigmap/config_map.go), and
# writes the reserved GPU ids into that ConfigMap at binding (PreBind, SetNvidiaVisibleDevices). Only
# KAI's scheduler hands out the share: a pod with KAI's annotations but another schedulerName has no GPU.


@dataclass(frozen=True, slots=True)
class Allocator:
    """One GPU allocator that marks its containers with pod annotations (GPUWebhookConfig gpuAllocators).

    A pod has the allocator's GPU when its spec's schedulerName is one of `scheduler_names` (any, when
    empty) and its metadata carries one of `pod_annotations`. The allocated container is the one
    `container_annotation` names (init containers first, then app containers), else the first app
    container; it counts `devices_annotation`'s whole number (default 1) of devices, none of them a
    whole GPU. `env` are the device variables the allocator writes into that container, always as a
    `valueFrom.configMapKeyRef` to a ConfigMap whose name starts with the value of the pod's
    `config_map_annotation` and a dash (any ConfigMap, when that is empty).
    """

    name: str
    pod_annotations: tuple[str, ...]
    scheduler_names: tuple[str, ...] = ()
    container_annotation: str = ""
    devices_annotation: str = ""
    env: tuple[str, ...] = ()
    config_map_annotation: str = ""

    @classmethod
    def from_config(cls, entry: Mapping[str, Any]) -> Allocator:
        """One gpuAllocators entry of a GPUWebhookConfig (schema.py CONFIG_SCHEMA checked it)."""
        return cls(
            name=str(entry["name"]),
            pod_annotations=tuple(entry["podAnnotations"]),
            scheduler_names=tuple(entry.get("schedulerNames", ())),
            container_annotation=str(entry.get("containerAnnotation", "")),
            devices_annotation=str(entry.get("devicesAnnotation", "")),
            env=tuple(entry.get("env", ())),
            config_map_annotation=str(entry.get("configMapAnnotation", "")),
        )

    def allocation(self, pod_spec: Mapping[str, Any], metadata: Any) -> Allocation | None:
        """The container this allocator gives a GPU in one pod spec, or None."""
        annotations = metadata.get("annotations") if is_map(metadata) else None
        if not is_map(annotations) or not any(key in annotations for key in self.pod_annotations):
            return None
        if self.scheduler_names and pod_spec.get("schedulerName") not in self.scheduler_names:
            return None
        container: Mapping[str, Any] | None = None
        named = annotations.get(self.container_annotation) if self.container_annotation else None
        if isinstance(named, str):
            for field_name in ("initContainers", "containers"):
                container = next((c for c in _containers(pod_spec, field_name) if c.get("name") == named), None)
                if container is not None:
                    break
        elif named is None:
            first = _containers(pod_spec, "containers")[:1]
            container = first[0] if first else None
        if container is None:
            return None  # the allocator refuses such a pod (no container named so): it gets no GPU
        devices = annotations.get(self.devices_annotation) if self.devices_annotation else None
        count = int(devices) if isinstance(devices, str) and devices.isdigit() and len(devices) <= 4 else 1
        prefix: str | None = ""
        if self.config_map_annotation:
            value = annotations.get(self.config_map_annotation)
            prefix = value + "-" if isinstance(value, str) and value else None
        return Allocation(self, container, max(count, 1), prefix)


@dataclass(frozen=True, slots=True)
class Allocation:
    """An annotation-marked allocator's container in one pod spec: how much it counts, whose ConfigMaps."""

    allocator: Allocator
    container: Mapping[str, Any]
    devices: int
    # ConfigMap names of the allocator's start with this; None: the pod has no such ConfigMap yet
    # (the allocator's webhook has not named one), so no entry there is the allocator's
    config_map_prefix: str | None

    def env(self) -> dict[str, list[str]]:
        """CEL's allocatorEnv entry: `writes` (the variables the allocator writes), `theirs` (those whose
        every entry in the container is the allocator's form) and `envFrom` (the allocator's ConfigMaps
        among the container's envFrom sources)."""
        prefix = self.config_map_prefix
        entries = self.container.get("env")
        theirs: list[str] = []
        for variable in self.allocator.env:
            found = [e for e in entries if is_map(e) and e.get("name") == variable] if isinstance(entries, list) else []
            if found and prefix is not None and all(_config_map_key_name(e, prefix) for e in found):
                theirs.append(variable)
        sources = self.container.get("envFrom")
        env_from: list[str] = []
        for source in sources if isinstance(sources, list) and prefix is not None else []:
            reference = source.get("configMapRef") if is_map(source) else None
            name = reference.get("name") if is_map(reference) else None
            if isinstance(name, str) and name.startswith(prefix or "") and not source.get("prefix"):
                env_from.append(name)
        return {"writes": list(self.allocator.env), "theirs": theirs, "envFrom": env_from}


def _config_map_key_name(entry: Mapping[str, Any], prefix: str) -> bool:
    """Whether an env entry is a valueFrom.configMapKeyRef (and nothing else) to a ConfigMap named prefix…."""
    if "value" in entry:
        return False
    source = entry.get("valueFrom")
    reference = source.get("configMapKeyRef") if is_map(source) else None
    name = reference.get("name") if is_map(reference) else None
    return is_map(source) and len(source) == 1 and isinstance(name, str) and name.startswith(prefix)


DEFAULT_ALLOCATORS: tuple[Allocator, ...] = (
    Allocator(
        name="kai-scheduler",
        pod_annotations=("gpu-fraction", "gpu-memory"),
        scheduler_names=("kai-scheduler",),
        container_annotation="gpu-fraction-container-name",
        devices_annotation="gpu-fraction-num-devices",
        env=("NVIDIA_VISIBLE_DEVICES", "GPU_PORTION"),
        config_map_annotation="runai/shared-gpu-configmap",
    ),
)

# DRA extended resources (KEP-5004, DRAExtendedResource, beta and on by default in 1.36): a container
# may ask for `deviceclass.resource.kubernetes.io/<class>: N` and the scheduler makes a claim for N
# devices of that DeviceClass (k8s.io/api core/v1 ResourceDeviceClassPrefix; kubernetes.io docs,
# "Dynamic Resource Allocation", "Extended resource"). The name of every accelerator class counts as
# an accelerator resource. A DeviceClass's own `spec.extendedResourceName` (any extended resource
# name the admin picks) lives in the cluster: the admin who sets it lists it in acceleratorResources.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"

# MIG through DRA: NVIDIA's k8s-dra-driver-gpu publishes each MIG device with the attribute `profile`
# ("1g.10gb") in its driver's domain (cmd/gpu-kubelet-plugin/deviceinfo.go, MigDeviceInfo.GetDevice),
# and its mig.nvidia.com DeviceClass selects `device.attributes['gpu.nvidia.com'].type == 'mig'`
# and no profile: the claim's own CEL selectors pin it, if they do (pinned_profiles).
MIG_PROFILE_DOMAIN = "gpu.nvidia.com"
MIG_PROFILE_ATTRIBUTE = "profile"
ANY_PROFILE = "*"  # what selectors that pin no profile may get


def _split(patterns: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """Exact names and the prefixes of `prefix*` patterns."""
    patterns = list(patterns)
    return frozenset(p for p in patterns if not p.endswith("*")), tuple(p[:-1] for p in patterns if p.endswith("*"))


def _matches(name: object, exact: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    return isinstance(name, str) and (name in exact or name.startswith(prefixes))


@dataclass(frozen=True, slots=True)
class Accelerators:
    """Resource names that count as accelerators: exact names and `prefix*` patterns.

    `exact`/`prefixes` hold every accelerator resource name (what `isAccelerator` and the
    registration's match condition test): the device resources, the share resources, and
    `deviceclass.resource.kubernetes.io/<class>` for every accelerator DeviceClass. `shares` and
    `slices` are subsets of them: share resources count no devices; slices are parts of one GPU.
    """

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    device_classes: frozenset[str] = frozenset(DEFAULT_DEVICE_CLASSES)
    device_class_prefixes: tuple[str, ...] = ()
    share_exact: frozenset[str] = frozenset()
    share_prefixes: tuple[str, ...] = ()
    slice_exact: frozenset[str] = frozenset()
    slice_prefixes: tuple[str, ...] = ()
    slice_classes: frozenset[str] = frozenset()
    slice_class_prefixes: tuple[str, ...] = ()
    # annotation-marked GPU allocators (KAI Scheduler): Allocator
    allocators: tuple[Allocator, ...] = DEFAULT_ALLOCATORS

    @classmethod
    def from_patterns(
        cls,
        patterns: Iterable[str],
        device_classes: Iterable[str] = DEFAULT_DEVICE_CLASSES,
        *,
        shares: Iterable[str] = DEFAULT_SHARE_RESOURCES,
        slices: Iterable[str] = DEFAULT_SLICE_RESOURCES,
        slice_classes: Iterable[str] = DEFAULT_SLICE_DEVICE_CLASSES,
        allocators: Iterable[Allocator] = DEFAULT_ALLOCATORS,
    ) -> Accelerators:
        classes, shares, slice_class_list = list(device_classes), list(shares), list(slice_classes)
        share_exact, share_prefixes = _split(shares)
        slice_exact, slice_prefixes = _split([*slices, *(DEVICE_CLASS_RESOURCE_PREFIX + c for c in slice_class_list)])
        exact, prefixes = _split([*patterns, *shares, *(DEVICE_CLASS_RESOURCE_PREFIX + c for c in classes)])
        class_exact, class_prefixes = _split(classes)
        slice_class_exact, slice_class_prefixes = _split(slice_class_list)
        return cls(
            exact=exact,
            prefixes=prefixes,
            device_classes=class_exact,
            device_class_prefixes=class_prefixes,
            share_exact=share_exact,
            share_prefixes=share_prefixes,
            slice_exact=slice_exact,
            slice_prefixes=slice_prefixes,
            slice_classes=slice_class_exact,
            slice_class_prefixes=slice_class_prefixes,
            allocators=tuple(allocators),
        )

    @classmethod
    def from_config(cls, settings: Mapping[str, Any]) -> Accelerators:
        """The table a GPUWebhookConfig's spec gives (schema.py CONFIG_SCHEMA); each key left out keeps its default.

        gpuAllocators adds to the shipped allocators; an entry named as a shipped one replaces it, and
        `enabled: false` removes it.
        """
        allocators = {a.name: a for a in DEFAULT_ALLOCATORS}
        for entry in settings.get("gpuAllocators", ()):
            if entry.get("enabled") is False:  # a shipped allocator the site does not run
                allocators.pop(str(entry["name"]), None)
                continue
            allocator = Allocator.from_config(entry)
            allocators[allocator.name] = allocator
        return cls.from_patterns(
            settings.get("acceleratorResources", DEFAULT_ACCELERATORS),
            settings.get("acceleratorDeviceClasses", DEFAULT_DEVICE_CLASSES),
            shares=settings.get("acceleratorShareResources", DEFAULT_SHARE_RESOURCES),
            slices=settings.get("acceleratorSliceResources", DEFAULT_SLICE_RESOURCES),
            slice_classes=settings.get("acceleratorSliceDeviceClasses", DEFAULT_SLICE_DEVICE_CLASSES),
            allocators=tuple(allocators.values()),
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.exact or name.startswith(self.prefixes))

    def is_share(self, name: object) -> bool:
        """Whether a resource gives a share of a GPU's memory or compute rather than devices."""
        return _matches(name, self.share_exact, self.share_prefixes)

    def is_slice(self, name: object) -> bool:
        """Whether a resource's devices are parts of one GPU (MIG slices, time-sliced replicas, vGPUs)."""
        return _matches(name, self.slice_exact, self.slice_prefixes)

    def is_slice_class(self, name: object) -> bool:
        """Whether a DeviceClass hands out parts of one GPU (MIG devices)."""
        return _matches(name, self.slice_classes, self.slice_class_prefixes)

    def is_accelerator_class(self, name: object) -> bool:
        """Whether a DRA DeviceClass hands out accelerators."""
        return isinstance(name, str) and (name in self.device_classes or name.startswith(self.device_class_prefixes))

    def container_count(self, container: Mapping[str, Any], *, whole_only: bool = False) -> int:
        """Accelerators one container asks for; a limit alone counts as the request (pod templates).

        Share resources (GPU memory, cores) count as one device when the container names no device
        resource, else as nothing (by name: what the exported policy can test, export/nativecel.py).
        `whole_only` counts whole GPUs: slices and shares are left out.
        """
        resources = container.get("resources")
        if not is_map(resources):
            return 0
        # not named `requests`: bandit takes requests.get() for the HTTP library (B113)
        asked = resources.get("requests")
        limits = resources.get("limits")
        # each name once: its request, else its limit
        amounts = {**(limits if is_map(limits) else {}), **(asked if is_map(asked) else {})}
        total = 0
        shared = devices_named = False
        exact, prefixes = self.exact, self.prefixes
        for name, value in amounts.items():
            # `name in self`, inline: a pod's few resource names are counted on every request (and
            # once more for every object an audit reads)
            if name in exact or (isinstance(name, str) and name.startswith(prefixes)):
                if self.is_share(name):
                    shared = True
                elif not (whole_only and self.is_slice(name)):
                    devices_named = True
                    total += whole_quantity(value)
        return 1 if shared and not devices_named and not whole_only else total

    def allocations(self, pod_spec: Mapping[str, Any] | None, metadata: Any) -> list[Allocation]:
        """The containers of one pod spec that annotation-marked allocators give a GPU (`metadata`: the pod's)."""
        if not self.allocators or not is_map(pod_spec) or not is_map(metadata):
            return []
        found = (allocator.allocation(pod_spec, metadata) for allocator in self.allocators)
        return [allocation for allocation in found if allocation is not None]

    def pod_count(
        self,
        pod_spec: Mapping[str, Any] | None,
        claims: PodClaims | None = None,
        *,
        whole_only: bool = False,
        metadata: Any = None,
    ) -> int:
        """Accelerators the scheduler reserves for a pod: its extended resources plus its DRA claims' devices.

        Extended resources as the scheduler sums them (k8s.io/component-helpers/resource
        PodRequests, KEP-753 "Exposing Pod Resource Requirements"): each regular init container
        needs its own request plus every restartable (sidecar) init container started before it;
        sidecars keep running beside the app containers; the pod needs the larger of the two.
        Devices of DRA claims are reserved for the pod's whole life, whichever container uses them.
        `whole_only` counts whole GPUs only (container_count; claims' devices of slice classes left out).
        An annotation-marked allocator's container (`metadata`: the pod's, Allocator) counts its
        devices beside its resources; they are shares, never whole GPUs.
        """
        if not is_map(pod_spec):
            return 0
        allocated = {} if whole_only else {id(a.container): a.devices for a in self.allocations(pod_spec, metadata)}
        running = 0
        for container in _containers(pod_spec, "containers"):  # a loop, not sum(generator): half the calls
            running += self.container_count(container, whole_only=whole_only)
            if allocated:
                running += allocated.get(id(container), 0)
        sidecars = 0  # restartable init containers started so far
        largest_init = 0
        for init in _containers(pod_spec, "initContainers"):
            count = self.container_count(init, whole_only=whole_only) + (allocated.get(id(init), 0) if allocated else 0)
            if init.get("restartPolicy") == "Always":  # a sidecar: starts, then runs beside the app
                running += count
                sidecars += count
                largest_init = max(largest_init, sidecars)
            else:
                largest_init = max(largest_init, count + sidecars)
        devices = 0 if claims is None else claims.whole_devices if whole_only else claims.devices
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
            "wholeDevices": 0,  # devices of classes that are no slices (is_slice_class)
            "requests": {},
            # per device class a request (or firstAvailable alternative) names: the MIG profiles its
            # selectors pin, or [ANY_PROFILE]
            "selections": [],
        }
        if not isinstance(spec, Mapping):
            summary["accelerator"] = bool(source)  # unresolved: an accelerator until shown otherwise
            return summary
        devices = spec.get("devices")
        requests = devices.get("requests") if isinstance(devices, Mapping) else None
        classes: list[str] = []
        selections: list[dict[str, Any]] = summary["selections"]
        for request in requests if isinstance(requests, list) else []:
            if not isinstance(request, Mapping):
                continue
            alternatives = request.get("firstAvailable")
            if isinstance(alternatives, list):
                options = [a for a in alternatives if isinstance(a, Mapping)]
            else:
                exact = request.get("exactly")
                options = [exact if isinstance(exact, Mapping) else request]  # v1 / v1beta1 shape
            count = whole = 0
            for option in options:
                device_class = option.get("deviceClassName")
                if isinstance(device_class, str):
                    classes.append(device_class)
                    profiles = pinned_profiles(option.get("selectors"))
                    selections.append({"deviceClass": device_class, "profiles": profiles})
                if self.is_accelerator_class(device_class):
                    count = max(count, _device_count(option))
                    if not self.is_slice_class(device_class):
                        whole = max(whole, _device_count(option))
            summary["requests"][str(request.get("name", ""))] = count
            summary["devices"] += count
            summary["wholeDevices"] += whole
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
    def whole_devices(self) -> int:
        return sum(c["wholeDevices"] for c in self.items)

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


def pinned_profiles(selectors: Any) -> list[str]:
    """The MIG profiles a request's selectors allow at most; [ANY_PROFILE] when they pin none.

    Every selector must hold (resource.k8s.io/v1 DeviceSelector), so one that pins the profile is
    enough, and several pin what they share. A selector pins it only when its CEL expression is,
    at its top, a chain of `&&` with a term `device.attributes['gpu.nvidia.com'].profile == '<p>'`
    (either side) or `... .profile in ['<p>', ...]`: anything else (`||`, `!=`, `?:`, a capacity
    test, a regex, a profile in another domain) proves nothing, so such a request may get any profile.
    """
    pinned: frozenset[str] | None = None
    for selector in selectors if isinstance(selectors, list) else []:
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        found = _expression_profiles(expression) if isinstance(expression, str) else None
        if found is not None:
            pinned = found if pinned is None else pinned & found
    return [ANY_PROFILE] if pinned is None else sorted(pinned)


@lru_cache(maxsize=256)  # a namespace's few templates, read on every pod that uses them; 10 KiB texts at most
def _expression_profiles(expression: str) -> frozenset[str] | None:
    try:
        found = celsyntax.tokens(expression)[:-1]  # without the `end` token
    except celsyntax.CelSyntaxError:
        return None
    terms: list[list[celsyntax.Token]] = [[]]
    depth = 0
    for token in found:
        if token.text in ("(", "[", "{"):
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and token.text in ("||", "?", ":"):
            return None  # the top is no chain of `&&`
        if depth == 0 and token.text == "&&":
            terms.append([])
        else:
            terms[-1].append(token)
    pinned: set[str] | None = None
    for term in terms:
        profiles = _term_profiles(term)
        if profiles is not None:
            pinned = profiles if pinned is None else pinned & profiles
    return None if pinned is None else frozenset(pinned)


def _term_profiles(term: list[celsyntax.Token]) -> set[str] | None:
    """{p} for `<profile> == 'p'` or `'p' == <profile>`; the list's items for `<profile> in [...]`."""
    texts = [t.text for t in term]
    for operator in ("==", "in"):
        if texts.count(operator) != 1:
            continue
        at = texts.index(operator)
        left, right = term[:at], term[at + 1 :]
        if _is_profile_attribute(left):
            values = _string_list(right) if operator == "in" else _single_string(right)
        elif operator == "==" and _is_profile_attribute(right):
            values = _single_string(left)
        else:
            continue
        return set(values) if values is not None else None
    return None


def _is_profile_attribute(tokens: list[celsyntax.Token]) -> bool:
    """`device.attributes['gpu.nvidia.com'].profile` or `device.attributes['gpu.nvidia.com']['profile']`."""
    texts = [t.text for t in tokens]
    if len(tokens) < 8 or texts[:4] != ["device", ".", "attributes", "["]:
        return False
    if _literal(tokens[4]) != MIG_PROFILE_DOMAIN or texts[5] != "]":
        return False
    rest = tokens[6:]
    if [t.text for t in rest] == [".", MIG_PROFILE_ATTRIBUTE]:
        return True
    return len(rest) == 3 and rest[0].text == "[" and _literal(rest[1]) == MIG_PROFILE_ATTRIBUTE and rest[2].text == "]"


def _single_string(tokens: list[celsyntax.Token]) -> list[str] | None:
    value = _literal(tokens[0]) if len(tokens) == 1 else None
    return None if value is None else [value]


def _string_list(tokens: list[celsyntax.Token]) -> list[str] | None:
    if len(tokens) < 2 or tokens[0].text != "[" or tokens[-1].text != "]":
        return None
    values: list[str] = []
    for index, token in enumerate(tokens[1:-1]):
        if index % 2 == 1:
            if token.text != ",":
                return None
            continue
        value = _literal(token)
        if value is None:
            return None
        values.append(value)
    return values


def _literal(token: celsyntax.Token) -> str | None:
    """A plain string literal's value: 'x' or "x", no escapes, no raw or bytes prefix, not triple-quoted."""
    text = token.text
    if token.kind != "string" or len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    value = text[1:-1]
    if "\\" in value or text[0] in value:
        return None
    return value


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
