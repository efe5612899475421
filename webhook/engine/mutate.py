"""Named mutation operations with fixed semantics: applying a rule set twice gives what applying it once does.

Each operation looks at the working copy, changes only what is missing (or, with
`override`, what differs) and records the edit through the Patcher. Applying a rule
set to its own output therefore changes nothing, as `reinvocationPolicy: IfNeeded`
requires.

MUTATIONS (at the bottom) is the one registry: each entry declares the YAML name, the JSON
schema of its arguments, the builder, where CEL sits in its arguments and examples. The
loader builds from it, the rule JSON Schema (schema.py) and lint's CEL checks read it, and
tests/engine/test_mutation_registry.py checks every entry (examples valid, idempotent, CEL
fields = what the builder compiles, a row in docs/authoring.md). A new mutation: a class
here with `name`, `apply`, `cel` and `view`, plus its MutationKind in MUTATIONS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .cel import CompiledExpression
from .patch import Patcher
from .pointer import Path, get_path, is_map
from .resources import Accelerators
from .workloads import SUSPEND_FIELDS, Target

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# compiles one CEL text of a mutation's arguments (the loader binds the rule's params in)
Compile = Callable[[str], CompiledExpression]


class MutationError(ValueError):
    """A mutation cannot produce a valid object (bad computed value): the rule's failurePolicy decides."""


@dataclass(slots=True)
class MutationContext:
    patcher: Patcher
    target: Target
    operation: str
    evaluate: Callable[[CompiledExpression], Any]
    accelerators: Accelerators
    # the request's subresource: "ephemeralcontainers" when kubectl debug adds a container
    sub_resource: str = ""
    # whether a container has a GPU other than through its resources: it names a DRA claim of
    # accelerators (or one the engine cannot resolve) in resources.claims, or an annotation-marked
    # allocator gives it one (resources.Allocator)
    gpu_otherwise: Callable[[Mapping[str, Any]], bool] = lambda container: False


class Mutation(Protocol):
    @property
    def name(self) -> str:
        """The operation's name in a rule (`setLabels`), as in MUTATIONS."""
        ...

    def apply(self, ctx: MutationContext) -> None: ...

    def cel(self) -> tuple[CompiledExpression, ...]:
        """The compiled CEL this mutation evaluates (the loader type-checks it; evaluate reads its references)."""
        ...

    def view(self) -> MutationView:
        """What it writes, from what, as data: how a door that translates mutations (export) reads one."""
        ...


@dataclass(frozen=True, slots=True)
class MutationView:
    """A mutation as data. `name` is its MUTATIONS name; the fields it has no use for keep their defaults."""

    name: str
    field: str = ""  # the field it writes: labels, annotations, priorityClassName, schedulerName
    # addToleration's toleration, requireNodeAffinity's node requirement; None with a byResourcePrefix table
    arguments: Mapping[str, Any] | None = None
    by_resource_prefix: bool = False  # its arguments come per pod spec from a byResourcePrefix table
    value: str | None = None  # the value it writes (setPriorityClassName, setQueueName, ...), or
    expression: CompiledExpression | None = None  # the CEL that computes it
    values: tuple[tuple[str, str], ...] = ()  # setLabels / setAnnotations: key -> value, and
    expressions: tuple[tuple[str, CompiledExpression], ...] = ()  # key -> the CEL that computes the value
    override: bool = False  # replaces an existing different value
    value_pattern: re.Pattern[str] | None = None  # what a written value must match (a label value, a queue name)


class _NoCel:
    """For mutations whose arguments hold no CEL."""

    __slots__ = ()

    def cel(self) -> tuple[CompiledExpression, ...]:
        return ()


def _str(schema_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "string", **(schema_extra or {})}


_OVERRIDE = {"type": "boolean", "default": False, "description": "Replace an existing different value."}


_TOLERATION_FIELDS: dict[str, Any] = {
    "key": _str(),
    "operator": {"enum": ["Exists", "Equal"], "default": "Exists"},
    "value": _str(),
    "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute", ""]},
    "tolerationSeconds": {"type": "integer"},
}
# Which pod specs an entry of a per-vendor table applies to: those asking for a resource whose
# name starts with `prefix` (amd.com/ -> amd.com/gpu), and with `resourceClaims: true` also those
# that reference DRA claims, whose vendor the pod spec does not name.
_BY_RESOURCE: dict[str, Any] = {
    "prefix": {"type": "string", "minLength": 1},
    "resourceClaims": {"type": "boolean", "default": False},
}


def _single_or_table(fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The schema of one set of arguments (`required` of `fields`), or a `byResourcePrefix` table of
    them and nothing beside it: what addToleration and requireNodeAffinity share."""
    table = {"required": ["byResourcePrefix"]}
    row = {"type": "object", "additionalProperties": False, "required": ["prefix", *required]}
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **fields,
            "byResourcePrefix": {"type": "array", "items": {**row, "properties": {**_BY_RESOURCE, **fields}}},
        },
        "allOf": [
            {"if": {"not": table}, "then": {"required": required}},
            {"if": table, "then": {"maxProperties": 1}},
        ],
    }


@dataclass(frozen=True, slots=True)
class ByResource:
    """One row of a per-vendor table: the mutation's arguments and the pod specs they are for."""

    prefix: str
    resource_claims: bool
    args: Mapping[str, Any]

    def applies(self, pod_spec: Any, names: set[str] | None = None) -> bool:
        """`names`: resource_names(pod_spec), when the caller has them (one walk for a whole table)."""
        if self.resource_claims and is_map(pod_spec) and pod_spec.get("resourceClaims"):
            return True
        return any(name.startswith(self.prefix) for name in (resource_names(pod_spec) if names is None else names))

    @classmethod
    def table(cls, rows: Any, build: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> tuple[ByResource, ...]:
        return tuple(
            cls(prefix=row["prefix"], resource_claims=bool(row.get("resourceClaims")), args=build(row))
            for row in rows or ()
        )


def resource_names(pod_spec: Any) -> set[str]:
    """Every resource name a pod spec's containers and init containers request or limit."""
    names: set[str] = set()
    if not is_map(pod_spec):
        return names
    for field in ("initContainers", "containers"):
        containers = pod_spec.get(field)
        for container in containers if isinstance(containers, list) else []:
            resources = container.get("resources") if is_map(container) else None
            if not is_map(resources):
                continue
            for kind in ("requests", "limits"):
                amounts = resources.get(kind)
                if is_map(amounts):
                    names.update(name for name in amounts if isinstance(name, str))
    return names


def _wanted(
    ctx: MutationContext, spec_path: Path, single: Mapping[str, Any] | None, table: tuple[ByResource, ...]
) -> list[Mapping[str, Any]]:
    """The argument sets that apply to one pod spec: the single one, or the table's matching rows."""
    if single is not None:
        return [single]
    pod_spec = ctx.patcher.get(spec_path)
    names = resource_names(pod_spec) if table else set()  # once for the table, not once per row
    wanted: list[Mapping[str, Any]] = []
    for row in table:
        if row.applies(pod_spec, names) and row.args not in wanted:
            wanted.append(row.args)
    return wanted


@dataclass(frozen=True, slots=True)
class AddToleration(_NoCel):
    name: ClassVar[str] = "addToleration"
    schema: ClassVar[dict[str, Any]] = _single_or_table(_TOLERATION_FIELDS, ["key"])
    toleration: Mapping[str, Any] | None
    table: tuple[ByResource, ...] = ()

    @classmethod
    def build(cls, spec: Mapping[str, Any], compile_cel: Compile) -> AddToleration:
        if "byResourcePrefix" in spec:
            return cls(None, ByResource.table(spec["byResourcePrefix"], _toleration))
        return cls(_toleration(spec))

    def view(self) -> MutationView:
        return MutationView(self.name, arguments=self.toleration, by_resource_prefix=bool(self.table))

    def apply(self, ctx: MutationContext) -> None:
        for spec_path in ctx.target.pod_specs:
            for toleration in _wanted(ctx, spec_path, self.toleration, self.table):
                existing = ctx.patcher.get((*spec_path, "tolerations"))
                if isinstance(existing, list) and any(_covers(t, toleration) for t in existing):
                    continue
                ctx.patcher.append((*spec_path, "tolerations"), dict(toleration))


def _toleration(spec: Mapping[str, Any]) -> dict[str, Any]:
    toleration = {"key": spec["key"], "operator": spec.get("operator", "Exists")}
    for field in ("value", "effect", "tolerationSeconds"):
        if field in spec:
            toleration[field] = spec[field]
    return toleration


def _covers(existing: Any, wanted: Mapping[str, Any]) -> bool:
    """Does an existing toleration already tolerate every taint the wanted one would?"""
    if not isinstance(existing, Mapping):
        return False
    operator = existing.get("operator") or "Equal"
    key = existing.get("key") or ""
    tolerates_everything = key == "" and operator == "Exists"
    if not tolerates_everything and key != wanted["key"]:
        return False
    if operator != "Exists":
        wanted_value = wanted.get("value")
        if wanted.get("operator") == "Exists" or existing.get("value", "") != (wanted_value or ""):
            return False
    effect = existing.get("effect") or ""
    return effect == "" or effect == (wanted.get("effect") or "")


_REQUIREMENT_FIELDS: dict[str, Any] = {
    "key": _str(),
    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
    "values": {"type": "array", "items": _str()},
}


@dataclass(frozen=True, slots=True)
class RequireNodeAffinity(_NoCel):
    name: ClassVar[str] = "requireNodeAffinity"
    schema: ClassVar[dict[str, Any]] = _single_or_table(_REQUIREMENT_FIELDS, ["key", "operator"])
    expression: Mapping[str, Any] | None
    table: tuple[ByResource, ...] = ()

    @classmethod
    def build(cls, spec: Mapping[str, Any], compile_cel: Compile) -> RequireNodeAffinity:
        if "byResourcePrefix" in spec:
            return cls(None, ByResource.table(spec["byResourcePrefix"], _requirement))
        return cls(_requirement(spec))

    def view(self) -> MutationView:
        return MutationView(self.name, arguments=self.expression, by_resource_prefix=bool(self.table))

    def apply(self, ctx: MutationContext) -> None:
        for spec_path in ctx.target.pod_specs:
            for expression in _wanted(ctx, spec_path, self.expression, self.table):
                _require(ctx, spec_path, expression)


def _requirement(spec: Mapping[str, Any]) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": spec["key"], "operator": spec["operator"]}
    if spec.get("values") is not None:
        expression["values"] = list(spec["values"])
    return expression


def _require(ctx: MutationContext, spec_path: Path, expression: Mapping[str, Any]) -> None:
    terms_path: Path = (
        *spec_path,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    terms = ctx.patcher.get(terms_path)
    if not isinstance(terms, list) or not terms:
        ctx.patcher.set(terms_path, [{"matchExpressions": [dict(expression)]}])
        return
    # Terms are ORed: the requirement must join every term, or one term would escape it.
    for index, term in enumerate(terms):
        if not isinstance(term, Mapping):
            continue
        expressions = term.get("matchExpressions")
        if isinstance(expressions, list) and any(_same_requirement(e, expression) for e in expressions):
            continue
        ctx.patcher.append((*terms_path, index, "matchExpressions"), dict(expression))


def _same_requirement(existing: Any, wanted: Mapping[str, Any]) -> bool:
    return (
        isinstance(existing, Mapping)
        and existing.get("key") == wanted["key"]
        and existing.get("operator") == wanted["operator"]
        and sorted(existing.get("values") or []) == sorted(wanted.get("values") or [])
    )


@dataclass(frozen=True, slots=True)
class SetMetadata:
    """setLabels / setAnnotations on the target's metadata (the pod template's, for autogen targets)."""

    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "values": {"type": "object", "additionalProperties": _str()},
            "valueExpressions": {"type": "object", "additionalProperties": _str()},
            "override": _OVERRIDE,
        },
    }
    name: str  # setLabels or setAnnotations
    field: str  # labels or annotations
    values: tuple[tuple[str, str], ...]
    expressions: tuple[tuple[str, CompiledExpression], ...]
    override: bool

    def cel(self) -> tuple[CompiledExpression, ...]:
        return tuple(expression for _, expression in self.expressions)

    def view(self) -> MutationView:
        pattern = LABEL_VALUE if self.field == "labels" else None
        return MutationView(
            self.name,
            self.field,
            values=self.values,
            expressions=self.expressions,
            override=self.override,
            value_pattern=pattern,
        )

    def apply(self, ctx: MutationContext) -> None:
        for key, value in self.values:
            self._set(ctx, key, value)
        for key, expression in self.expressions:
            value = ctx.evaluate(expression)
            if value is None or value == "":
                continue  # nothing to copy (e.g. the namespace has no such label)
            if not isinstance(value, str):
                raise MutationError(f"{self.field} {key!r}: expression gave {type(value).__name__}, not a string")
            self._set(ctx, key, value)

    def _set(self, ctx: MutationContext, key: str, value: str) -> None:
        if self.field == "labels" and (len(value) > 63 or not LABEL_VALUE.match(value)):
            raise MutationError(f"label {key!r}: {value!r} is not a valid label value")
        current = ctx.patcher.get(ctx.target.metadata)
        current = current.get(self.field) if isinstance(current, Mapping) else None
        if isinstance(current, Mapping) and key in current and (not self.override or current[key] == value):
            return
        ctx.patcher.set((*ctx.target.metadata, self.field, key), value)


@dataclass(frozen=True, slots=True)
class SetPodField:
    """setPriorityClassName / setSchedulerName: a string field of each pod spec."""

    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"value": _str(), "valueExpression": _str(), "override": _OVERRIDE},
        "oneOf": [{"required": ["value"]}, {"required": ["valueExpression"]}],
    }
    name: str  # setPriorityClassName or setSchedulerName
    field: str  # priorityClassName or schedulerName
    value: str | None
    expression: CompiledExpression | None
    override: bool

    def cel(self) -> tuple[CompiledExpression, ...]:
        return () if self.expression is None else (self.expression,)

    def view(self) -> MutationView:
        return MutationView(self.name, self.field, value=self.value, expression=self.expression, override=self.override)

    def apply(self, ctx: MutationContext) -> None:
        value = self.value if self.expression is None else ctx.evaluate(self.expression)
        if value is None or value == "":
            return
        if not isinstance(value, str):
            raise MutationError(f"{self.field}: expression gave {type(value).__name__}, not a string")
        for spec_path in ctx.target.pod_specs:
            current = ctx.patcher.get((*spec_path, self.field))
            if current == value or (current and not self.override):
                continue
            ctx.patcher.set((*spec_path, self.field), value)
            if self.field == "priorityClassName" and ctx.target.is_pod:
                # The Priority plugin already resolved spec.priority and spec.preemptionPolicy for the
                # old class (0 and PreemptLowerPriority for none); it recomputes them after us only if
                # we remove them, and rejects a pod whose values differ from the new class's
                # (plugin/pkg/admission/priority/admission.go: "the string value of PreemptionPolicy
                # (...) must not be provided in pod spec").
                ctx.patcher.remove((*spec_path, "priority"))
                ctx.patcher.remove((*spec_path, "preemptionPolicy"))


@dataclass(frozen=True, slots=True)
class AddEnv(_NoCel):
    name: ClassVar[str] = "addEnv"
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "value"],
        "properties": {
            "name": _str(),
            "value": _str(),
            "containers": {"enum": ["all", "gpu", "nonGpu"], "default": "all"},
            "override": _OVERRIDE,
        },
    }
    env_name: str
    value: str
    containers: str
    override: bool

    def view(self) -> MutationView:
        return MutationView(self.name, value=self.value, override=self.override)  # export refuses it

    def apply(self, ctx: MutationContext) -> None:
        # every container chosen before the first edit: an edit makes the target's facts (which
        # containers use accelerator claims) be read again, once per container otherwise (n^2)
        chosen: list[tuple[Path, Any]] = []
        for spec_path in ctx.target.pod_specs:
            for field in self._fields(ctx):
                containers = ctx.patcher.get((*spec_path, field))
                for index, container in enumerate(containers if isinstance(containers, list) else []):
                    if isinstance(container, Mapping) and self._selects(ctx, container):
                        chosen.append(((*spec_path, field, index, "env"), container.get("env")))
        for env_path, env in chosen:
            self._add(ctx, env_path, env)

    @staticmethod
    def _fields(ctx: MutationContext) -> tuple[str, ...]:
        """Which container lists may change in this request.

        A Pod's containers and init containers are immutable after CREATE, and on a template an
        env change at UPDATE would roll the workload out: only at CREATE. The ephemeralcontainers
        subresource (kubectl debug) is the only way containers join a running Pod, and the
        apiserver keeps only spec.ephemeralContainers of what is written there; ephemeral
        containers are never changed otherwise (a plain Pod UPDATE may not touch them).
        """
        if ctx.sub_resource == "ephemeralcontainers":
            return ("ephemeralContainers",) if ctx.target.is_pod else ()
        return ("initContainers", "containers") if ctx.operation == "CREATE" else ()

    def _selects(self, ctx: MutationContext, container: Mapping[str, Any]) -> bool:
        if self.containers == "all":
            return True
        has_gpu = ctx.accelerators.container_count(container) > 0 or ctx.gpu_otherwise(container)
        return has_gpu if self.containers == "gpu" else not has_gpu

    def _add(self, ctx: MutationContext, env_path: Path, env: Any) -> None:
        entries = env if isinstance(env, list) else []
        for index, entry in enumerate(entries):
            if isinstance(entry, Mapping) and entry.get("name") == self.env_name:
                if self.override and (entry.get("value") != self.value or "valueFrom" in entry):
                    ctx.patcher.set((*env_path, index), {"name": self.env_name, "value": self.value})
                return
        ctx.patcher.append(env_path, {"name": self.env_name, "value": self.value})


@dataclass(frozen=True, slots=True)
class Merge(_NoCel):
    """Overlay: adds what the target lacks, recursively; never replaces an existing value."""

    name: ClassVar[str] = "merge"
    schema: ClassVar[dict[str, Any]] = {"type": "object"}
    overlay: Mapping[str, Any]

    def view(self) -> MutationView:
        return MutationView(self.name)  # an open-ended overlay: export refuses it

    def apply(self, ctx: MutationContext) -> None:
        self._merge(ctx, ctx.target.root, self.overlay)

    def _merge(self, ctx: MutationContext, path: Path, overlay: Mapping[str, Any]) -> None:
        for key, value in overlay.items():
            current = ctx.patcher.get((*path, key))
            if current is None:
                ctx.patcher.set((*path, key), value)
            elif isinstance(current, Mapping) and isinstance(value, Mapping):
                self._merge(ctx, (*path, key), value)


@dataclass(frozen=True, slots=True)
class SetQueueName:
    """Kueue's queue label on the job object, only at CREATE (Kueue makes it immutable while running).

    A job kind with a suspend field (its row's `suspend` in the kind table) also gets it set to true: Kueue's own webhook
    may already have run and seen no label (it suspends only jobs with a queue), and an unsuspended
    job would start without admission.
    """

    name: ClassVar[str] = "setQueueName"
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"value": _str(), "valueExpression": _str()},
        "oneOf": [{"required": ["value"]}, {"required": ["valueExpression"]}],
    }
    value: str | None
    expression: CompiledExpression | None

    def cel(self) -> tuple[CompiledExpression, ...]:
        return () if self.expression is None else (self.expression,)

    def view(self) -> MutationView:
        return MutationView(self.name, value=self.value, expression=self.expression, value_pattern=DNS_SUBDOMAIN)

    def apply(self, ctx: MutationContext) -> None:
        if ctx.operation != "CREATE":
            return
        metadata = ctx.patcher.get(ctx.target.metadata)
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        if isinstance(labels, Mapping) and labels.get(QUEUE_LABEL):
            return
        queue = self.value if self.expression is None else ctx.evaluate(self.expression)
        if queue is None or queue == "":
            return
        # A LocalQueue name is a DNS-1123 subdomain (up to 253 characters), but the label that names
        # it holds at most 63 (a label value): a longer name cannot be written at all.
        if not isinstance(queue, str) or not DNS_SUBDOMAIN.match(queue):
            raise MutationError(f"queue name {queue!r} is not a DNS-1123 subdomain")
        if len(queue) > 63:
            raise MutationError(f"queue name {queue!r} is not a valid label value: {len(queue)} characters, at most 63")
        ctx.patcher.set((*ctx.target.metadata, "labels", QUEUE_LABEL), queue)
        root = ctx.patcher.get(ctx.target.root)
        if not isinstance(root, Mapping):
            return
        group = str(root.get("apiVersion", "")).rpartition("/")[0]
        field = SUSPEND_FIELDS.get((group, str(root.get("kind"))))
        if field is not None and get_path(root, field) is not True:
            ctx.patcher.set((*ctx.target.root, *field), True)


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _value_or_expression(spec: Mapping[str, Any], compile_cel: Compile) -> tuple[str | None, CompiledExpression | None]:
    if "valueExpression" in spec:
        return None, compile_cel(spec["valueExpression"])
    return spec.get("value"), None


def _build_metadata(name: str, field: str) -> Builder:
    def build(spec: Mapping[str, Any], compile_cel: Compile) -> SetMetadata:
        return SetMetadata(
            name=name,
            field=field,
            values=tuple((spec.get("values") or {}).items()),
            expressions=tuple((k, compile_cel(v)) for k, v in (spec.get("valueExpressions") or {}).items()),
            override=bool(spec.get("override", False)),
        )

    return build


def _build_pod_field(name: str, field: str) -> Builder:
    def build(spec: Mapping[str, Any], compile_cel: Compile) -> SetPodField:
        value, expression = _value_or_expression(spec, compile_cel)
        return SetPodField(
            name=name, field=field, value=value, expression=expression, override=bool(spec.get("override"))
        )

    return build


def _build_env(spec: Mapping[str, Any], compile_cel: Compile) -> AddEnv:
    return AddEnv(
        env_name=spec["name"],
        value=spec["value"],
        containers=spec.get("containers", "all"),
        override=bool(spec.get("override")),
    )


Builder = Callable[[Mapping[str, Any], Compile], Mutation]
CelField = tuple[str, ...]  # a path inside a mutation's arguments; "*" stands for every key of a map


@dataclass(frozen=True, slots=True)
class MutationKind:
    """One operation as rules name it: everything the loader, lint, the JSON Schema and the tests need."""

    name: str  # the key in a rule's `mutate` list
    schema: Mapping[str, Any]  # JSON Schema of its arguments (the rule schema embeds it)
    build: Builder  # arguments (schema-valid) and the rule's CEL compiler -> the Mutation
    examples: tuple[Mapping[str, Any], ...]  # valid arguments: the tests apply each one, twice
    cel_fields: tuple[CelField, ...] = ()  # where CEL text sits in the arguments (lint checks it)
    # The fields of the target it reads or writes besides the pod spec ("metadata.labels"), "*" for
    # anywhere: an UPDATE that changes one of them must reach the webhook (registration.py).
    touches: tuple[str, ...] = ()

    def cel_texts(self, args: Any) -> Iterator[tuple[tuple[str, ...], str]]:
        """(path inside the arguments, CEL text) for every CEL field present in `args`."""
        for cel_field in self.cel_fields:
            yield from _texts(args, cel_field, ())


def _texts(node: Any, rest: CelField, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if not rest:
        if isinstance(node, str):
            yield path, node
        return
    if not isinstance(node, Mapping):
        return
    head, tail = rest[0], rest[1:]
    keys = [k for k in node if isinstance(k, str)] if head == "*" else [head] if head in node else []
    for key in keys:
        yield from _texts(node[key], tail, (*path, key))


_VALUE_EXPRESSION: tuple[CelField, ...] = (("valueExpression",),)
MUTATIONS: dict[str, MutationKind] = {
    kind.name: kind
    for kind in (
        MutationKind(
            "addToleration",
            AddToleration.schema,
            AddToleration.build,
            examples=(
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "byResourcePrefix": [
                        {"prefix": "amd.com/", "key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"prefix": "nvidia.com/", "resourceClaims": True, "key": "nvidia.com/gpu"},
                    ]
                },
            ),
        ),
        MutationKind(
            "requireNodeAffinity",
            RequireNodeAffinity.schema,
            RequireNodeAffinity.build,
            examples=(
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                {"byResourcePrefix": [{"prefix": "amd.com/", "key": "amd.com/gpu.present", "operator": "Exists"}]},
            ),
        ),
        MutationKind(
            "setLabels",
            SetMetadata.schema,
            _build_metadata("setLabels", "labels"),
            examples=(
                {
                    "values": {"gpu-webhook.io/managed": "true"},
                    "valueExpressions": {"workload": "object.kind == 'Pod' ? 'pod' : object.kind.lowerAscii()"},
                },
            ),
            cel_fields=(("valueExpressions", "*"),),
            touches=("metadata.labels",),
        ),
        MutationKind(
            "setAnnotations",
            SetMetadata.schema,
            _build_metadata("setAnnotations", "annotations"),
            examples=(
                {
                    "values": {"example.com/policy": "gpu"},
                    "valueExpressions": {"example.com/kind": "object.kind"},
                    "override": True,
                },
            ),
            cel_fields=(("valueExpressions", "*"),),
            touches=("metadata.annotations",),
        ),
        MutationKind(
            "setPriorityClassName",
            SetPodField.schema,
            _build_pod_field("setPriorityClassName", "priorityClassName"),
            examples=({"value": "gpu-batch"}, {"valueExpression": "'gpu-' + 'batch'", "override": True}),
            cel_fields=_VALUE_EXPRESSION,
        ),
        MutationKind(
            "setSchedulerName",
            SetPodField.schema,
            _build_pod_field("setSchedulerName", "schedulerName"),
            examples=({"valueExpression": "targetGpuCount > 1 ? 'gang-scheduler' : ''"},),
            cel_fields=_VALUE_EXPRESSION,
        ),
        MutationKind(
            "addEnv",
            AddEnv.schema,
            _build_env,
            examples=(
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void", "containers": "nonGpu"},
                {"name": "A", "value": "2", "containers": "gpu", "override": True},
            ),
        ),
        MutationKind(
            "merge",
            Merge.schema,
            lambda spec, compile_cel: Merge(dict(spec)),
            examples=({"spec": {"securityContext": {"runAsNonRoot": True}}},),
            touches=("*",),
        ),
        MutationKind(
            "setQueueName",
            SetQueueName.schema,
            lambda spec, compile_cel: SetQueueName(*_value_or_expression(spec, compile_cel)),
            examples=({"value": "team-a-queue"}, {"valueExpression": "object.metadata.namespace + '-queue'"}),
            cel_fields=_VALUE_EXPRESSION,
            touches=("metadata.labels",),
        ),
    )
}


def build_mutation(spec: Mapping[str, Any], compile_cel: Compile) -> Mutation:
    ((name, args),) = spec.items()
    return MUTATIONS[name].build(args or {}, compile_cel)


def mutation_name(mutation: Mutation) -> str:
    return mutation.name
