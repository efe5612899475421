"""Find field references in CEL that a Pod cannot have (`podSpec.containerz`).

The rule environment declares every variable `dyn`, so the CEL checker accepts any
field name; the mistake would only show as a `no such key` error (or a `has()` that is
always false) on the first real request. Here a small CEL parser builds just enough of
a syntax tree to follow selections from the known variables (and the variables that
`all`/`exists`/`filter`/`map` bind over their lists) through the Pod field list of
`podfields`, and reports the first field that does not exist, with its offset in the
expression text. The parser is the one CEL syntax module (webhook/cel/celsyntax.py).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

from webhook.cel import celsyntax

from .podfields import (
    ANY,
    CONTAINER,
    KUBE_OBJECT,
    NAMESPACE,
    OBJECT_META,
    POD,
    POD_ONLY_SPEC_FIELDS,
    POD_SPEC,
    FieldType,
    ListOf,
    MapOf,
    Struct,
)

_MACROS = frozenset({"all", "exists", "exists_one", "filter", "map"})


@dataclass(frozen=True, slots=True)
class FieldProblem:
    offset: int  # where the bad field name starts in the expression text
    message: str


@dataclass(frozen=True, slots=True)
class Scope:
    """What the rule's variables are: depends on the kinds the rule matches and on autogen."""

    variables: dict[str, FieldType]
    autogen_object: bool  # `object` may be a workload (Deployment, Job, ...) whose template holds the pod
    # a Pod rule autogen extends to pod templates, whose `object.metadata` is the workload's, not the
    # pod's: reading its labels or annotations is reported (podMetadata is the pod's)
    workload_metadata: bool = False
    reported: list[bool] = field(default_factory=list)  # one report of it per expression is enough


def scope_for(kinds: list[str], autogen: bool, reads_kind: bool = False) -> Scope:
    """`reads_kind`: the rule's CEL reads `object.kind` somewhere, so it tells a workload from a Pod
    and means the workload's metadata where it reads `object.metadata` (no workload_metadata report)."""
    variables: dict[str, FieldType] = {
        "podSpec": POD_SPEC,
        "podMetadata": OBJECT_META,
        "podSpecs": ListOf(POD_SPEC),
        "containers": ListOf(CONTAINER),
        "namespaceObject": NAMESPACE,
        # ObjectMeta is the same for every kind: checked whatever `object` is
        "object": KUBE_OBJECT,
        "oldObject": KUBE_OBJECT,
    }
    pod_only = set(kinds) == {"Pod"}
    if pod_only and not autogen:
        variables["object"] = POD
        variables["oldObject"] = POD
    templates = "Pod" in kinds and autogen
    return Scope(variables, autogen_object=pod_only and autogen, workload_metadata=templates and not reads_kind)


def reads_object_kind(text: str) -> bool:
    """Whether a CEL text reads `object.kind` (or oldObject's): it tells what the object is."""
    try:
        tree = celsyntax.parse(text)
    except celsyntax.CelSyntaxError:
        return False
    nodes = [tree]
    while nodes:
        node = nodes.pop()
        if _is_object_part(node, "kind"):
            return True
        nodes.extend(node.children)
    return False


def field_problems(text: str, scope: Scope) -> list[FieldProblem]:
    """Every selection of a field the Pod model does not have; [] when the text cannot be parsed."""
    try:
        tree = celsyntax.parse(text)
    except celsyntax.CelSyntaxError:
        return []  # the CEL compiler reports syntax errors with the real message
    problems: list[FieldProblem] = []
    scope = replace(scope, reported=[])
    _walk(tree, dict(scope.variables), scope, problems, guarded=False)
    return problems


def _walk(
    node: celsyntax.Node, variables: dict[str, FieldType], scope: Scope, problems: list[FieldProblem], guarded: bool
) -> FieldType:
    if node.kind == "ident":
        return variables.get(node.name, ANY)
    if node.kind == "select":
        (operand,) = node.children
        if scope.autogen_object and not guarded and _is_object_spec(operand) and node.name in POD_ONLY_SPEC_FIELDS:
            problems.append(
                FieldProblem(
                    node.position,
                    f"`object.spec.{node.name}`: this Pod rule also applies to pod templates (autogen), where "
                    f"`object` is the workload (a Deployment has no spec.{node.name}); use `podSpec.{node.name}`",
                )
            )
            return ANY
        if (
            scope.workload_metadata
            and not scope.reported
            and node.name in ("labels", "annotations")
            and _is_object_part(operand, "metadata")
        ):
            scope.reported.append(True)
            root = operand.children[0].name
            problems.append(
                FieldProblem(
                    node.position,
                    f"`{root}.metadata.{node.name}`: this Pod rule also applies to pod templates (autogen), where "
                    f"`{root}` is the workload: these are a Deployment's {node.name}, not its pods'; use "
                    f"`podMetadata.{node.name}` (the pod's: a Pod's own, a template's), or set autogen: false; a rule "
                    "that reads `object.kind` is taken to mean the workload's",
                )
            )
        owner = _walk(operand, variables, scope, problems, guarded)
        if isinstance(owner, Struct):
            if node.name in owner.fields:
                return owner.fields[node.name]
            if owner.open:
                return ANY
            hint = difflib.get_close_matches(node.name, list(owner.fields), n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            problems.append(FieldProblem(node.position, f"{owner.name} has no field {node.name!r}{suffix}"))
            return ANY
        if isinstance(owner, MapOf):
            return owner.value
        return ANY
    if node.kind == "index":
        owner = _walk(node.children[0], variables, scope, problems, guarded)
        _walk(node.children[1], variables, scope, problems, guarded)
        if isinstance(owner, ListOf):
            return owner.item
        if isinstance(owner, MapOf):
            return owner.value
        return ANY
    if node.kind == "call":
        if node.has_target and node.name in _MACROS and len(node.children) >= 3 and node.children[1].kind == "ident":
            target, variable, *body = node.children
            owner = _walk(target, variables, scope, problems, guarded)
            element: FieldType = owner.item if isinstance(owner, ListOf) else ANY
            inner = {**variables, variable.name: element}
            for part in body:
                _walk(part, inner, scope, problems, guarded)
            return owner if node.name == "filter" else ANY
        for child in node.children:
            # has(x.f) asks whether f is set: a guard for workload-or-pod `object` checks
            _walk(child, variables, scope, problems, guarded or node.name == "has")
        return ANY
    for child in node.children:
        _walk(child, variables, scope, problems, guarded)
    return ANY


def _is_object_spec(node: celsyntax.Node) -> bool:
    return _is_object_part(node, "spec")


def _is_object_part(node: celsyntax.Node, name: str) -> bool:
    return (
        node.kind == "select"
        and node.name == name
        and node.children[0].kind == "ident"
        and node.children[0].name in ("object", "oldObject")
    )
