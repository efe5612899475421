"""pointer.get_path over any Mapping (the engine hands rules read-only views of the received object), and
to_pointer from any iterable of steps, escaped as RFC 6901 says (`~` as `~0`, `/` as `~1`)."""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

from webhook.engine.pointer import get_path, is_map, to_pointer


def test_get_path_walks_mappings_that_are_not_dicts() -> None:
    view = MappingProxyType({"metadata": MappingProxyType({"labels": {"team": "a"}})})
    assert get_path(view, ("metadata", "labels", "team")) == "a"
    assert get_path(OrderedDict(spec=OrderedDict(x=[1, 2])), ("spec", "x", 1)) == 2
    assert get_path(view, ("metadata", "absent", "team")) is None
    assert get_path(["a"], ("x",)) is None  # a map step on a list
    assert get_path({"a": "text"}, ("a", "b")) is None  # a map step on a string
    assert is_map(view) and is_map({}) and not is_map(None) and not is_map([("a", 1)])


def test_to_pointer_takes_any_iterable_and_escapes() -> None:
    expected = "/metadata/labels/kueue.x-k8s.io~1queue-name"
    steps = ["metadata", "labels", "kueue.x-k8s.io/queue-name"]
    assert to_pointer(tuple(steps)) == expected
    assert to_pointer(steps) == expected  # a list (unhashable) is turned into a tuple first
    assert to_pointer(iter(steps)) == expected
    assert to_pointer(("spec", "containers", 0, "a~b")) == "/spec/containers/0/a~0b"
    assert to_pointer(()) == ""
