"""What an UPDATE must change for a rule to act again: the object's fields the rule reads or writes.

Kubernetes ratchets CRD validation on UPDATE (KEP-4008): what the update did not touch is not
re-checked. The engine ratchets both phases the same way, per rule and target: on UPDATE a rule
acts on a target only if the update changed a field it reads (its CEL's paths under `object` and
`oldObject`, the labels its objectSelector reads) or writes (its mutations), or the target's pod
specs and metadata. So a no-op UPDATE (a finalizer removed, Kueue flipping `spec.suspend` on a
started Job) gets no patch the apiserver would refuse and no denial for what the object already
was. The webhook registration skips exactly such UPDATEs at the apiserver (its
`rule-inputs-changed` matchCondition is built from these fields: install/registration.py), so a request the
apiserver does not send is one the engine would not act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .cel import CompiledExpression
from .pointer import Path, get_path
from .workloads import Target

Fields = frozenset[tuple[str, ...]]
# metadata that no UPDATE changes
_FIXED_METADATA = frozenset({"name", "namespace", "uid", "generateName", "creationTimestamp"})


def rule_inputs(
    expressions: Iterable[CompiledExpression], touched: Iterable[str], object_selector: bool
) -> Fields | None:
    """The object fields (paths from the root) a rule reads or writes; None when that is the whole object."""
    fields: set[tuple[str, ...]] = set()
    if object_selector:
        fields.add(("metadata", "labels"))
    for field in touched:
        if field == "*":
            return None
        fields.add(tuple(field.split(".")))
    for expression in expressions:
        for root in ("object", "oldObject"):
            for path in expression.paths.get(root, ()):
                if not path or path == ("metadata",):
                    return None
                if path[0] in ("apiVersion", "kind") or (path[0] == "metadata" and path[1] in _FIXED_METADATA):
                    continue
                fields.add(path)
    return frozenset(fields)


def unchanged(inputs: Fields | None, target: Target, new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether an UPDATE from `old` to `new` left every input of the rule on this target as it was."""
    if inputs is None:
        return False
    # a template whole (its metadata too); a Pod's or a workload's own pod specs (its own metadata
    # changes on every write: resourceVersion, managedFields; the inputs name the fields that matter)
    own: list[Path] = [target.root] if target.root else list(target.pod_specs)
    return all(get_path(new, path) == get_path(old, path) for path in (*inputs, *own))
