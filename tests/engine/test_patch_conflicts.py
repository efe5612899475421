"""The Patcher on objects of any shape: an edit the object's shape prevents is a PatchConflict, never a crash,
and every edit it makes is recorded so that the apiserver, applying the patch to the object it sent,
gets the same object (RFC 6902; kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/
webhook/mutating/dispatcher.go applies the webhook's JSONPatch with evanphx/json-patch, which refuses an
`add` whose parent is missing: "doc is missing path").
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.patch import PatchConflict, Patcher
from webhook.engine.pointer import Path


def pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"team": "a"}, "annotations": "not-a-map"},
        "spec": {"containers": [{"name": "c", "env": "not-a-list"}], "tolerations": [], "nodeSelector": None},
    }


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        ("append", ("metadata", "labels"), "cannot append to /metadata/labels: not a list"),
        ("append", ("spec", "containers", 0, "env"), "not a list"),
        ("append", ("metadata", "name"), "not a list"),
        ("append", ("spec", "containers", 0, "name", "x"), "parent is not an object"),
        ("set", ("metadata", "annotations", "a"), "cannot set /metadata/annotations/a: parent is not an object"),
        ("set", ("spec", "containers", 3, "name"), "cannot set /spec/containers/3/name: no list item 3"),
        ("set", ("spec", "containers", -1, "name"), "no list item -1"),
        ("set", ("spec", "containers", 1, "name"), "cannot set /spec/containers/1/name: no list item 1"),
        ("set", ("metadata", 0, "x"), "cannot set /metadata/0/x: no list item 0"),
        ("set", ("metadata", "labels", 0, "x"), "no list item 0"),
        ("set", ("spec", "containers", "first", "name"), "parent is not an object"),
        ("set", ("spec", "containers", 1), "parent is not an object"),  # one past the end: no append by set
        ("set", ("spec", "containers", "x"), "parent is not an object"),
        ("set", ("spec", "containers", -1), "parent is not an object"),  # no index from the end in JSON Pointer
        (
            "set",
            ("spec", "initContainers", 0, "name"),
            "cannot set /spec/initContainers/0/name: parent is not an object",
        ),
        ("set", ("spec", "volumes", 0), "parent is not an object"),
        ("set", ("spec", "nodeSelector", "a", 0), "parent is not an object"),
        ("set", ("metadata", "name", "x", "y"), "parent is not an object"),
        ("append", ("spec", "overhead", 0, "list"), "parent is not an object"),
    ],
)
def test_an_edit_the_shape_prevents_is_a_conflict(edit: str, path: Path, message: str) -> None:
    document = pod()
    patcher = Patcher(copy.deepcopy(document))
    with pytest.raises(PatchConflict, match=re.escape(message)):
        getattr(patcher, edit)(path, {"k": "v"} if edit == "set" else "item")
    assert patcher.operations == []
    assert patcher.document == document


def test_missing_parents_are_added_in_one_operation() -> None:
    patcher = Patcher(pod())
    patcher.set(("spec", "nodeSelector", "gpu"), "true")  # a null parent counts as missing
    patcher.set(("spec", "affinity", "nodeAffinity", "x"), 1)
    patcher.append(("spec", "containers", 0, "ports"), {"containerPort": 80})
    patcher.append(("spec", "tolerations"), {"key": "nvidia.com/gpu"})
    patcher.set(("spec", "containers", 0, "image"), "x")  # through an existing list item
    # a null parent is missing even when the parent's parent holds the next step's name
    patcher.document["spec"]["priority"] = None
    patcher.set(("spec", "priority", "tolerations", "k"), "v")
    patcher.set(("spec", "containers", 0), {"name": "d"})  # an existing list item: replaced
    assert patcher.operations == [
        {"op": "add", "path": "/spec/nodeSelector", "value": {"gpu": "true"}},
        {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"x": 1}}},
        {"op": "add", "path": "/spec/containers/0/ports", "value": [{"containerPort": 80}]},
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "nvidia.com/gpu"}},
        {"op": "add", "path": "/spec/containers/0/image", "value": "x"},
        {"op": "add", "path": "/spec/priority", "value": {"tolerations": {"k": "v"}}},
        {"op": "replace", "path": "/spec/containers/0", "value": {"name": "d"}},
    ]


def test_remove_of_what_is_absent_records_nothing() -> None:
    patcher = Patcher(pod())
    patcher.remove(("metadata", "labels", "absent"))
    patcher.remove(("metadata", "annotations", "a"))  # a string parent
    patcher.remove(("spec", "containers", 0))  # a list parent: remove takes map entries only
    assert patcher.operations == []
    patcher.remove(("metadata", "labels", "team"))
    assert patcher.operations == [{"op": "remove", "path": "/metadata/labels/team"}]


# -- any shape, any path ---------------------------------------------------------------------------

_keys = st.sampled_from(("metadata", "labels", "spec", "a/b", "c~d", "x"))
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(("", "s")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)
_paths = st.lists(_keys | st.integers(-1, 3), min_size=1, max_size=4).map(tuple)
_edits = st.lists(st.tuples(st.sampled_from(("set", "append", "remove")), _paths, _json), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=4), _edits)
def test_edits_apply_as_recorded_or_conflict(document: dict[str, Any], edits: list[tuple[str, Path, Any]]) -> None:
    """Whatever the object and the edits: each edit conflicts or is recorded; the recorded patch applied
    to the object as received gives the patcher's document; the object as received is never changed."""
    received = copy.deepcopy(document)
    patcher = Patcher(dict(document))  # shares everything below the root with `document`, as the engine does
    for edit, path, value in edits:
        before = len(patcher.operations)
        try:
            if edit == "remove":
                patcher.remove(path)
            else:
                getattr(patcher, edit)(path, value)
        except PatchConflict:
            assert len(patcher.operations) == before
    assert document == received
    assert jsonpatch.apply_patch(received, patcher.operations) == patcher.document
