"""What a rule looks at inside each kind, as one CEL list expression over `object`.

The engine evaluates a rule once per target (engine/workloads.py: the Pod itself, or each pod
template of a workload). A policy sees the whole object, so it loops over the same targets:
this module writes, per kind, a CEL expression whose value is the list of targets, each a map
{description, specs[, root, path]} with the same descriptions the engine puts in messages. The
expression is generated from the kind table's template paths (WorkloadKind.pod_templates), the
same the engine walks; tests/export/test_translation.py checks the two against each other for
every autogen kind.

Lists are walked with `indexOf` (the Kubernetes lists library) where a JSON Pointer needs an
index: exact for JobSet jobs and Ray worker groups, whose names their operators require unique.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from webhook.engine import KIND_TABLE, KindApi

from .nativecel import NotNative, Translator, string_literal

NAME = (
    "(has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name : "
    "has(object.metadata.generateName) && object.metadata.generateName != '' ? object.metadata.generateName : "
    "'<unnamed>')"
)


@dataclass(frozen=True, slots=True)
class KindTarget:
    kind: str
    group: str
    plural: str
    templates: bool  # one target per pod template (autogen), else the object itself


# what a target needs its pod specs for (the fields of `_enriched` computed from `specs`)
SPEC_FIELDS = frozenset({"specs", "spec", "containers", "gpus", "wholeGpus", "claimed"})


def api_of(kind: str, declared: tuple[KindApi, ...] = ()) -> tuple[str, str]:
    """(API group, plural resource) of a kind: from the engine's kind table, else from the rule's
    own declaration of it in match.kinds; NotNative otherwise."""
    entry = KIND_TABLE.by_kind(kind)
    if entry is not None:
        return entry.group, entry.plural
    for api in declared:
        if api.kind == kind:
            return api.group, api.resource
    raise NotNative(
        f"kind {kind}: its API group and resource are unknown to gpu-webhook, and a policy must name them; "
        f"declare them in match.kinds ({{kind: {kind}, group: ..., version: ..., resource: ...}}) to export the rule"
    )


def follows_templates(kind: str) -> bool:
    """Whether a policy can reach every pod spec of the kind's objects (none to reach counts)."""
    entry = KIND_TABLE.by_kind(kind)
    return entry is None or entry.declarative


def has_templates(kind: str) -> bool:
    """Whether objects of the kind hold pod templates (a Pod's own spec is no template)."""
    entry = KIND_TABLE.by_kind(kind)
    return entry is not None and entry.has_templates


def multi_template(kind: str) -> bool:
    """Whether one object of the kind can hold more than one pod template."""
    entry = KIND_TABLE.by_kind(kind)
    return entry is not None and entry.multi_template


def _entry(root: str, path: str, description: str, with_paths: bool) -> str:
    fields = [f"'description': dyn({description})", f"'specs': dyn(has({root}.spec) ? [{root}.spec] : [])"]
    if with_paths:
        fields += [f"'root': dyn({root})", f"'path': dyn({path})"]
    return "{" + ", ".join(fields) + "}"


def _guard(parts: tuple[str, ...], base: str = "object") -> str:
    checks = []
    expr = base
    for part in parts:
        checks.append(f"has({expr}.{part})")
        expr += f".{part}"
    return " && ".join(checks)


def _owner(kind: str) -> str:
    return f"{string_literal(kind + ' ')} + {NAME}"


def template_targets(kind: str, with_paths: bool, pointers: bool = True) -> str:
    """The pod templates of one workload kind, as the engine finds them, from the table's paths.

    `pointers` False: each target's `path` is a key that names it, not a JSON Pointer (map keys
    unescaped): a ValidatingAdmissionPolicy has no `jsonpatch.escapeKey` (the JSONPatch library is
    the MutatingAdmissionPolicy's alone; v1.36.2 refuses the policy: "undeclared reference")."""
    entry = KIND_TABLE.by_kind(kind)
    if entry is not None and not entry.declarative:
        raise NotNative(
            "reads the pod specs of AppWrappers, whose pod templates sit at paths each AppWrapper names itself "
            "(spec.components[].podSets[].path), which a policy's CEL cannot follow; the webhook keeps the rule, "
            "or take AppWrapper out of match.kinds (the Jobs, JobSets, ... it wraps are admitted as themselves) "
            "to export the rest"
        )
    if entry is None or not entry.has_templates:
        raise NotNative(
            f"reads the pod specs of {kind}, whose pod templates export cannot reach from a policy; the webhook "
            f"keeps the rule, or take {kind} out of match.kinds to export the rest"
        )
    owner = _owner(kind)
    terms = [_path_targets(template, owner, with_paths, pointers) for template in entry.pod_templates]
    return terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")"


def _path_targets(template: Any, owner: str, with_paths: bool, pointers: bool) -> str:
    """CEL: the targets at one template path (TemplatePath): a list of zero or one for a fixed path,
    else one per list item (`gwJ`) or map key (`gwK`) of its each step that holds a template."""
    prefix, each, rest = template.split()
    if each is None:
        root = "object." + ".".join(prefix)
        entry = _entry(root, string_literal(_pointer(prefix)), _label(template.label, owner), with_paths)
        return f"({_guard(prefix)} ? [{entry}] : [])"
    container = "object." + ".".join(prefix)
    if each == "[*]":
        variable = item = "gwJ"
        index = f"string({container}.indexOf(gwJ))"
        field = template.name_field
        name = f"(has(gwJ.{field}) ? string(gwJ.{field}) : {index})" if field else index
        step = index
    else:
        variable, item, name = "gwK", f"{container}[gwK]", "gwK"
        step = "jsonpatch.escapeKey(gwK)" if pointers else "gwK"
    root = ".".join((item, *rest))
    path = f"{string_literal(_pointer(prefix) + '/')} + {step}"
    if rest:
        path += f" + {string_literal(_pointer(rest))}"
    entry = _entry(root, path, _label(template.label, owner, name), with_paths)
    keep = _guard(rest, item) or "true"
    return f"({_guard(prefix)} ? {container}.filter({variable}, {keep}).map({variable}, {entry}) : [])"


def _pointer(fields: tuple[str, ...]) -> str:
    return "".join("/" + field.replace("~", "~0").replace("/", "~1") for field in fields)


def _label(label: str, owner: str, each: str | None = None) -> str:
    """CEL: a template's description, the table's label with its {owner} and {each} filled in."""
    values = {"{owner}": owner, "{each}": each}
    parts = []
    for piece in re.split(r"(\{owner\}|\{each\})", label):
        if piece in values:
            value = values[piece]
            if value is None:
                raise ValueError(f"label {label!r}: {piece} has no value on a fixed path")
            parts.append(value)
        elif piece:
            parts.append(string_literal(piece))
    return " + ".join(parts)


def object_target(kind: str, with_paths: bool, specs_needed: bool = True) -> str:
    """The object itself: a Pod with its spec, a workload with all its templates' specs, or an object
    without pod templates (a DRA claim, a TrainJob, a kind the rule declares) with none (as
    workloads.object_target). `specs_needed` False leaves the specs out (the rule reads none)."""
    if kind == "Pod":
        fields = ["'description': dyn('pod ' + " + NAME + ")", "'specs': dyn(has(object.spec) ? [object.spec] : [])"]
    elif not has_templates(kind):
        fields = [f"'description': dyn({_owner(kind)})", "'specs': dyn([])"]
    elif specs_needed:
        specs = f"{template_targets(kind, False)}.map(gwE, size(gwE.specs) > 0 ? gwE.specs[0] : null)"
        fields = [f"'description': dyn({_owner(kind)})", f"'specs': dyn({specs})"]
    else:
        fields = [f"'description': dyn({_owner(kind)})"]
    if with_paths:
        fields += ["'root': dyn(object)", "'path': dyn('')"]
    return "[{" + ", ".join(fields) + "}]"


def targets_expression(
    kinds: list[KindTarget], fields: set[str], translator: Translator, with_paths: bool, pointers: bool = True
) -> str:
    """The list of targets of whichever kind `object` is, each with the fields the rule reads
    (`pointers`: see template_targets)."""
    specs_needed = bool(fields & SPEC_FIELDS)
    # podMetadata: the target's root holds it (a template's {metadata, spec}, a Pod itself)
    rooted = with_paths or "metadata" in fields
    if "metadata" in fields:
        whole = sorted(k.kind for k in kinds if not k.templates and k.kind != "Pod")
        if whole:
            raise NotNative(
                f"reads podMetadata of {', '.join(whole)} (named in match.kinds: the object itself is the target, "
                "and its pod's metadata sits in a template export does not single out); the webhook keeps the rule, "
                "or leave those kinds to autogen (one target per pod template) to export it"
            )
    branches = []
    for entry in kinds:
        raw = (
            template_targets(entry.kind, rooted, pointers)
            if entry.templates
            else object_target(entry.kind, rooted, specs_needed)
        )
        branches.append((entry.kind, raw))
    return f"({_dispatch(branches)}).map(gwX, {_enriched(fields, translator, with_paths, specs_needed)})"


def _dispatch(branches: list[tuple[str, str]]) -> str:
    """The targets of whichever kind `object` is: a balanced tree of ternaries on object.kind.

    A flat `kind == A ? .. : kind == B ? .. : ..` chain nests once per kind, and a rule on a dozen
    kinds (kueue-queue-name) went past the parser's recursion limit (cel-cpp's default is 32); the
    tree nests log2(kinds) deep and tests at most that many `in` lists."""
    if not branches:
        return "[]"
    if len(branches) == 1:
        kind, raw = branches[0]
        return f"(object.kind == {string_literal(kind)} ? {raw} : [])"
    half = len(branches) // 2
    left = "[" + ", ".join(string_literal(kind) for kind, _ in branches[:half]) + "]"
    return f"(object.kind in {left} ? {_dispatch(branches[:half])} : {_dispatch(branches[half:])})"


def _enriched(fields: set[str], translator: Translator, with_paths: bool, specs_needed: bool = True) -> str:
    out = ["'description': gwX.description"] + (["'specs': gwX.specs"] if specs_needed else [])
    if fields & {"spec", "containers"}:
        # a rule reading one gets both: the targets texts of the rules of a merged policy are then one
        # variable (merge.py), so the apiserver builds them once per pass, not once per rule
        fields = fields | {"spec", "containers"}
    if "spec" in fields:
        out.append("'spec': dyn(size(gwX.specs) == 1 ? gwX.specs[0] : null)")
    if "metadata" in fields:
        # as the engine's podMetadata: the metadata beside the pod spec, null when there is none
        out.append("'metadata': dyn(has(gwX.root.metadata) ? gwX.root.metadata : null)")
    if "containers" in fields:
        # more than one spec happens only for an object target of a multi-template kind, refused upstream
        out.append(
            "'containers': dyn(size(gwX.specs) != 1 || gwX.specs[0] == null ? [] : "
            "(has(gwX.specs[0].initContainers) ? gwX.specs[0].initContainers : []) + "
            "(has(gwX.specs[0].containers) ? gwX.specs[0].containers : []) + "
            # as the engine's `containers` (evaluate.py _containers): ephemeral containers run on the node too
            "(has(gwX.specs[0].ephemeralContainers) ? gwX.specs[0].ephemeralContainers : []))"
        )
    if "gpus" in fields:
        out.append(f"'gpus': dyn(gwX.specs.map(gwS, {translator.pod_gpus('gwS')}).sum())")
    if "wholeGpus" in fields:
        out.append(f"'wholeGpus': dyn(gwX.specs.map(gwS, {translator.pod_gpus('gwS', whole_only=True)}).sum())")
    if "claimed" in fields:
        # a pod spec with a resourceClaims entry: without claim context the engine cannot resolve
        # it, and takes it for an accelerator (resources.py PodClaims.unresolved; entries that are
        # no objects are skipped there, and the apiserver's schema admits objects only)
        out.append(
            "'claimed': dyn(gwX.specs.exists(gwS, gwS != null && has(gwS.resourceClaims) && "
            "size(gwS.resourceClaims) > 0))"
        )
    if with_paths:
        out += ["'root': gwX.root", "'path': gwX.path"]
    return "{" + ", ".join(out) + "}"
