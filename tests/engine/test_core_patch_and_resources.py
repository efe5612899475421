"""Building blocks of the engine: JSON Pointer escaping, the Patcher, quantities, GPU counting."""

from __future__ import annotations

from collections import OrderedDict, UserDict
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType

import jsonpatch
import pytest

from webhook.cel.quantity import QuantityError, parse_quantity
from webhook.engine.patch import PatchConflict, Patcher
from webhook.engine.pointer import is_map, to_pointer
from webhook.engine.resources import DEFAULT, Accelerators


@pytest.mark.parametrize(
    ("path", "pointer"),
    [
        (("metadata", "labels", "kueue.x-k8s.io/queue-name"), "/metadata/labels/kueue.x-k8s.io~1queue-name"),
        (("metadata", "annotations", "a~b/c"), "/metadata/annotations/a~0b~1c"),
        (("spec", "containers", 0, "env"), "/spec/containers/0/env"),
        (("spec", "tolerations", "-"), "/spec/tolerations/-"),
        ((), ""),
    ],
)
def test_pointer_escaping(path: tuple, pointer: str) -> None:
    assert to_pointer(path) == pointer


def test_patcher_creates_missing_parents_in_one_operation_and_records_a_patch_that_replays() -> None:
    original = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    working = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    patcher = Patcher(working)
    patcher.set(("spec", "affinity", "nodeAffinity", "x"), {"y": 1})
    patcher.set(("metadata", "labels", "a/b"), "1")
    patcher.set(("metadata", "labels", "c"), "2")
    patcher.append(("spec", "tolerations"), {"key": "k"})
    patcher.append(("spec", "tolerations"), {"key": "k2"})
    patcher.append(("spec", "containers", 0, "env"), {"name": "A", "value": "1"})
    patcher.set(("metadata", "name"), "q")
    patcher.remove(("spec", "priority"))  # absent: nothing recorded
    assert patcher.operations == [
        {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"x": {"y": 1}}}},
        {"op": "add", "path": "/metadata/labels", "value": {"a/b": "1"}},
        {"op": "add", "path": "/metadata/labels/c", "value": "2"},
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "k"}]},
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "k2"}},
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "A", "value": "1"}]},
        {"op": "replace", "path": "/metadata/name", "value": "q"},
    ]
    assert jsonpatch.apply_patch(original, patcher.operations) == working


def test_recorded_values_do_not_alias_the_working_copy() -> None:
    patcher = Patcher({"spec": {}})
    patcher.append(("spec", "tolerations"), {"key": "a"})
    patcher.append(("spec", "tolerations"), {"key": "b"})
    assert patcher.operations[0]["value"] == [{"key": "a"}]


@pytest.mark.parametrize(
    "document", [{"metadata": {"labels": "oops"}}, {"metadata": ["x"]}, {"metadata": {"labels": ["x"]}}]
)
def test_patcher_reports_a_conflict_instead_of_corrupting(document: dict) -> None:
    with pytest.raises(PatchConflict):
        Patcher(document).set(("metadata", "labels", "a"), "b")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("1Gi", Decimal(2**30)),
        ("16G", Decimal("16e9")),
        ("1e3", Decimal(1000)),
        ("1E", Decimal("1e18")),
        ("2.5Ki", Decimal(2560)),
        (4, Decimal(4)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Qi", "--1", "1.2.3", True, None, "nan", "inf", "x" * 100])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def container(name: str, limits: dict | None = None, requests: dict | None = None, **extra: object) -> dict:
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources, **extra}


def test_pod_gpu_count_follows_the_scheduler() -> None:
    spec = {
        "initContainers": [
            container("download", limits={"nvidia.com/gpu": "4"}),  # regular init: runs alone
            container("proxy", limits={"nvidia.com/gpu": 1}, restartPolicy="Always"),  # sidecar: runs beside
        ],
        "containers": [
            container("a", limits={"nvidia.com/gpu": "1"}),
            container("b", requests={"nvidia.com/mig-1g.10gb": "1"}),
        ],
    }
    # app (1 + 1 MIG) + sidecar (1) = 3 < largest init container (4)
    assert DEFAULT.pod_count(spec) == 4
    spec["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    assert DEFAULT.pod_count(spec) == 3


def test_limit_alone_counts_and_non_accelerators_do_not() -> None:
    assert DEFAULT.container_count(container("t", limits={"nvidia.com/gpu": "8", "cpu": "4", "memory": "1Gi"})) == 8
    assert DEFAULT.container_count(container("t", limits={"example.com/fpga": "1"})) == 0
    assert DEFAULT.container_count({"name": "no-resources"}) == 0
    assert DEFAULT.container_count(container("bad", limits={"nvidia.com/gpu": "lots"})) == 0
    assert DEFAULT.pod_count(None) == 0
    assert DEFAULT.pod_count({"containers": "not-a-list"}) == 0


def test_a_request_is_counted_before_its_limit_and_each_resource_once() -> None:
    """The scheduler counts requests; an extended resource's request defaults to its limit when only
    the limit is set (k8s.io/api core/v1 ResourceRequirements). JSON numbers count as themselves:
    a bool is no quantity, and one past parse_quantity's range counts nothing, as its string does."""
    both = container("t", requests={"nvidia.com/gpu": 2}, limits={"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 3})
    assert DEFAULT.container_count(both) == 2 + 3
    assert DEFAULT.container_count(container("t", requests={"cpu": "1"}, limits={"nvidia.com/gpu": 4})) == 4
    assert DEFAULT.container_count(container("t", limits={"nvidia.com/gpu": True})) == 0
    assert DEFAULT.container_count(container("t", limits={"nvidia.com/gpu": -1})) == 0
    assert DEFAULT.container_count(container("t", limits={"nvidia.com/gpu": 10**30})) == 10**30
    for huge in (10**31, str(10**31)):
        assert DEFAULT.container_count(container("t", limits={"nvidia.com/gpu": huge})) == 0
    assert DEFAULT.container_count(container("t", limits={1: 5, "nvidia.com/gpu": "2"})) == 2  # YAML's int key


def test_accelerator_patterns_are_configuration() -> None:
    custom = Accelerators.from_patterns(["example.com/tpu", "vendor.io/gpu-*"])
    assert "vendor.io/gpu-large" in custom and "example.com/tpu" in custom
    assert "nvidia.com/gpu" not in custom
    assert "nvidia.com/mig-3g.40gb" in DEFAULT and "amd.com/gpu" in DEFAULT and "cpu" not in DEFAULT


def test_is_map_is_the_mapping_check_with_shortcuts() -> None:
    """`is_map` answers isinstance(value, Mapping), dict and None first (the engine asks it for most
    values of every object, and the ABC check costs thousands of instructions each time)."""
    for value in [{}, {"a": 1}, None, [], "", 0, OrderedDict(), UserDict(), MappingProxyType({}), (), set()]:
        assert is_map(value) == isinstance(value, Mapping), value
