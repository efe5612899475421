"""Every mutation's view(): the data export translates (webhook/export/mutations.py) instead of its class."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine import MUTATIONS, MutationView
from webhook.engine.cel import CelEnvironment
from webhook.engine.mutate import LABEL_VALUE
from webhook.engine.resources import DEFAULT

EXAMPLES = [(name, args) for name, kind in MUTATIONS.items() for args in kind.examples]


def view_of(name: str, args: Any) -> tuple[MutationView, tuple[Any, ...]]:
    mutation = MUTATIONS[name].build(args, CelEnvironment(DEFAULT).compile)
    return mutation.view(), mutation.cel()


@pytest.mark.parametrize(("name", "args"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXAMPLES)])
def test_a_view_names_its_registry_entry_and_holds_the_mutations_cel(name: str, args: Any) -> None:
    view, cel = view_of(name, args)
    assert view.name == name
    held = ([view.expression] if view.expression is not None else []) + [e for _, e in view.expressions]
    assert held == list(cel)


def test_a_view_holds_the_arguments_and_the_pattern_a_written_value_must_match() -> None:
    toleration, _ = view_of("addToleration", {"key": "nvidia.com/gpu", "effect": "NoSchedule"})
    assert toleration.arguments == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert not toleration.by_resource_prefix
    table, _ = view_of(
        "requireNodeAffinity", {"byResourcePrefix": [{"prefix": "amd.com/", "key": "k", "operator": "Exists"}]}
    )
    assert table.arguments is None and table.by_resource_prefix
    labels, _ = view_of("setLabels", {"values": {"a": "b"}, "override": True})
    assert (labels.field, labels.values, labels.override, labels.value_pattern) == (
        "labels",
        (("a", "b"),),
        True,
        LABEL_VALUE,
    )
    annotations, _ = view_of("setAnnotations", {"values": {"a": "b"}})
    assert annotations.field == "annotations" and annotations.value_pattern is None
    queue, _ = view_of("setQueueName", {"value": "team-a"})
    assert queue.value == "team-a" and queue.value_pattern is not None and queue.value_pattern.match("team-a")
    assert not queue.value_pattern.match("Team_A")
