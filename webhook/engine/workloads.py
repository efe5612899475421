"""Where pod templates live in each workload kind (DESIGN §4), and what to call them in messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .model import Target
from .pointer import Path

# kind -> (API groups it may come from, finder of (path to template, description) pairs)
TemplateFinder = Callable[[Mapping[str, Any], str], Iterator[tuple[Path, str]]]


def _single(*path: str | int) -> TemplateFinder:
    def find(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
        if isinstance(get_path(obj, path), Mapping):
            yield path, f"pod template of {owner}"

    return find


def _replica_specs(field: str) -> TemplateFinder:
    def find(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
        specs = get_path(obj, ("spec", field))
        if isinstance(specs, Mapping):
            for role, spec in specs.items():
                if isinstance(spec, Mapping) and isinstance(spec.get("template"), Mapping):
                    yield ("spec", field, role, "template"), f"replica {role} of {owner}"

    return find


def _jobset(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
    jobs = get_path(obj, ("spec", "replicatedJobs"))
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        path: Path = ("spec", "replicatedJobs", index, "template", "spec", "template")
        if isinstance(get_path(obj, path), Mapping):
            name = job.get("name", index) if isinstance(job, Mapping) else index
            yield path, f"replicated job {name} of {owner}"


def _ray(prefix: Path) -> TemplateFinder:
    def find(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
        head: Path = (*prefix, "headGroupSpec", "template")
        if isinstance(get_path(obj, head), Mapping):
            yield head, f"head group of {owner}"
        groups = get_path(obj, (*prefix, "workerGroupSpecs"))
        for index, group in enumerate(groups if isinstance(groups, list) else []):
            path: Path = (*prefix, "workerGroupSpecs", index, "template")
            if isinstance(get_path(obj, path), Mapping):
                name = group.get("groupName", index) if isinstance(group, Mapping) else index
                yield path, f"worker group {name} of {owner}"

    return find


def _leader_worker_set(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
    for field, role in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        path: Path = ("spec", "leaderWorkerTemplate", field)
        if isinstance(get_path(obj, path), Mapping):
            yield path, f"{role} template of {owner}"


KUBEFLOW = "kubeflow.org"
WORKLOADS: dict[str, tuple[frozenset[str], TemplateFinder]] = {
    "Deployment": (frozenset({"apps"}), _single("spec", "template")),
    "StatefulSet": (frozenset({"apps"}), _single("spec", "template")),
    "DaemonSet": (frozenset({"apps"}), _single("spec", "template")),
    "ReplicaSet": (frozenset({"apps"}), _single("spec", "template")),
    "Job": (frozenset({"batch"}), _single("spec", "template")),
    "CronJob": (frozenset({"batch"}), _single("spec", "jobTemplate", "spec", "template")),
    "JobSet": (frozenset({"jobset.x-k8s.io"}), _jobset),
    "PyTorchJob": (frozenset({KUBEFLOW}), _replica_specs("pytorchReplicaSpecs")),
    "TFJob": (frozenset({KUBEFLOW}), _replica_specs("tfReplicaSpecs")),
    "MPIJob": (frozenset({KUBEFLOW}), _replica_specs("mpiReplicaSpecs")),
    "XGBoostJob": (frozenset({KUBEFLOW}), _replica_specs("xgbReplicaSpecs")),
    "PaddleJob": (frozenset({KUBEFLOW}), _replica_specs("paddleReplicaSpecs")),
    "RayJob": (frozenset({"ray.io"}), _ray(("spec", "rayClusterSpec"))),
    "RayCluster": (frozenset({"ray.io"}), _ray(("spec",))),
    "LeaderWorkerSet": (frozenset({"leaderworkerset.x-k8s.io"}), _leader_worker_set),
}
WORKLOAD_KINDS: frozenset[str] = frozenset(WORKLOADS)


def api_group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def object_name(obj: Mapping[str, Any]) -> str:
    """name, or generateName for objects made by controllers (Pods of a ReplicaSet, Jobs of a JobSet)."""
    metadata = obj.get("metadata")
    name = metadata.get("name") or metadata.get("generateName") if isinstance(metadata, Mapping) else None
    return name or "<unnamed>"


def owner_name(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind', 'object')} {object_name(obj)}"


def pod_template_targets(obj: Mapping[str, Any]) -> list[Target]:
    """One target per pod template of a known workload kind (empty for anything else)."""
    entry = WORKLOADS.get(str(obj.get("kind")))
    if entry is None or api_group(obj) not in entry[0]:
        return []
    owner = owner_name(obj)
    return [
        Target(description=desc, root=path, pod_specs=((*path, "spec"),), is_pod=False)
        for path, desc in entry[1](obj, owner)
    ]


def object_target(obj: Mapping[str, Any]) -> Target:
    """The whole object; its pod specs are its own (a Pod) or all of its templates'."""
    if obj.get("kind") == "Pod" and api_group(obj) == "":
        # Pods made by controllers reach admission with generateName only ("web-7d9f-"): name that.
        return Target(description=f"pod {object_name(obj)}", root=(), pod_specs=(("spec",),), is_pod=True)
    specs = tuple(t.pod_specs[0] for t in pod_template_targets(obj))
    return Target(description=owner_name(obj), root=(), pod_specs=specs, is_pod=False)


def get_path(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return None
        elif not isinstance(obj, Mapping):
            return None
        obj = obj[part] if isinstance(part, int) else obj.get(part)
    return obj
