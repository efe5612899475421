"""Where pod templates live in each workload kind, and what to call them in messages: the one table of kinds.

A rule looks at Targets, found here: the object itself (object_target), or each pod template of
a workload kind (pod_template_targets, what autogen extends a Pod rule to).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .pointer import Path, is_map
from .pointer import get_path as get_path  # re-exported: the engine's one walker, imported from here too

# finds (path to a pod template, description) pairs in one object
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


def _app_wrapper(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
    """Each pod set of each wrapped component: `podSets[].path` is a dotted path inside the
    component (`template.spec.template`), where `name[i]` indexes a list. A component without
    declared podSets has the pod sets AppWrapper infers for its kind (_inferred_pod_sets); declared
    ones win, as AppWrapper's controller takes them (project-codeflare/appwrapper pkg/utils
    InferPodSets, used only when a component declares none)."""
    components = get_path(obj, ("spec", "components"))
    for index, component in enumerate(components if isinstance(components, list) else []):
        pod_sets = component.get("podSets") if is_map(component) else None
        if not (isinstance(pod_sets, list) and pod_sets):
            for number, inferred in enumerate(_inferred_pod_sets(component)):
                yield ("spec", "components", index, *inferred), f"pod set {number} of component {index} of {owner}"
            continue
        for number, pod_set in enumerate(pod_sets):
            relative = _dotted_path(pod_set.get("path")) if is_map(pod_set) else None
            if relative is None:
                continue
            path: Path = ("spec", "components", index, *relative)
            if isinstance(get_path(obj, path), Mapping):
                yield path, f"pod set {number} of component {index} of {owner}"


# The kinds (group, version, kind) whose pod sets AppWrapper infers when a component declares none
# (project-codeflare/appwrapper pkg/utils/utils.go InferPodSets and templatesForGVK): batch/v1 Job,
# jobset.x-k8s.io/v1alpha2 JobSet, kubeflow.org/v1 PyTorchJob (its Master and Worker replicas),
# ray.io/v1 RayCluster and RayJob, apps/v1 Deployment and StatefulSet, and a v1 Pod (the template
# itself). Their templates are read through the kind table, as for the kinds themselves.
APP_WRAPPER_INFERRED: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("batch", "v1", "Job"),
        ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        ("kubeflow.org", "v1", "PyTorchJob"),
        ("ray.io", "v1", "RayCluster"),
        ("ray.io", "v1", "RayJob"),
        ("apps", "v1", "Deployment"),
        ("apps", "v1", "StatefulSet"),
        ("", "v1", "Pod"),
    }
)
_PYTORCH_INFERRED_ROLES = ("Master", "Worker")


def _inferred_pod_sets(component: Any) -> list[Path]:
    """The pod templates AppWrapper infers in one component, relative to it (`template`, ...)."""
    template = component.get("template") if is_map(component) else None
    if not is_map(template):
        return []
    api_version = template.get("apiVersion")
    group, _, version = api_version.rpartition("/") if isinstance(api_version, str) else ("", "", "")
    kind = str(template.get("kind"))
    if (group, version, kind) not in APP_WRAPPER_INFERRED:
        return []
    if kind == "Pod":
        return [("template",)] if is_map(template.get("spec")) else []
    entry = TEMPLATED.get(kind)
    if entry is None or entry.find is None:
        return []
    found = [path for path, _ in entry.find(template, kind)]
    if kind == "PyTorchJob":  # AppWrapper infers these two replica types only
        found = [path for path in found if path[2] in _PYTORCH_INFERRED_ROLES]
    return [("template", *path) for path in found]


_PATH_ELEMENT = re.compile(r"([A-Za-z0-9_-]+)(?:\[(\d+)\])?")


def _dotted_path(text: object) -> Path | None:
    if not isinstance(text, str) or not text:
        return None
    out: list[str | int] = []
    for element in text.split("."):
        found = _PATH_ELEMENT.fullmatch(element)
        if found is None:
            return None
        out.append(found.group(1))
        if found.group(2) is not None:
            out.append(int(found.group(2)))
    return tuple(out)


def _leader_worker_set(obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
    for field, role in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        path: Path = ("spec", "leaderWorkerTemplate", field)
        if isinstance(get_path(obj, path), Mapping):
            yield path, f"{role} template of {owner}"


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One kind a rule can target: THE table that autogen, the cluster audit's list of resources, the
    export's resourceRules and the webhook registration (rules:, matchConditions) derive from."""

    kind: str
    group: str  # "" for the core API
    versions: tuple[str, ...]  # served versions, newest first (the cluster audit lists the first served)
    plural: str  # the resource name in webhook rules and API paths
    templates: tuple[str, ...]  # where the pod specs live ("" entries: none known), for docs and matchConditions
    find: TemplateFinder | None  # None: no pod templates (a Pod's spec is its own; DRA claims; TrainJob)
    # False: the webhook never mutates it (the engine skips its mutations, the registration does not send it)
    mutated: bool = True
    # False: Pod rules do not extend to its templates; rules that name the kind still see its pod specs
    autogen: bool = True
    # True: its pods come from an object admission cannot see (a TrainJob's TrainingRuntime), so
    # `gpu: true` counts it as asking for accelerators (matching.gate) and `gpu: false` never matches it
    pods_elsewhere: bool = False

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)


KUBEFLOW = "kubeflow.org"
# Versions and plurals from each project's API types: apps/v1 and batch/v1 (Kubernetes);
# jobset.x-k8s.io/v1alpha2 (kubernetes-sigs/jobset api/jobset/v1alpha2); kubeflow.org/v1 for
# PyTorchJob, TFJob, XGBoostJob and PaddleJob (kubeflow/training-operator pkg/apis/kubeflow.org/v1),
# MPIJob v2beta1 (kubeflow/mpi-operator) and v1 (training-operator); ray.io/v1 and v1alpha1
# (ray-project/kuberay ray-operator/apis); leaderworkerset.x-k8s.io/v1 (kubernetes-sigs/lws);
# RayService ray.io/v1 with its cluster under spec.rayClusterConfig (kuberay ray-operator/apis/ray/v1
# rayservice_types.go); AppWrapper workload.codeflare.dev/v1beta2, whose spec.components[] wrap any
# pod-creating object and name each pod template by podSets[].path (project-codeflare/appwrapper
# api/v1beta2/appwrapper_types.go); TrainJob trainer.kubeflow.org/v1alpha1, which has no pod
# template (its pods come from the TrainingRuntime it references; kubeflow/trainer
# pkg/apis/trainer/v1alpha1); ResourceClaim and ResourceClaimTemplate resource.k8s.io/v1 (DRA, GA in
# Kubernetes 1.34). Kueue manages RayService, AppWrapper and TrainJob by default (kubernetes-sigs/kueue
# config/components/manager/controller_manager_config.yaml), so the queue rules must see them.
KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("Pod", "", ("v1",), "pods", ("spec",), None),
    WorkloadKind("Deployment", "apps", ("v1",), "deployments", ("spec.template",), _single("spec", "template")),
    WorkloadKind("StatefulSet", "apps", ("v1",), "statefulsets", ("spec.template",), _single("spec", "template")),
    WorkloadKind("DaemonSet", "apps", ("v1",), "daemonsets", ("spec.template",), _single("spec", "template")),
    # Never mutated: a Deployment's controller replaces a ReplicaSet whose template differs from its
    # Deployment's, forever (the Deployment's own template is mutated; a bare ReplicaSet's pods are
    # mutated as pods). Validated like any workload.
    WorkloadKind(
        "ReplicaSet", "apps", ("v1",), "replicasets", ("spec.template",), _single("spec", "template"), mutated=False
    ),
    WorkloadKind("Job", "batch", ("v1",), "jobs", ("spec.template",), _single("spec", "template")),
    WorkloadKind(
        "CronJob",
        "batch",
        ("v1",),
        "cronjobs",
        ("spec.jobTemplate.spec.template",),
        _single("spec", "jobTemplate", "spec", "template"),
    ),
    WorkloadKind(
        "JobSet",
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "jobsets",
        ("spec.replicatedJobs[*].template.spec.template",),
        _jobset,
    ),
    WorkloadKind(
        "PyTorchJob",
        KUBEFLOW,
        ("v1",),
        "pytorchjobs",
        ("spec.pytorchReplicaSpecs.*.template",),
        _replica_specs("pytorchReplicaSpecs"),
    ),
    WorkloadKind(
        "TFJob", KUBEFLOW, ("v1",), "tfjobs", ("spec.tfReplicaSpecs.*.template",), _replica_specs("tfReplicaSpecs")
    ),
    WorkloadKind(
        "MPIJob",
        KUBEFLOW,
        ("v2beta1", "v1"),
        "mpijobs",
        ("spec.mpiReplicaSpecs.*.template",),
        _replica_specs("mpiReplicaSpecs"),
    ),
    WorkloadKind(
        "XGBoostJob",
        KUBEFLOW,
        ("v1",),
        "xgboostjobs",
        ("spec.xgbReplicaSpecs.*.template",),
        _replica_specs("xgbReplicaSpecs"),
    ),
    WorkloadKind(
        "PaddleJob",
        KUBEFLOW,
        ("v1",),
        "paddlejobs",
        ("spec.paddleReplicaSpecs.*.template",),
        _replica_specs("paddleReplicaSpecs"),
    ),
    WorkloadKind(
        "RayJob",
        "ray.io",
        ("v1", "v1alpha1"),
        "rayjobs",
        ("spec.rayClusterSpec.headGroupSpec.template", "spec.rayClusterSpec.workerGroupSpecs[*].template"),
        _ray(("spec", "rayClusterSpec")),
    ),
    WorkloadKind(
        "RayCluster",
        "ray.io",
        ("v1", "v1alpha1"),
        "rayclusters",
        ("spec.headGroupSpec.template", "spec.workerGroupSpecs[*].template"),
        _ray(("spec",)),
    ),
    WorkloadKind(
        "RayService",
        "ray.io",
        ("v1",),
        "rayservices",
        ("spec.rayClusterConfig.headGroupSpec.template", "spec.rayClusterConfig.workerGroupSpecs[*].template"),
        _ray(("spec", "rayClusterConfig")),
        # its RayCluster passes admission as a RayCluster when the KubeRay operator creates it
        autogen=False,
    ),
    WorkloadKind(
        "AppWrapper",
        "workload.codeflare.dev",
        ("v1beta2",),
        "appwrappers",
        ("spec.components[*].<podSets[*].path>",),
        _app_wrapper,
        # the wrapped Jobs, JobSets, Deployments... pass admission as themselves when the AppWrapper
        # controller creates them, and no fixed path reaches its templates (registration, export)
        autogen=False,
    ),
    WorkloadKind("TrainJob", "trainer.kubeflow.org", ("v1alpha1",), "trainjobs", (), None, pods_elsewhere=True),
    WorkloadKind("ResourceClaim", "resource.k8s.io", ("v1",), "resourceclaims", (), None),
    WorkloadKind("ResourceClaimTemplate", "resource.k8s.io", ("v1",), "resourceclaimtemplates", (), None),
    WorkloadKind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        ("v1",),
        "leaderworkersets",
        ("spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate"),
        _leader_worker_set,
    ),
)
BY_KIND: dict[str, WorkloadKind] = {k.kind: k for k in KINDS}
# kinds with pod templates
TEMPLATED: dict[str, WorkloadKind] = {k.kind: k for k in KINDS if k.find is not None}
# what autogen extends a Pod rule to
WORKLOADS: dict[str, WorkloadKind] = {k.kind: k for k in TEMPLATED.values() if k.autogen}
WORKLOAD_KINDS: frozenset[str] = frozenset(WORKLOADS)
UNMUTATED_KINDS: frozenset[str] = frozenset(k.kind for k in KINDS if not k.mutated)


def pods_elsewhere(obj: Mapping[str, Any]) -> bool:
    """Whether the object is of a kind whose pods admission cannot see (WorkloadKind.pods_elsewhere)."""
    entry = BY_KIND.get(str(obj.get("kind")))
    return entry is not None and entry.pods_elsewhere and api_group(obj) == entry.group


def api_group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def object_name(obj: Mapping[str, Any]) -> str:
    """name, or generateName for objects made by controllers (Pods of a ReplicaSet, Jobs of a JobSet)."""
    metadata = obj.get("metadata")
    name = metadata.get("name") or metadata.get("generateName") if is_map(metadata) else None
    return name or "<unnamed>"


def owner_name(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind', 'object')} {object_name(obj)}"


@dataclass(frozen=True, slots=True)
class Target:
    """What a rule looks at inside an object: the object itself, or one pod template of it."""

    description: str  # for messages: "pod web-0", "replica Worker of PyTorchJob llama2-training"
    root: tuple[str | int, ...]  # path to the object or template ({metadata, spec})
    pod_specs: tuple[tuple[str | int, ...], ...]  # pod specs this target governs
    is_pod: bool  # a real Pod (not a template): priority and defaulting rules differ

    @property
    def metadata(self) -> tuple[str | int, ...]:
        return (*self.root, "metadata")

    @property
    def pod_metadata(self) -> tuple[tuple[str | int, ...], ...]:
        """The metadata of each pod this target governs: the sibling of each of its pod specs."""
        return tuple((*path[:-1], "metadata") for path in self.pod_specs)


def pod_template_targets(obj: Mapping[str, Any]) -> list[Target]:
    """One target per pod template of a known workload kind (empty for anything else)."""
    entry = TEMPLATED.get(str(obj.get("kind")))
    if entry is None or entry.find is None or api_group(obj) != entry.group:
        return []
    owner = owner_name(obj)
    return [
        Target(description=desc, root=path, pod_specs=((*path, "spec"),), is_pod=False)
        for path, desc in entry.find(obj, owner)
    ]


POD_SPEC: tuple[tuple[str | int, ...], ...] = (("spec",),)  # a Pod's own spec


def pod_spec_paths(obj: Mapping[str, Any]) -> tuple[tuple[str | int, ...], ...]:
    """The pod specs of the whole object: POD_SPEC itself for a Pod, else each of its templates'.
    (object_target's, without the description the GPU count of every audited object does not need.)"""
    if obj.get("kind") == "Pod" and api_group(obj) == "":
        return POD_SPEC
    return tuple(t.pod_specs[0] for t in pod_template_targets(obj))


def object_target(obj: Mapping[str, Any]) -> Target:
    """The whole object; its pod specs are its own (a Pod) or all of its templates'."""
    specs = pod_spec_paths(obj)
    if specs is POD_SPEC:
        # Pods made by controllers reach admission with generateName only ("web-7d9f-"): name that.
        return Target(description=f"pod {object_name(obj)}", root=(), pod_specs=specs, is_pod=True)
    return Target(description=owner_name(obj), root=(), pod_specs=specs, is_pod=False)
