"""Engine mutations -> MutatingAdmissionPolicy JSONPatch expressions with the same idempotence.

Each engine mutation becomes one or more MAP `mutations` entries, translated from its data view
(`Mutation.view()`) by its registry name (TRANSLATIONS). The
apiserver evaluates a policy's mutations in order, each against the object as the previous
ones left it (mutating/dispatcher.go), so a later entry sees an earlier one's labels map and
adds to it instead of replacing it. Every expression is guarded the way the engine's
operation is (an equivalent toleration, the same node requirement, an existing label), so a
second application, as `reinvocationPolicy: IfNeeded` may make, changes nothing.

Each expression loops over the targets (targets.py) and gives at most one patch operation
per target: the apiserver's CEL has no flatten, so a mutation that needs several operations
per target (addEnv: one per container) or an open-ended overlay (merge) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from jsonpointer import escape

from webhook.engine import MutationView, Rule

from .celenv import JSONPATCH_OPEN, JSONPATCH_PATH, JSONPATCH_VALUE
from .nativecel import NotNative, Translator, native_literal, string_literal

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
# the translated mutations that edit pod specs: they need a target whose pod spec has a known path
POD_SPEC_MUTATIONS = frozenset({"addToleration", "requireNodeAffinity", "setPriorityClassName", "setSchedulerName"})
# the per-vendor table forms, which pick their arguments per pod spec
BY_RESOURCE_PREFIX = frozenset({"addToleration", "requireNodeAffinity"})


def json_patch(op: str, path: str, value: str | None = None) -> str:
    """A JSONPatch value as MutatingAdmissionPolicy CEL writes it (celenv.py reads the same layout)."""
    text = f"{JSONPATCH_OPEN}{string_literal(op)}{JSONPATCH_PATH}{path}"
    return text + (f"{JSONPATCH_VALUE}{value}}}" if value is not None else "}")


def select(base: str, key: str) -> tuple[str, str]:
    """(presence test, access) of base.key, for any key (labels like kueue.x-k8s.io/queue-name)."""
    if _IDENT.fullmatch(key):
        return f"has({base}.{key})", f"{base}.{key}"
    literal = string_literal(key)
    return f"{literal} in {base}", f"{base}[{literal}]"


def set_patch(root: str, path: str, parts: Sequence[str], value: str) -> str:
    """A one-operation patch list that sets root.parts = value, creating missing parents in one add (patch.py)."""
    accesses = [root]
    presences = []
    for part in parts:
        presence, access = select(accesses[-1], part)
        presences.append(presence)
        accesses.append(access)

    def pointer(count: int) -> str:
        return f"{path} + {string_literal(''.join('/' + escape(p) for p in parts[:count]))}"

    expression = f"[{json_patch('add', pointer(len(parts)), value)}]"
    for index in reversed(range(len(parts) - 1)):
        nested = value
        for part in reversed(parts[index + 1 :]):
            nested = f"{{{string_literal(part)}: {nested}}}"
        expression = f"(!{presences[index]} ? [{json_patch('add', pointer(index + 1), nested)}] : {expression})"
    return expression


def _checked(value: str, valid: str, patch: str, static: bool | None = None) -> str:
    """The patch when `valid` holds, else an evaluation error (failurePolicy decides), as the engine
    raises MutationError for a value it cannot write (engine/mutate.py); the apiserver would reject the
    patched object anyway, whatever the failurePolicy.

    `static`: the validity of a value known at export time (None: computed by the CEL `valid`); a
    valid one needs no check.

    The error keeps the patch's type: the apiserver type-checks a JSONPatch expression as
    list(JSONPatch) at create time (verified on v1.36.2), and a conditional whose other branch is
    not a JSONPatch (`dyn(int(..))`, as this was) makes the list a list(dyn), which it refuses. So
    the patch is picked from a one-item list by an index that is 0 when the value is valid and an
    int() conversion error otherwise. The message must not be a constant: the apiserver folds a
    constant int('...') when it plans the program, and refuses the policy.
    """
    if static:
        return patch
    return f"[{patch}][({valid}) ? 0 : int('not a valid label value: ' + {value})]"


def _matches(value: str, pattern: re.Pattern[str]) -> str:
    """CEL that is true when `value` is at most 63 characters (a label value) and matches `pattern`."""
    return f"size({value}) <= 63 && {value}.matches({string_literal(pattern.pattern)})"


def _known(static: str | None, pattern: re.Pattern[str]) -> bool | None:
    """Whether a value known at export time is valid (None: computed at admission)."""
    return None if static is None else len(static) <= 63 and pattern.match(static) is not None


# one target's patch, guarded by what it needs -> the expression over every target
Each = Callable[[str, str], str]


def patches(view: MutationView, translator: Translator, targets: str, match: str) -> list[str]:
    """The MAP JSONPatch expressions for one engine mutation (its view()), in order."""
    guard = f"({match}) ? " if match else ""

    def each(needed: str, patch: str) -> str:
        condition = f"{guard}({needed}) : false" if match else needed
        return f"{targets}.filter(gwT, {condition}).map(gwT, {patch})"

    # the table form (no fixed arguments), an empty table included (gpu-node-affinity ships one)
    if view.name in BY_RESOURCE_PREFIX and (view.by_resource_prefix or view.arguments is None):
        raise NotNative(
            f"mutation {view.name}: byResourcePrefix picks its arguments by the pod's accelerator "
            "resource names and claims, which export does not model: the webhook keeps the rule, or give the mutation "
            "fixed arguments (without byResourcePrefix) to export it"
        )
    translate = TRANSLATIONS.get(view.name)
    if translate is not None:
        return translate(view, translator, each)
    raise NotNative(
        f"mutation {view.name}: needs several patch operations per pod template, "
        "which a MutatingAdmissionPolicy JSONPatch expression cannot build (no flatten in the apiserver's CEL): "
        "the webhook keeps the rule (nothing to do)"
    )


def _add_toleration(mutation: MutationView, translator: Translator, each: Each) -> list[str]:
    wanted = mutation.arguments
    assert wanted is not None  # byResourcePrefix tolerations are not native (caller checks)
    o = "gwO"
    key = f"(has({o}.key) && {o}.key != null ? {o}.key : '')"
    operator = f"(has({o}.operator) && {o}.operator != null && {o}.operator != '' ? {o}.operator : 'Equal')"
    effect = f"(has({o}.effect) && {o}.effect != null ? {o}.effect : '')"
    value = f"(has({o}.value) ? {o}.value : '')"
    covers = [f"(({key} == '' && {operator} == 'Exists') || {key} == {string_literal(str(wanted['key']))})"]
    if wanted.get("operator") == "Exists":
        covers.append(f"{operator} == 'Exists'")
    else:
        covers.append(f"({operator} == 'Exists' || {value} == {string_literal(str(wanted.get('value') or ''))})")
    covers.append(f"({effect} == '' || {effect} == {string_literal(str(wanted.get('effect') or ''))})")
    spec = "gwT.spec"
    needed = f"{spec} != null && !(has({spec}.tolerations) && {spec}.tolerations.exists({o}, {' && '.join(covers)}))"
    literal = native_literal(dict(wanted))
    append = json_patch("add", "gwT.path + '/spec/tolerations/-'", literal)
    create = json_patch("add", "gwT.path + '/spec/tolerations'", f"[{literal}]")
    patch = f"has({spec}.tolerations) ? {append} : {create}"
    return [each(needed, patch)]


def _require_node_affinity(mutation: MutationView, translator: Translator, each: Each) -> list[str]:
    wanted = mutation.arguments
    assert wanted is not None  # byResourcePrefix affinities are not native (caller checks)
    values = list(wanted.get("values") or [])
    m = "gwE"
    same_values = (
        f"size(has({m}.values) && {m}.values != null ? {m}.values : []) == {len(values)}"
        if not values
        else (
            f"has({m}.values) && size({m}.values) == {len(values)} && "
            f"{m}.values.all(gwV, gwV in {native_literal(values)}) && "
            f"{native_literal(values)}.all(gwV, gwV in {m}.values)"
        )
    )
    same = (
        f"(has(gwM.matchExpressions) && gwM.matchExpressions != null && gwM.matchExpressions.exists({m}, "
        f"{m}.key == {string_literal(str(wanted['key']))} && {m}.operator == {string_literal(str(wanted['operator']))}"
        f" && {same_values}))"
    )
    literal = native_literal(dict(wanted))
    spec = "gwT.spec"
    presence = [f"has({spec}.affinity)"]
    access = f"{spec}.affinity"
    for part in AFFINITY[1:]:
        presence.append(f"has({access}.{part})")
        access += f".{part}"
    terms = access
    present = " && ".join(presence) + f" && {terms} != null && size({terms}) > 0"
    pointer = "gwT.path + '/spec/" + "/".join(AFFINITY) + "'"
    extended = (
        f"has(gwM.matchFields) ? "
        f"{{'matchExpressions': dyn((has(gwM.matchExpressions) ? gwM.matchExpressions : []) + [{literal}]), "
        f"'matchFields': dyn(gwM.matchFields)}} : "
        f"{{'matchExpressions': dyn((has(gwM.matchExpressions) ? gwM.matchExpressions : []) + [{literal}])}}"
    )
    replace = json_patch("replace", pointer, f"{terms}.map(gwM, {same} ? gwM : ({extended}))")
    create = set_patch(spec, "gwT.path + '/spec'", AFFINITY, f"[{{'matchExpressions': [{literal}]}}]")
    needed = f"{spec} != null && (!({present}) || {terms}.exists(gwM, !{same}))"
    return [each(needed, f"({present}) ? {replace} : {create}[0]")]


def _value(mutation_value: str | None, expression: Any, translator: Translator) -> tuple[str, str]:
    """(CEL of the value, CEL that is true when there is a value to write: not null, not empty)."""
    if expression is None:
        value = str(mutation_value or "")
        return string_literal(value), "true" if value else "false"
    text = f"({translator.translate(expression.text)})"
    if expression.result_type == "STRING":  # a string-typed expression cannot be null (and may not compare to it)
        return text, f"{text} != ''"
    # dyn(): the apiserver types namespaceObject and request (kubernetes.Namespace, .AdmissionRequest),
    # and a typed string may not be compared with null (`namespaceObject.metadata.name != null` is refused)
    return text, f"(dyn({text}) != null && {text} != '')"


def _set_metadata(mutation: MutationView, translator: Translator, each: Each) -> list[str]:
    out = []
    items: list[tuple[str, tuple[str, str], str | None]] = [
        (k, _value(v, None, translator), v) for k, v in mutation.values
    ]
    items += [(k, _value(None, e, translator), None) for k, e in mutation.expressions]
    for key, (value, present), static in items:
        root = "gwT.root"
        field = mutation.field
        current = (
            f"has({root}.metadata) && has({root}.metadata.{field}) && {string_literal(key)} in {root}.metadata.{field}"
        )
        stays = (
            f"({current})"
            if not mutation.override
            else f"({current} && {root}.metadata.{field}[{string_literal(key)}] == {value})"
        )
        needed = f"{present} && !{stays}"
        patch = f"{set_patch(root, 'gwT.path', ('metadata', field, key), value)}[0]"
        pattern = mutation.value_pattern  # labels: a label value; annotations: anything
        if pattern is not None:
            patch = _checked(value, _matches(value, pattern), patch, _known(static, pattern))
        out.append(each(needed, patch))
    return out


def _set_pod_field(mutation: MutationView, translator: Translator, each: Each) -> list[str]:
    value, present = _value(mutation.value, mutation.expression, translator)
    spec = "gwT.spec"
    field = mutation.field
    keep = f"has({spec}.{field}) && ({spec}.{field} == {value}"
    keep += ")" if mutation.override else f" || ({spec}.{field} != null && {spec}.{field} != ''))"
    needed = f"{spec} != null && {present} && !({keep})"
    sets = each(needed, json_patch("add", f"gwT.path + '/spec/{field}'", value))
    if field != "priorityClassName":
        return [sets]
    # the Priority plugin resolved spec.priority and spec.preemptionPolicy for the old class; it
    # recomputes them only if they are removed (engine/mutate.py SetPodField). Separate entries (one
    # expression of three target lists nests past the CEL parser's depth), the removals first: they
    # leave `needed` true, the set does not; the object comes out as the engine leaves it.
    removes = [
        each(
            f"{needed} && gwT.path == '' && object.kind == 'Pod' && has({spec}.{name})",
            json_patch("remove", f"gwT.path + '/spec/{name}'"),
        )
        for name in ("priority", "preemptionPolicy")
    ]
    return [*removes, sets]


def _set_queue_name(mutation: MutationView, translator: Translator, each: Each) -> list[str]:
    value, present = _value(mutation.value, mutation.expression, translator)
    root = "gwT.root"
    labelled = (
        f"has({root}.metadata) && has({root}.metadata.labels) && {string_literal(QUEUE_LABEL)} in {root}.metadata.labels"
        f" && {root}.metadata.labels[{string_literal(QUEUE_LABEL)}] != ''"
    )
    needed = f"request.operation == 'CREATE' && !({labelled}) && {present}"
    # a LocalQueue name is a DNS-1123 subdomain; the label holds at most 63 characters (engine/mutate.py)
    pattern = mutation.value_pattern
    assert pattern is not None  # a DNS-1123 subdomain (engine/mutate.py SetQueueName.view)
    valid = _matches(value, pattern)
    static = mutation.value if mutation.expression is None else None
    known = _known(static, pattern)
    label = each(
        needed,
        _checked(value, valid, f"{set_patch(root, 'gwT.path', ('metadata', 'labels', QUEUE_LABEL), value)}[0]", known),
    )
    # Kueue's own webhook may already have run: a batch/v1 Job must start suspended (so Kueue admits it first)
    suspend = each(  # not when the label cannot be written: the engine stops there
        f"{needed} && ({valid}) && has({root}.kind) && {root}.kind == 'Job' && has({root}.apiVersion) && "
        f"{root}.apiVersion == 'batch/v1' && !(has({root}.spec.suspend) && {root}.spec.suspend == true)",
        f"{set_patch(root, 'gwT.path', ('spec', 'suspend'), 'true')}[0]",
    )
    # separate entries, suspend first: the label makes `needed` false; the object comes out the same
    return [suspend, label]


# registry name (MUTATIONS) -> its translation; a name not here is refused (patches)
TRANSLATIONS: dict[str, Callable[[MutationView, Translator, Each], list[str]]] = {
    "addToleration": _add_toleration,
    "requireNodeAffinity": _require_node_affinity,
    "setLabels": _set_metadata,
    "setAnnotations": _set_metadata,
    "setPriorityClassName": _set_pod_field,
    "setSchedulerName": _set_pod_field,
    "setQueueName": _set_queue_name,
}


def needs_pod_spec_paths(rule: Rule) -> bool:
    return any(m.name in POD_SPEC_MUTATIONS for m in rule.mutations)
