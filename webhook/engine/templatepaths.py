"""Declarative pod-template paths and the one walker that finds them in an object.

A path is dotted field names with at most one "each" step: `[*]` for each item of a list
(`spec.replicatedJobs[*].template.spec.template`), `*` for each value of a map
(`spec.pytorchReplicaSpecs.*.template`). The export writes its CEL from the same steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .pointer import Path, get_path

EACH_ITEM = "[*]"  # each item of a list
EACH_VALUE = "*"  # each value of a map, named by its key

# finds (path to a pod template, description) pairs in one object, given its owner's name for messages
TemplateFinder = Callable[[Mapping[str, Any], str], Iterator[tuple[Path, str]]]

_STEP = re.compile(r"[^.\[\]]+|\[\*\]")


@dataclass(frozen=True, slots=True)
class TemplatePath:
    """Where one set of a kind's pod templates sits, and how messages name each template found.

    `label` is the message's words: `{owner}` is the object's kind and name, `{each}` the template's
    name: a list item's `name_field` (its index when the item has none), or a map value's key.
    `find` is set only where no declarative path can say it (AppWrapper's pod sets, named by data).
    """

    path: str
    label: str
    name_field: str | None = None
    find: TemplateFinder | None = None

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(_STEP.findall(self.path))

    def split(self) -> tuple[tuple[str, ...], str | None, tuple[str, ...]]:
        """(the fields before the each step, the each step or None, the fields after it)."""
        steps = self.steps
        for index, step in enumerate(steps):
            if step in (EACH_ITEM, EACH_VALUE):
                return steps[:index], step, steps[index + 1 :]
        return steps, None, ()

    def walk(self, obj: Mapping[str, Any], owner: str) -> Iterator[tuple[Path, str]]:
        """Each pod template (a mapping) at this path in `obj`, with its description."""
        if self.find is not None:
            yield from self.find(obj, owner)
            return
        prefix, each, rest = self.split()
        if each is None:
            if isinstance(get_path(obj, prefix), Mapping):
                yield prefix, self.label.format(owner=owner)
            return
        container = get_path(obj, prefix)
        members: Iterator[tuple[str | int, Any]]
        if each == EACH_ITEM:
            members = enumerate(container) if isinstance(container, list) else iter(())
        else:
            members = iter(container.items()) if isinstance(container, Mapping) else iter(())
        for step, member in members:
            path: Path = (*prefix, step, *rest)
            if isinstance(get_path(obj, path), Mapping):
                yield path, self.label.format(each=self._name(step, member), owner=owner)

    def _name(self, step: str | int, member: Any) -> Any:
        if self.name_field is not None and isinstance(member, Mapping):
            return member.get(self.name_field, step)
        return step
