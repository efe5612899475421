"""A small kustomize: renders the repository's `manifests/` tree without the kustomize binary.

It understands exactly the subset that tree uses — `resources` (files and directories),
`components` and JSON 6902 `patches` with a `target` — and refuses anything else, so it can
never silently render something different from `kubectl kustomize` (a test compares the two
on every overlay). That keeps `gpu-webhook manifests` usable where kubectl is missing (CI
images, the container itself) and testable without a subprocess.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.kubeyaml import plain_document, plain_documents

Object = dict[str, Any]
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "resources", "components", "patches"})
TARGET_FIELDS = frozenset({"group", "version", "kind", "name", "namespace"})
# kustomize's "legacy" output order: what others depend on first, webhook configurations last
# (registering a webhook before its backend exists would only produce failed calls)
KIND_ORDER = (
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
)
LAST_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class KustomizeError(ValueError):
    """The tree uses something this renderer does not support, or a patch does not apply."""


def build(directory: str | Path, components: list[str | Path] = ()) -> list[Object]:  # type: ignore[assignment]
    """Render a kustomization directory, plus extra components applied on top, in kustomize's order."""
    objects = _build(Path(directory), expect="Kustomization")
    for component in components:
        objects = _apply_component(Path(component), objects)
    return sort_objects(objects)


def sort_objects(objects: list[Object]) -> list[Object]:
    def rank(obj: Object) -> tuple[int, int]:
        kind = obj.get("kind", "")
        if kind in KIND_ORDER:
            return (0, KIND_ORDER.index(kind))
        if kind in LAST_KINDS:
            return (2, LAST_KINDS.index(kind))
        return (1, 0)

    return sorted(objects, key=rank)  # stable: same-rank objects keep their order


def _kustomization(directory: Path) -> Object:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            data = plain_document((directory / name).read_text()) or {}
            unknown = set(data) - SUPPORTED_FIELDS
            if unknown:
                raise KustomizeError(f"{directory / name}: unsupported fields {sorted(unknown)}")
            return data
    raise KustomizeError(f"no kustomization file in {directory}")


def _build(directory: Path, expect: str) -> list[Object]:
    data = _kustomization(directory)
    kind = data.get("kind", "Kustomization")
    if kind != expect:
        raise KustomizeError(f"{directory}: expected a {expect}, found a {kind}")
    objects = _resources(directory, data)
    for component in data.get("components") or []:
        objects = _apply_component(directory / component, objects)
    return _patch(directory, data, objects)


def _apply_component(directory: Path, objects: list[Object]) -> list[Object]:
    data = _kustomization(directory)
    if data.get("kind") != "Component":
        raise KustomizeError(f"{directory}: not a Component")
    return _patch(directory, data, objects + _resources(directory, data))


def _resources(directory: Path, data: Object) -> list[Object]:
    objects: list[Object] = []
    for entry in data.get("resources") or []:
        path = directory / entry
        if path.is_dir():
            objects += _build(path, expect="Kustomization")
        else:
            objects += [doc for doc in plain_documents(path.read_text()) if doc]
    return objects


def _patch(directory: Path, data: Object, objects: list[Object]) -> list[Object]:
    for index, entry in enumerate(data.get("patches") or []):
        where = f"{directory}: patches[{index}]"
        text = entry.get("patch") if "patch" in entry else (directory / entry["path"]).read_text()
        operations = plain_document(text)
        if not isinstance(operations, list):
            raise KustomizeError(f"{where}: only JSON 6902 patches (a list of operations) are supported")
        target = entry.get("target") or {}
        if not target or set(target) - TARGET_FIELDS:
            raise KustomizeError(f"{where}: a target with only {sorted(TARGET_FIELDS)} is required")
        matched = [i for i, obj in enumerate(objects) if _matches(obj, target)]
        if not matched:
            raise KustomizeError(f"{where}: target {target} matches no object")
        patch = jsonpatch.JsonPatch(operations)
        for i in matched:
            try:
                objects[i] = patch.apply(copy.deepcopy(objects[i]))
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                raise KustomizeError(f"{where}: {error}") from None
    return objects


def _matches(obj: Object, target: Object) -> bool:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    actual = {
        "group": group,
        "version": version,
        "kind": obj.get("kind"),
        "name": (obj.get("metadata") or {}).get("name"),
        "namespace": (obj.get("metadata") or {}).get("namespace"),
    }
    return all(actual[key] == value for key, value in target.items())
