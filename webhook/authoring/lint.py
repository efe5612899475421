"""`gpu-webhook lint`: everything the loader checks, plus what only a careful reader would see.

The loader (schema, unknown fields, enums, duplicate names, CEL syntax and type errors)
runs first, through the same code path as the server's reload. Lint then adds:

- field references: CEL that selects a field a Pod, PodSpec or Container does not have,
  or `object.spec.containers` in a Pod rule that autogen extends to workloads; `object.metadata`
  whatever the kind (ObjectMeta is everyone's), and its labels/annotations in such a Pod rule
  (the workload's there, not the pod's: podMetadata);
- params: a `params.x` that the rule's `params` does not define (a typo, an error at runtime);
- mutate-then-deny: a rule's mutation that a validation of the same pack denies, found
  by evaluating the pack on synthetic pods (one with a GPU, one without);
- slow or leaking forms: CEL that is valid but costs memory on every request or seconds on
  a tenant-sized string (see _slow_forms).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.cel import celsyntax
from webhook.engine import (
    KIND_TABLE,
    MUTATIONS,
    AdmissionInput,
    LoadError,
    ParamTypes,
    Phase,
    RuleSet,
    SourceLocation,
    evaluate,
    load_rules,
    rule_files,
)
from webhook.engine.documents import API_VERSION, POLICY_KIND, TEST_KIND
from webhook.kubeyaml import Document, YamlError, load_documents

from .celfields import field_problems, reads_object_kind, scope_for
from .suiteschema import schema_problems as suite_schema_problems

# -- slow or leaking CEL forms -----------------------------------------------------------------------
# Measured with cel-expr-python 0.1.3, 20,000 evaluations of one rule on a one-container GPU pod,
# RSS after gc and malloc_trim: these forms call a Python-implemented helper with an argument,
# and the binding keeps what it converted (celhelpers.py rewrites the fast forms into plain CEL).
_GPU_COUNT = re.compile(r"\bgpuCount\s*\(([^()]*)\)")
_QUANTITY = re.compile(r"\bquantity\s*\(([^()]*)\)")
_SPLIT = re.compile(r"\.\s*split\s*\(")
_OPERAND_START = re.compile(r"[\s(,&|!?:+<>=]")  # where the receiver of a method call begins, scanning back
_UNBOUNDED = ("annotations", "labels")  # tenant strings of any size: we see the object before the apiserver
SLOW_FORMS = {
    "gpuCount": (
        "gpuCount() of a spec other than podSpec calls into Python on every evaluation and leaks ~10 KB a "
        "request (measured); use targetGpuCount (all of the target's pod specs), gpuCount(podSpec), or "
        "containerGpuCount(c) per container"
    ),
    "quantity": (
        "quantity() of a value that is not a literal nor a container's resources.requests/limits value calls "
        "into Python and leaks ~150 B a request (measured); compare the string, or read the value from "
        "resources, whose quantities are parsed once per request"
    ),
    "split": (
        "split() on an annotation or label value of the object: the tenant's object reaches us before the apiserver's size "
        "checks, and splitting a 2.9 MB annotation takes ~0.65 s (measured); guard it with size() "
        "(e.g. v.size() <= 1024 && v.split(',')...) or use matches()/contains()"
    ),
}

# The expressions of a rule, by path inside its document (mutations declare theirs: mutate.MUTATIONS).
_EXPRESSION_PATHS: tuple[tuple[str, ...], ...] = (
    ("spec", "match", "condition"),
    ("spec", "validate", "expression"),
    ("spec", "validate", "messageExpression"),
)
LINT_NAMESPACE = "gpu-lint"


def lint(
    paths: Iterable[str | os.PathLike[str]], objects: Iterable[Document] = (), *, suites: bool = True
) -> list[LoadError]:
    """Every problem of every rule file under the paths, and of `objects` (policy objects from a cluster:
    the server's admission of GPUPolicy objects), in file order; without `suites`, the GPUPolicyTest
    suites beside the rules go unchecked (nothing an object's admission is about)."""
    paths, objects = list(paths), list(objects)
    result = load_rules(paths, objects)
    errors = list(result.errors)
    files = rule_files(paths)
    documents = list(_policy_documents(files))
    documents += [d for d in objects if isinstance(d.data, Mapping) and d.data.get("kind") == POLICY_KIND]
    env = result.ruleset.env if result.ruleset is not None else None
    for document in documents:
        errors.extend(_field_errors(document))
        errors.extend(_slow_forms(document))
        errors.extend(_param_errors(document))
        errors.extend(_param_type_errors(document, env))
        errors.extend(_kind_errors(document))
    if suites:
        errors.extend(_suite_errors(files))
    if result.ruleset is not None:
        errors.extend(_mutate_then_deny(result.ruleset, {_name(d): d for d in documents}))
    return sorted(_unique(errors), key=lambda e: (e.location.file, e.location.line, e.location.column))


def _unique(errors: list[LoadError]) -> Iterator[LoadError]:
    seen: set[str] = set()
    for error in errors:
        if str(error) not in seen:
            seen.add(str(error))
            yield error


# file -> (its text, its documents): a file is parsed again only when its text changed. The server's
# /policies check lints the whole pack at every apply, in a process that lives from one to the next.
_PARSED: dict[str, tuple[str, list[Document]]] = {}


def _documents(files: list[str]) -> Iterator[Document]:
    """Every document of the files the loader could read (it has reported those it could not)."""
    for file in files:
        try:
            text = Path(file).read_text(encoding="utf-8")
            known = _PARSED.get(file)
            if known is None or known[0] != text:
                known = _PARSED[file] = (text, list(load_documents(text, file)))
        except (OSError, UnicodeDecodeError, YamlError):
            continue
        yield from known[1]


def _policy_documents(files: list[str]) -> Iterator[Document]:
    for document in _documents(files):
        data = document.data
        if isinstance(data, Mapping) and data.get("kind") == POLICY_KIND and data.get("apiVersion") == API_VERSION:
            yield document


def _suite_errors(files: list[str]) -> Iterator[LoadError]:
    """GPUPolicyTest suites beside the rules that break their schema, as `gpu-webhook test` refuses them."""
    for document in _documents(files):
        if isinstance(document.data, Mapping) and document.data.get("kind") == TEST_KIND:
            yield from suite_schema_problems(document)


def _name(document: Document) -> str:
    metadata = document.data.get("metadata")
    return str(metadata.get("name")) if isinstance(metadata, Mapping) else ""


def _field_errors(document: Document) -> Iterator[LoadError]:
    data = document.data
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        return
    match = found if isinstance(found := spec.get("match"), Mapping) else {}
    kinds = listed if isinstance(listed := match.get("kinds"), list) else []
    names = KIND_TABLE.kind_names(kinds)
    texts = list(document_cel_texts(data))
    reads_kind = any(reads_object_kind(text) for _, text in texts)
    scope = scope_for(names, spec.get("autogen", True) is not False, reads_kind)
    for path, text in texts:
        for problem in field_problems(text, scope):
            line, column = document.text_position(path, problem.offset)
            where = SourceLocation(document.file, line, column)
            yield LoadError(where, f"{_dotted(path)}: {problem.message}", _name(document))


def _slow_forms(document: Document) -> Iterator[LoadError]:
    """CEL forms that pass every check but leak memory per request or run for seconds on a tenant's
    string: each with the reason and the fast form (SLOW_FORMS)."""
    for path, text in document_cel_texts(document.data):
        # literals and comments blanked (same length, so offsets stay right): a form inside one is text
        code = celsyntax.blank(text, fill="_")
        found: list[tuple[int, str]] = []
        for call in _GPU_COUNT.finditer(code):
            if call.group(1).strip() != "podSpec":
                found.append((call.start(), "gpuCount"))
        for call in _QUANTITY.finditer(code):
            argument = call.group(1).strip()
            literal = argument.startswith(("'", '"')) or argument.lstrip("-").isdigit()
            if not literal and "resources" not in argument:
                found.append((call.start(), "quantity"))
        for call in _SPLIT.finditer(code):
            start = call.start()
            while start > 0 and not _OPERAND_START.match(code, start - 1):
                start -= 1
            receiver = code[start : call.start()]
            # the namespace's annotations are the cluster admin's; the object's are the tenant's
            if any(word in receiver for word in _UNBOUNDED) and not receiver.startswith("namespaceObject"):
                found.append((start, "split"))
        for offset, form in sorted(found):
            line, column = document.text_position(path, offset)
            yield LoadError(
                SourceLocation(document.file, line, column), f"{_dotted(path)}: {SLOW_FORMS[form]}", _name(document)
            )


# params.name, params['name'], .params.name (CEL's leading dot; not other.params.name: celsyntax.selected)
_PARAM_REFERENCE = re.compile(r"(?<!\w)params\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")


def _kind_errors(document: Document) -> Iterator[LoadError]:
    """A kind the webhook registration cannot ask the apiserver to send: neither in the engine's kind
    table nor declared with its API. The rule would lint, test and audit, and never act in a cluster."""
    spec = document.data.get("spec")
    match = spec.get("match") if isinstance(spec, Mapping) else None
    kinds = match.get("kinds") if isinstance(match, Mapping) else None
    if not isinstance(kinds, list):
        return
    for index, kind in enumerate(kinds):
        if not isinstance(kind, str) or kind == "*" or kind in KIND_TABLE:
            continue
        close = difflib.get_close_matches(kind, [k.kind for k in KIND_TABLE], n=1, cutoff=0.85)
        hint = f"did you mean {close[0]}? Otherwise name" if close else "name"
        line, column = document.position(("spec", "match", "kinds", index))
        yield LoadError(
            SourceLocation(document.file, line, column),
            f"spec.match.kinds[{index}]: {kind} cannot be enforced: the webhook registration only sends the kinds "
            f"gpu-webhook knows ({', '.join(sorted(KIND_TABLE.names))}); {hint} its API so that it is registered: "
            f"kinds: [{{kind: {kind}, group: <group, '' for core>, version: <v1>, resource: <plural>}}]",
            _name(document),
        )


def _param_errors(document: Document) -> Iterator[LoadError]:
    """A `params.x` the rule does not define: params are constants, so this is a typo that errors
    (or, under failurePolicy Fail, denies) on every object at runtime (`params.taintkey` vs taintKey)."""
    spec = document.data.get("spec")
    if not isinstance(spec, Mapping):
        return
    params = given if isinstance(given := spec.get("params"), Mapping) else {}
    for path, text in document_cel_texts(document.data):
        code = celsyntax.blank(text)  # a reference inside a literal or a comment is text, not a read
        for found in _PARAM_REFERENCE.finditer(text):
            name = found.group(1) or found.group(2)
            if (
                name in params
                or not code.startswith("params", found.start())
                or celsyntax.selected(code, found.start())
            ):
                continue  # a param it has, text inside a literal, or a field of another value
            close = difflib.get_close_matches(name, [str(k) for k in params], n=1, cutoff=0.6)
            close = close or [k for k in map(str, params) if k.lower() == name.lower()]
            hint = f"; did you mean params.{close[0]}?" if close else ""
            known = ", ".join(sorted(map(str, params))) or "none"
            line, column = document.text_position(path, found.start())
            yield LoadError(
                SourceLocation(document.file, line, column),
                f"{_dotted(path)}: params.{name} is not a param of this rule (its params: {known}){hint}",
                _name(document),
            )


def _param_type_errors(document: Document, env: Any) -> Iterator[LoadError]:
    """An expression whose use of a param does not fit the param's type (spec.paramsSchema, else the
    type of its default): `gpuCount(podSpec) <= params.max` with `max: "8"` errs on every object."""
    spec = document.data.get("spec")
    if not isinstance(spec, Mapping):
        return
    params = given if isinstance(given := spec.get("params"), Mapping) else {}
    declared = spec.get("paramsSchema")
    types = ParamTypes.of(params, declared if isinstance(declared, Mapping) else None)
    origin = "spec.paramsSchema" if isinstance(declared, Mapping) else "the types of spec.params"
    for path, text in document_cel_texts(document.data):
        error = types.error(env, text)
        if error is None:
            continue
        offset = _offset(text, error.line, error.column)
        line, column = document.text_position(path, offset)
        yield LoadError(
            SourceLocation(document.file, line, column),
            f"{_dotted(path)}: CEL type error with the params' types ({origin}): {str(error).splitlines()[0]}",
            _name(document),
        )


def _offset(text: str, line: int, column: int) -> int:
    """The offset of a 1-based line and column in text."""
    lines = text.split("\n")
    return sum(len(part) + 1 for part in lines[: max(line - 1, 0)]) + max(column - 1, 0)


def document_cel_texts(data: Mapping[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every CEL text of a GPUPolicy document, with where it sits (match, validate, each mutation's fields)."""
    for path in _EXPRESSION_PATHS:
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, str):
            yield path, node
    mutate = data["spec"].get("mutate")
    for index, operation in enumerate(mutate if isinstance(mutate, list) else []):
        if not isinstance(operation, Mapping):
            continue
        for name, args in operation.items():
            kind = MUTATIONS.get(name)
            if kind is None:
                continue  # the loader reports the unknown operation
            for path, text in kind.cel_texts(args):
                yield ("spec", "mutate", index, name, *path), text


def _dotted(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def synthetic_pods() -> list[tuple[str, dict[str, Any]]]:
    """What every pack must be able to admit after its own mutations: a plain GPU pod and a CPU pod."""

    def pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": LINT_NAMESPACE, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:1", "resources": resources}]},
        }

    gpu = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    return [("a GPU pod", pod("lint-gpu-pod", gpu)), ("a CPU-only pod", pod("lint-cpu-pod", {}))]


def _mutate_then_deny(ruleset: RuleSet, documents: Mapping[str, Document]) -> Iterator[LoadError]:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LINT_NAMESPACE, "labels": {}}}

    def validate(obj: dict[str, Any]) -> dict[str, str]:
        admission = AdmissionInput.offline(obj, namespace=LINT_NAMESPACE, namespace_object=namespace)
        decision = evaluate(ruleset, admission, phase=Phase.VALIDATE)
        return {v.rule: v.message for v in decision.violations}

    rules = {rule.name: rule for rule in ruleset.rules}
    reported: set[tuple[str, str]] = set()
    for description, pod in synthetic_pods():
        admission = AdmissionInput.offline(pod, namespace=LINT_NAMESPACE, namespace_object=namespace)
        before = validate(pod)
        decision = evaluate(ruleset, admission, phase=Phase.ALL)
        for entry in decision.trace:
            if not entry.patch:
                continue
            # this rule's edits alone, so the blame lands on the one mutation that causes the denial
            after = validate(jsonpatch.apply_patch(pod, entry.patch))
            for denier, message in after.items():
                if denier in before or denier == entry.rule or (entry.rule, denier) in reported:
                    continue
                reported.add((entry.rule, denier))
                document = documents.get(entry.rule)
                if document is not None:
                    line, column = document.position(("spec", "mutate"), key=True)
                    where = SourceLocation(document.file, line, column)
                else:
                    where = rules[entry.rule].source
                yield LoadError(
                    where,
                    f"spec.mutate: the mutated object is denied by rule {denier} of the same pack "
                    f"(on {description}: {message})",
                    entry.rule,
                )
