"""Where pod templates live in each workload kind, and what to call them in messages: the one table of kinds.

A rule looks at Targets, found here: the object itself (object_target), or each pod template of
a workload kind (pod_template_targets, what autogen extends a Pod rule to). Each row says where its
templates are as declarative paths (templatepaths.py walks them); the doors read the table as
KIND_TABLE.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .pointer import Path, is_map
from .pointer import get_path as get_path  # re-exported: the engine's one walker, imported from here too
from .templatepaths import TemplatePath


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
    if entry is None:
        return []
    found = [path for path, _ in entry.find_templates(template, kind)]
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


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One row of THE kind table: autogen, the cluster audit's list of resources, the export's CEL and
    resourceRules, the webhook registration (rules:, matchConditions), Kueue's suspend field and the
    rules' kind groups all derive from it. Adding a kind is one row (plus its tests)."""

    kind: str
    group: str  # "" for the core API
    versions: tuple[str, ...]  # served versions, newest first (the cluster audit lists the first served)
    plural: str  # the resource name in webhook rules and API paths
    # where its pod templates live (none: a Pod's spec is its own; DRA claims; TrainJob)
    pod_templates: tuple[TemplatePath, ...] = ()
    # the field Kueue's GenericJob.Suspend() sets (kubernetes-sigs/kueue pkg/controller/jobs/<framework>),
    # that setQueueName sets to true; None: Kueue gates the kind's pods instead, or none is known
    suspend: str | None = None
    # the kind groups a rule can name in match.kinds ({kindGroup: NAME}) instead of listing kinds
    groups: frozenset[str] = frozenset()
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

    @property
    def templates(self) -> tuple[str, ...]:
        """The template paths as the table spells them (docs, matchConditions)."""
        return tuple(t.path for t in self.pod_templates)

    @property
    def has_templates(self) -> bool:
        return bool(self.pod_templates)

    @property
    def declarative(self) -> bool:
        """Whether fixed paths reach every pod template (not AppWrapper's, named by data)."""
        return all(t.find is None for t in self.pod_templates)

    @property
    def multi_template(self) -> bool:
        """Whether one object can hold more than one pod template."""
        return len(self.pod_templates) > 1 or any(t.find is not None or t.split()[1] for t in self.pod_templates)

    @property
    def suspend_path(self) -> tuple[str, ...] | None:
        return None if self.suspend is None else tuple(self.suspend.split("."))

    def find_templates(self, obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
        """Each (path, description) of the object's pod templates, in the table's order."""
        for template in self.pod_templates:
            yield from template.walk(obj, owner)


# Kinds Kueue has an integration for (kubernetes-sigs/kueue pkg/controller/jobs, each framework's
# RegisterIntegration): which of them a cluster's Kueue manages is its integrations.frameworks, that the
# queue rules take as params.managedKinds.
KUEUE = "KueueWorkloads"
_KUEUE = frozenset({KUEUE})
# what each group stands for (schema, docs)
KIND_GROUPS: dict[str, str] = {KUEUE: "every kind Kueue has an integration for"}


def _pod_template(*fields: str) -> TemplatePath:
    return TemplatePath(".".join(fields), "pod template of {owner}")


def _replicas(field: str) -> TemplatePath:
    return TemplatePath(f"spec.{field}.*.template", "replica {each} of {owner}")


def _ray(prefix: str) -> tuple[TemplatePath, ...]:
    return (
        TemplatePath(f"{prefix}.headGroupSpec.template", "head group of {owner}"),
        TemplatePath(f"{prefix}.workerGroupSpecs[*].template", "worker group {each} of {owner}", "groupName"),
    )


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
# Suspend fields as each Kueue framework's Suspend() sets them: the Kubeflow v1 jobs (PyTorchJob,
# TFJob, XGBoostJob, PaddleJob, JAXJob) through `RunPolicy().Suspend = ptr.To(true)`
# (kubernetes-sigs/kueue pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go), MPIJob
# its own runPolicy the same way.
_RUN_POLICY_SUSPEND = "spec.runPolicy.suspend"
KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("Pod", "", ("v1",), "pods", groups=_KUEUE),
    WorkloadKind("Deployment", "apps", ("v1",), "deployments", (_pod_template("spec", "template"),), groups=_KUEUE),
    WorkloadKind("StatefulSet", "apps", ("v1",), "statefulsets", (_pod_template("spec", "template"),), groups=_KUEUE),
    WorkloadKind("DaemonSet", "apps", ("v1",), "daemonsets", (_pod_template("spec", "template"),)),
    # Never mutated: a Deployment's controller replaces a ReplicaSet whose template differs from its
    # Deployment's, forever (the Deployment's own template is mutated; a bare ReplicaSet's pods are
    # mutated as pods). Validated like any workload.
    WorkloadKind("ReplicaSet", "apps", ("v1",), "replicasets", (_pod_template("spec", "template"),), mutated=False),
    WorkloadKind(
        "Job", "batch", ("v1",), "jobs", (_pod_template("spec", "template"),), suspend="spec.suspend", groups=_KUEUE
    ),
    WorkloadKind("CronJob", "batch", ("v1",), "cronjobs", (_pod_template("spec", "jobTemplate", "spec", "template"),)),
    WorkloadKind(
        "JobSet",
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "jobsets",
        (TemplatePath("spec.replicatedJobs[*].template.spec.template", "replicated job {each} of {owner}", "name"),),
        suspend="spec.suspend",
        groups=_KUEUE,
    ),
    WorkloadKind(
        "PyTorchJob",
        KUBEFLOW,
        ("v1",),
        "pytorchjobs",
        (_replicas("pytorchReplicaSpecs"),),
        suspend=_RUN_POLICY_SUSPEND,
        groups=_KUEUE,
    ),
    WorkloadKind(
        "TFJob", KUBEFLOW, ("v1",), "tfjobs", (_replicas("tfReplicaSpecs"),), suspend=_RUN_POLICY_SUSPEND, groups=_KUEUE
    ),
    WorkloadKind(
        "MPIJob",
        KUBEFLOW,
        ("v2beta1", "v1"),
        "mpijobs",
        (_replicas("mpiReplicaSpecs"),),
        suspend="spec.runPolicy.suspend",
        groups=_KUEUE,
    ),
    WorkloadKind(
        "XGBoostJob",
        KUBEFLOW,
        ("v1",),
        "xgboostjobs",
        (_replicas("xgbReplicaSpecs"),),
        suspend=_RUN_POLICY_SUSPEND,
        groups=_KUEUE,
    ),
    WorkloadKind(
        "PaddleJob",
        KUBEFLOW,
        ("v1",),
        "paddlejobs",
        (_replicas("paddleReplicaSpecs"),),
        suspend=_RUN_POLICY_SUSPEND,
        groups=_KUEUE,
    ),
    # JAXJob: kubeflow/training-operator pkg/apis/kubeflow.org/v1/jax_types.go (kind JAXJob, plural
    # jaxjobs, JAXJobSpec.JAXReplicaSpecs `jaxReplicaSpecs` map of replica type to ReplicaSpec, and a
    # RunPolicy `runPolicy`). Kueue's integration `kubeflow.org/jaxjob` (kubernetes-sigs/kueue
    # pkg/controller/jobs/kubeflow/jobs/jaxjob) suspends through RunPolicy().Suspend; v0.13's default
    # integrations.frameworks lists it, v0.19's leaves it commented out, with the other Kubeflow v1 jobs.
    WorkloadKind(
        "JAXJob",
        KUBEFLOW,
        ("v1",),
        "jaxjobs",
        (_replicas("jaxReplicaSpecs"),),
        suspend=_RUN_POLICY_SUSPEND,
        groups=_KUEUE,
    ),
    WorkloadKind(
        "RayJob",
        "ray.io",
        ("v1", "v1alpha1"),
        "rayjobs",
        _ray("spec.rayClusterSpec"),
        suspend="spec.suspend",
        groups=_KUEUE,
    ),
    WorkloadKind(
        "RayCluster", "ray.io", ("v1", "v1alpha1"), "rayclusters", _ray("spec"), suspend="spec.suspend", groups=_KUEUE
    ),
    WorkloadKind(
        "RayService",
        "ray.io",
        ("v1",),
        "rayservices",
        _ray("spec.rayClusterConfig"),
        suspend="spec.rayClusterConfig.suspend",  # its Go field RayClusterSpec
        groups=_KUEUE,
        # its RayCluster passes admission as a RayCluster when the KubeRay operator creates it
        autogen=False,
    ),
    WorkloadKind(
        "AppWrapper",
        "workload.codeflare.dev",
        ("v1beta2",),
        "appwrappers",
        # the one special step: each AppWrapper names its pod templates' paths in its own data, or
        # AppWrapper infers them (_app_wrapper writes the messages: "pod set N of component I of ...")
        (TemplatePath("spec.components[*].<podSets[*].path>", "pod set of {owner}", find=_app_wrapper),),
        suspend="spec.suspend",
        groups=_KUEUE,
        # the wrapped Jobs, JobSets, Deployments... pass admission as themselves when the AppWrapper
        # controller creates them, and no fixed path reaches its templates (registration, export)
        autogen=False,
    ),
    WorkloadKind(
        "TrainJob",
        "trainer.kubeflow.org",
        ("v1alpha1",),
        "trainjobs",
        suspend="spec.suspend",
        groups=_KUEUE,
        pods_elsewhere=True,
    ),
    WorkloadKind("ResourceClaim", "resource.k8s.io", ("v1",), "resourceclaims"),
    WorkloadKind("ResourceClaimTemplate", "resource.k8s.io", ("v1",), "resourceclaimtemplates"),
    WorkloadKind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        ("v1",),
        "leaderworkersets",
        (
            TemplatePath("spec.leaderWorkerTemplate.leaderTemplate", "leader template of {owner}"),
            TemplatePath("spec.leaderWorkerTemplate.workerTemplate", "worker template of {owner}"),
        ),
        groups=_KUEUE,
    ),
)


class KindTable:
    """The rows of KINDS, looked up by kind name or by group."""

    def __init__(self, rows: tuple[WorkloadKind, ...]) -> None:
        self.rows = rows
        self._by_kind = {row.kind: row for row in rows}
        self.names: frozenset[str] = frozenset(self._by_kind)
        # what autogen extends a Pod rule to
        self.autogen: frozenset[str] = frozenset(r.kind for r in rows if r.has_templates and r.autogen)
        self.unmutated: frozenset[str] = frozenset(r.kind for r in rows if not r.mutated)
        self.groups: tuple[str, ...] = tuple(sorted({g for r in rows for g in r.groups}))

    def __iter__(self) -> Iterator[WorkloadKind]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def by_kind(self, kind: str) -> WorkloadKind | None:
        return self._by_kind.get(kind)

    def group(self, name: str) -> tuple[str, ...]:
        """The kinds of one group, in the table's order (empty for an unknown group)."""
        return tuple(r.kind for r in self.rows if name in r.groups)

    def kind_names(self, entries: Iterable[object]) -> list[str]:
        """The kind names of match.kinds entries: a name, an API mapping ({kind, group, ...}), or a
        group ({kindGroup: NAME}) standing for its kinds."""
        names: list[str] = []
        for entry in entries:
            if isinstance(entry, Mapping) and "kindGroup" in entry:
                names.extend(self.group(str(entry["kindGroup"])))
            elif isinstance(entry, Mapping):
                names.append(str(entry.get("kind")))
            else:
                names.append(str(entry))
        return names


KIND_TABLE = KindTable(KINDS)
BY_KIND: dict[str, WorkloadKind] = {k.kind: k for k in KINDS}
# kinds with pod templates
TEMPLATED: dict[str, WorkloadKind] = {k.kind: k for k in KINDS if k.has_templates}
# what autogen extends a Pod rule to
WORKLOADS: dict[str, WorkloadKind] = {k.kind: k for k in TEMPLATED.values() if k.autogen}
WORKLOAD_KINDS: frozenset[str] = KIND_TABLE.autogen
UNMUTATED_KINDS: frozenset[str] = KIND_TABLE.unmutated
# (API group, kind) -> the path of its Kueue suspend field
SUSPEND_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    (k.group, k.kind): k.suspend_path for k in KINDS if k.suspend_path is not None
}


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
    if entry is None or api_group(obj) != entry.group:
        return []
    owner = owner_name(obj)
    return [
        Target(description=desc, root=path, pod_specs=((*path, "spec"),), is_pod=False)
        for path, desc in entry.find_templates(obj, owner)
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
