"""What the rules of one evaluation read about the object: the working copy, its targets and their facts.

`WorkingCopy` holds the object as mutations leave it (copied on the first edit, then changed only
through its Patcher) and what is derived from it: the targets rules look at and their facts (pod
specs, containers, GPU counts, DRA claims, quantities), each computed once per state of the
working copy. The CEL that reads them runs in programs.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.cel.quantity import quantity_of

from .patch import Patcher
from .pointer import is_map, to_pointer
from .policy import Rule
from .request import AdmissionInput
from .resources import NO_CLAIMS, Accelerators, PodClaims
from .workloads import Target, get_path, object_target, pod_spec_paths, pod_template_targets


class WorkingCopy:
    """The object of one evaluation as the rules see it: the working copy, its targets and their facts."""

    def __init__(self, accelerators: Accelerators, admission: AdmissionInput) -> None:
        self.accelerators = accelerators
        self.admission = admission
        self.working: dict[str, Any] = admission.subject  # type: ignore[assignment]
        self.patcher: Patcher | None = None
        self._templates: list[Target] | None = None
        self._object_target: Target | None = None
        self._facts: dict[tuple[str | int, ...], TargetFacts] = {}
        # pod spec path -> accelerators it asks for in the object as received (Decision.accelerators)
        self._received: dict[tuple[str | int, ...], int] = {}

    def edit(self) -> Patcher:
        """The patcher of the working copy, made on the first edit.

        The working copy starts as a shallow copy of the object: the patcher copies what lies
        on an edit's path before changing it (patch.py), so the object as received (what
        ratcheting, Decision.accelerators and the audit's diff read) stays as it was.
        """
        if self.patcher is None:
            self.working = dict(self.working)
            self.patcher = Patcher(self.working)
        return self.patcher

    def version(self) -> int:
        """The working copy changes only through the Patcher: its operation count is the version."""
        return len(self.patcher.operations) if self.patcher is not None else 0

    def targets(self, rule: Rule) -> list[Target]:
        """What the rule looks at in the object: the object itself, or each pod template (autogen)."""
        kinds = rule.match.kinds
        kind = self.working.get("kind")
        if "*" in kinds or (isinstance(kind, str) and kind in kinds):  # the object is the tenant's: any type
            if self._object_target is None:
                self._object_target = object_target(self.working)
            return [self._object_target]
        if "Pod" in kinds and rule.autogen:
            if self._templates is None:
                self._templates = pod_template_targets(self.working)
            return self._templates
        return []

    def facts(self, target: Target) -> TargetFacts:
        """What every rule needs to know about a target, computed once per state of the working copy.

        Counting GPUs walks every container's resources; per rule it was a third of a request's
        cost. After an edit the references are re-taken, and what was read from the containers'
        resources is kept unless an edit reached into containers or replaced an ancestor.
        """
        version = self.version()
        cached = self._facts.get(target.root)
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and self.patcher is not None:
            edits = self.patcher.operations[cached.version :]
            if not edits_pod_specs(edits, target) and not (
                accelerators_read_annotations(self.accelerators) and edits_pod_annotations(edits, target)
            ):
                # labels, annotations: the pod specs read before are still what the working copy
                # holds (the same values, if not the same dicts once the object was copied)
                cached.version = version
                return cached
        pod_specs = [get_path(self.working, path) for path in target.pod_specs]
        facts = TargetFacts(version=version, pod_specs=pod_specs, containers=pod_containers(pod_specs), gpus=0)
        facts.pod_metadata = [get_path(self.working, path) for path in target.pod_metadata]
        accelerators = self.accelerators
        if not target.root and self.working.get("kind") in CLAIM_KINDS:
            facts.own_claims = [own_claim_summary(accelerators, self.working)]
        if (
            cached is not None
            and self.patcher is not None
            and not edits_containers(self.patcher.operations[cached.version :], target)
            and not (
                accelerators_read_annotations(accelerators)
                and edits_pod_annotations(self.patcher.operations[cached.version :], target)
            )
        ):
            facts.gpus, facts.claims = cached.gpus, cached.claims
            facts._container_gpus, facts._quantities = cached._container_gpus, cached._quantities
            facts._accelerated = cached._accelerated
            facts._whole_gpus = cached._whole_gpus
            facts._allocator_env = cached._allocator_env
        else:
            admission = self.admission
            facts.claims = [
                accelerators.pod_claims(spec, admission.resource_claims, admission.resource_claim_templates)
                for spec in pod_specs
            ]
            counts = [
                accelerators.pod_count(s, c, metadata=m)
                for s, c, m in zip(pod_specs, facts.claims, facts.pod_metadata, strict=True)
            ]
            facts.gpus = sum(counts)
            if version == 0:  # the object as received: Decision.accelerators needs no second count
                self._received.update(zip(target.pod_specs, counts, strict=True))
        self._facts[target.root] = facts
        return facts

    def received_accelerators(self) -> int:
        """Decision.accelerators: what the object as received asks for, reusing the counts rules made."""
        return object_accelerators(self.accelerators, self.admission, self._received)

    def gpu_otherwise(self, target: Target, container: Mapping[str, Any]) -> bool:
        """Whether a container has a GPU other than through its resources: an accelerator DRA claim, or
        an annotation-marked allocator's (resources.Allocator)."""
        accelerators = self.accelerators
        facts = self.facts(target)
        if any(accelerators.container_uses_accelerator_claims(container, c) for c in facts.claims):
            return True
        metadata = facts.pod_metadata or [None] * len(facts.pod_specs)
        return any(
            allocation.container is container
            for spec, meta in zip(facts.pod_specs, metadata, strict=True)
            for allocation in accelerators.allocations(spec, meta)
        )


CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})


def own_claim_summary(accelerators: Accelerators, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The claim (or template) under admission as CEL's `deviceClaims` shows a pod's claims.

    So one rule reads the devices, classes and pinned MIG profiles of a claim the same way whether
    the claim is admitted itself or resolved for a pod that uses it.
    """
    kind = str(obj.get("kind"))
    metadata = obj.get("metadata")
    name = str(metadata.get("name", "")) if is_map(metadata) else ""
    spec = obj.get("spec")
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if is_map(spec) else None
    return accelerators.claim_summary(name, kind, name, spec if is_map(spec) else {})


def object_accelerators(
    accelerators: Accelerators,
    admission: AdmissionInput,
    counted: Mapping[tuple[str | int, ...], int] | None = None,
) -> int:
    """Accelerators the admission's object asks for, summed over all its pod specs (`counted`: known already)."""
    document = admission.subject
    if not isinstance(document, dict):
        return 0
    total = 0
    for path in pod_spec_paths(document):
        count = counted.get(path) if counted is not None else None
        if count is None:
            spec = get_path(document, path)
            claims = accelerators.pod_claims(spec, admission.resource_claims, admission.resource_claim_templates)
            count = accelerators.pod_count(spec, claims, metadata=get_path(document, (*path[:-1], "metadata")))
        total += count
    return total


@dataclass(slots=True)
class TargetFacts:
    version: int  # of the working copy these were read from
    pod_specs: list[Any]
    containers: list[Any]
    gpus: int
    claims: list[PodClaims] = field(default_factory=list)  # per pod spec, in pod_specs order
    # a ResourceClaim or ResourceClaimTemplate under admission, summarised as its pods' claims are
    own_claims: list[dict[str, Any]] = field(default_factory=list)
    pod_metadata: list[Any] = field(default_factory=list)  # per pod spec, the pod's metadata beside it
    _allocator_env: dict[str, dict[str, list[str]]] | None = None
    _container_gpus: dict[str, int] | None = None
    _quantities: dict[str, float] | None = None
    _accelerated: bool | None = None
    _whole_gpus: int | None = None

    def whole_gpus(self, accelerators: Accelerators) -> int:
        """Whole GPUs the target's pods ask for: gpus without MIG slices, time-sliced replicas, vGPUs and shares."""
        if self._whole_gpus is None:
            claims_per_spec = self.claims or [NO_CLAIMS] * len(self.pod_specs)
            self._whole_gpus = sum(
                accelerators.pod_count(spec, claims, whole_only=True)
                for spec, claims in zip(self.pod_specs, claims_per_spec, strict=True)
            )
        return self._whole_gpus

    def accelerated(self) -> bool:
        """Whether the target asks for accelerators, as `gpu:` matching counts them (once per facts, not per rule).

        An unresolved DRA claim counts as an accelerator (resources.py explains why). A
        ResourceClaim or template under admission is accelerated when it asks for accelerator classes.
        """
        if self._accelerated is None:
            self._accelerated = (
                self.gpus > 0
                or any(claims.unresolved for claims in self.claims)
                or any(claim["accelerator"] for claim in self.own_claims)
            )
        return self._accelerated

    def container_gpus(self, accelerators: Accelerators) -> dict[str, int]:
        """Container name -> accelerators (extended resources and DRA claims it names).

        Names are unique within a pod spec, not across the templates of one object: every
        Kubeflow replica's container is called `pytorch`. A name whose containers differ in
        count maps to -1, and the rewritten containerGpuCount(c) then asks the Python helper
        for that container (celhelpers.py).
        """
        if self._container_gpus is None:
            found: dict[str, int] = {}
            claims_per_spec = self.claims or [NO_CLAIMS] * len(self.pod_specs)
            metadata = self.pod_metadata or [None] * len(self.pod_specs)
            for spec, claims, meta in zip(self.pod_specs, claims_per_spec, metadata, strict=True):
                allocated = {id(a.container): a.devices for a in accelerators.allocations(spec, meta)}
                for container in pod_containers([spec]):
                    if not is_map(container) or not isinstance(container.get("name"), str):
                        continue
                    count = accelerators.container_count(container)
                    count += accelerators.container_claim_count(container, claims)
                    count += allocated.get(id(container), 0)
                    name = container["name"]
                    found[name] = count if found.get(name, count) == count else -1
            self._container_gpus = found
        return self._container_gpus

    def allocator_env(self, accelerators: Accelerators) -> dict[str, dict[str, list[str]]]:
        """CEL's allocatorEnv: container name -> the device variables an annotation-marked allocator
        writes into it (`writes`), those whose entries there are all the allocator's (`theirs`), and
        the allocator's envFrom ConfigMaps (`envFrom`) (resources.Allocation.env).

        A name that is an allocator's container in one pod spec and not in another (Kubeflow replicas
        share container names) maps to what they share: nothing is the allocator's that is not in each.
        """
        if self._allocator_env is None:
            found: dict[str, dict[str, list[str]]] = {}
            plain: set[str] = set()  # names of containers no allocator writes into
            metadata = self.pod_metadata or [None] * len(self.pod_specs)
            for spec, meta in zip(self.pod_specs, metadata, strict=True):
                allocated = {id(a.container): a for a in accelerators.allocations(spec, meta)}
                for container in pod_containers([spec]):
                    name = container.get("name") if is_map(container) else None
                    if not isinstance(name, str):
                        continue
                    allocation = allocated.get(id(container))
                    if allocation is None:
                        plain.add(name)
                        continue
                    entry = allocation.env()
                    before = found.get(name)
                    if before is not None:
                        entry = {
                            "writes": sorted({*before["writes"], *entry["writes"]}),
                            "theirs": [v for v in before["theirs"] if v in entry["theirs"]],
                            "envFrom": [n for n in before["envFrom"] if n in entry["envFrom"]],
                        }
                    found[name] = entry
            for name in plain & found.keys():
                found[name] = {"writes": found[name]["writes"], "theirs": [], "envFrom": []}
            self._allocator_env = found
        return self._allocator_env

    def quantities(self) -> dict[str, float]:
        """Every quantity written in the containers' resources, by its text (as CEL's string() gives it)."""
        if self._quantities is None:
            found: dict[str, float] = {}
            for container in self.containers:
                resources = container.get("resources") if is_map(container) else None
                if not is_map(resources):
                    continue
                for section in (resources.get("requests"), resources.get("limits")):
                    if is_map(section):
                        for value in section.values():
                            number = _quantity_value(value)
                            if number is not None:
                                found[str(value)] = number  # str(): the text CEL's string() gives
            self._quantities = found
        return self._quantities


def _quantity_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    number = quantity_of(str(value))
    return None if number is None else float(number)


def pod_containers(pod_specs: list[Any]) -> list[Any]:
    found: list[Any] = []
    for spec in pod_specs:
        if is_map(spec):
            # ephemeral containers (kubectl debug) run on the node as well: rules about what runs
            # there see them; they cannot request resources (core/v1 EphemeralContainerCommon)
            for field_name in ("initContainers", "containers", "ephemeralContainers"):
                value = spec.get(field_name)
                if isinstance(value, list):
                    found.extend(value)
    return found


def edits_pod_specs(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations writes into, or replaces, one of the target's pod specs."""
    return _writes_at(operations, [to_pointer(path) for path in target.pod_specs])


def accelerators_read_annotations(accelerators: Accelerators) -> bool:
    return bool(accelerators.allocators)


def edits_pod_annotations(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations writes into, or replaces, the annotations of a pod of the
    target (what an annotation-marked allocator reads: resources.Allocator)."""
    return _writes_at(operations, [to_pointer((*path, "annotations")) for path in target.pod_metadata])


def _writes_at(operations: list[dict[str, Any]], places: list[str]) -> bool:
    """Whether an operation writes at, into, or above (replacing it whole) one of these JSON pointers."""
    for operation in operations:
        path = operation["path"]
        for place in places:
            if path == place or path.startswith(place + "/") or place.startswith(path + "/"):
                return True
    return False


def edits_containers(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations may change the target's containers (conservative)."""
    specs = [to_pointer(path) + "/" for path in target.pod_specs]
    for operation in operations:
        path = operation["path"]
        if "ontainers" in path or "resourceClaims" in path or any(spec.startswith(path + "/") for spec in specs):
            return True  # into (init)containers or DRA claims, or an ancestor of the pod spec replaced
    return False
