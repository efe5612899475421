"""One path walker for the engine (pointer.get_path): the Patcher and the workload table read through it."""

from __future__ import annotations

import copy

import jsonpatch

from webhook.engine.patch import Patcher
from webhook.engine.pointer import get_path
from webhook.engine.workloads import get_path as workloads_get_path

DOCUMENT = {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}], "n": None}, "s": "text"}


def test_get_path_answers_none_for_anything_missing_never_raises() -> None:
    assert get_path(DOCUMENT, ("spec", "containers", 0, "name")) == "a"
    assert get_path(DOCUMENT, ()) is DOCUMENT
    for path in [
        ("spec", "containers", 1),  # past the end
        ("spec", "containers", -1),  # no counting from the end: paths come from the workload table
        ("spec", "containers", "0"),  # a str step on a list
        ("spec", 0),  # an int step on a map
        ("s", "x"),  # through a string
        ("spec", "n", "x"),  # through null
        ("missing", "x"),
    ]:
        assert get_path(DOCUMENT, path) is None, path


def test_the_patcher_and_the_workload_table_use_the_same_walker() -> None:
    assert workloads_get_path is get_path
    patcher = Patcher(copy.deepcopy(DOCUMENT))
    for path in [("spec", "containers", 0, "env", 0), ("spec", "containers", -1), ("s", "x")]:
        assert patcher.get(path) == get_path(DOCUMENT, path)


def test_set_replaces_an_existing_list_item_with_one_replace_operation() -> None:
    """addEnv with override replaces an env entry in place (it failed with 'parent is not an object')."""
    document = copy.deepcopy(DOCUMENT)
    patcher = Patcher(document)
    patcher.set(("spec", "containers", 0, "env", 0), {"name": "X", "value": "2"})
    assert patcher.operations == [
        {"op": "replace", "path": "/spec/containers/0/env/0", "value": {"name": "X", "value": "2"}}
    ]
    assert jsonpatch.apply_patch(DOCUMENT, patcher.operations) == document
