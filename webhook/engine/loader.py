"""Rules directory -> RuleSet: parse, schema-check and compile once per (re)load.

Every problem of every file is collected (file:line:column: rule NAME: message), so a
reload reports all of them at once and `lint` can share this code. A RuleSet is only
built when there are no errors; the caller keeps the last good one otherwise.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path as FsPath
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from webhook.kubeyaml import Document, YamlError, load_documents

from .cel import CelCompileError, CelEnvironment, CompiledExpression
from .exceptions import EXCEPTION_VALIDATOR, PolicyException, parse_exception, unknown_rules
from .mutate import MUTATIONS, Mutation, build_mutation
from .overlays import OVERLAID_BY, apply_overlays
from .paramtypes import inferred_schema, params_problems, schema_problems
from .policy import Action, KindApi, LoadError, Match, Rule, RuleLoadError, SourceLocation, Validation
from .ratcheting import rule_inputs
from .resources import Accelerators
from .ruleset import RuleSet
from .schema import (
    API_VERSION,
    CONFIG_KIND,
    CONFIG_SCHEMA,
    EXCEPTION_KIND,
    OVERLAY_KIND,
    OVERLAY_SCHEMA,
    POLICY_KIND,
    POLICY_SCHEMA,
    TEST_KIND,
    dotted,
    selector_of,
)
from .workloads import KIND_TABLE

RULE_SUFFIXES = (".yaml", ".yml")
# what each kind of expression must give; DYN (unknown until run time) is accepted everywhere
RESULT_TYPES: dict[str, tuple[str, ...]] = {
    "condition": ("BOOL", "DYN"),
    "expression": ("BOOL", "LIST<STRING>", "LIST<DYN>", "DYN"),
    "messageExpression": ("STRING", "DYN"),
    "valueExpression": ("STRING", "DYN"),
}
_POLICY_VALIDATOR = Draft202012Validator(POLICY_SCHEMA)
_CONFIG_VALIDATOR = Draft202012Validator(CONFIG_SCHEMA)
_OVERLAY_VALIDATOR = Draft202012Validator(OVERLAY_SCHEMA)


@dataclass(slots=True)
class LoadResult:
    ruleset: RuleSet | None
    errors: list[LoadError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # the GPUPolicyExceptions among the documents (also in ruleset.exceptions when it was built)
    exceptions: tuple[PolicyException, ...] = ()

    @property
    def ok(self) -> bool:
        return self.ruleset is not None

    def require(self) -> RuleSet:
        """The rule set, or RuleLoadError carrying every problem, one `file:line:column: ...` per line."""
        if self.ruleset is None:
            raise RuleLoadError(self.errors)
        return self.ruleset


def rule_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """YAML files under the given paths, sorted, each once (paths may overlap: `test rules/ rules/site/`);
    `..data`-style ConfigMap internals are skipped."""
    paths = list(paths)
    found: list[str] = []
    for path in paths:
        path = FsPath(path)
        if path.is_file():
            found.append(str(path))
            continue
        for root, dirs, files in os.walk(path, followlinks=True):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(RULE_SUFFIXES))
    if len(paths) < 2:
        return found
    unique: dict[str, str] = {}  # real path -> the first name it was found under
    for file in found:
        unique.setdefault(os.path.realpath(file), file)
    return list(unique.values())


_SUITES = frozenset({TEST_KIND})


def load_rules(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    objects: Iterable[Document] = (),
    absent: Iterable[str] = (),
) -> LoadResult:
    """The rule files under `paths`, and `objects` (policy objects read from a cluster) after them.

    `absent` names rules that exist but are left out of this load (policy objects that did not load,
    webhook/policies/isolation.py): an overlay or exception that names one is not an error for it."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    paths = list(paths)
    files = rule_files(p for p in paths if os.path.exists(p))
    errors = [LoadError(SourceLocation(str(p), 1, 1), "rules path not found") for p in paths if not os.path.exists(p)]
    documents: list[Document] = []
    for file in files:
        try:
            text = FsPath(file).read_text(encoding="utf-8")
            documents.extend(load_documents(text, file, skip_kinds=_SUITES))  # `gpu-webhook test` reads them
        except YamlError as error:
            errors.append(LoadError(SourceLocation(file, error.line, error.column), f"invalid YAML: {error}"))
        except (OSError, UnicodeDecodeError) as error:
            errors.append(LoadError(SourceLocation(file, 1, 1), f"cannot read: {error}"))
    documents.extend(objects)
    result = compile_documents(documents, errors, absent)
    result.files = files
    return result


def compile_documents(
    documents: list[Document], errors: list[LoadError] | None = None, absent: Iterable[str] = ()
) -> LoadResult:
    """GPUPolicy, GPUPolicyOverlay, GPUPolicyException and GPUWebhookConfig documents -> a LoadResult.

    Overlays rewrite the GPUPolicy documents before they are compiled (overlays.py), so whatever
    reads the RuleSet sees the site's rules; exceptions must name rules that exist and accept them."""
    errors = errors if errors is not None else []
    policies: list[Document] = []
    overlays: list[Document] = []
    exception_documents: list[Document] = []
    sorted_into = {POLICY_KIND: policies, OVERLAY_KIND: overlays, EXCEPTION_KIND: exception_documents}
    accelerator_settings: dict[str, Any] = {}  # GPUWebhookConfig spec keys; a later document's win
    for document in documents:
        data = document.data
        if data is None:
            continue
        where = _location(document, ())
        if not isinstance(data, Mapping):
            errors.append(LoadError(where, "a rule document must be a mapping"))
            continue
        for path, (line, column) in document.duplicate_keys:
            errors.append(LoadError(SourceLocation(document.file, line, column), f"duplicate key {path[-1]!r}"))
        kind = data.get("kind")
        if kind == TEST_KIND:
            continue  # test suites live beside the rules; `gpu-webhook test` reads them
        if kind == CONFIG_KIND:
            if _schema_errors(document, _CONFIG_VALIDATOR, errors, None):
                accelerator_settings.update(data.get("spec") or {})
            continue
        if kind in sorted_into and data.get("apiVersion") == API_VERSION:
            sorted_into[kind].append(document)
            continue
        errors.append(
            LoadError(
                where,
                f"unknown document {data.get('apiVersion')}/{kind}: expected {API_VERSION} "
                f"{POLICY_KIND}, {OVERLAY_KIND}, {EXCEPTION_KIND}, {CONFIG_KIND} or {TEST_KIND}",
            )
        )

    valid: list[Document] = []
    # every rule name written, -> whether it accepts exceptions; `absent` ones are known, and left out
    named: dict[str, bool] = dict.fromkeys(absent, True)
    for document in policies:
        name = _rule_name(document.data)
        if name is not None:
            named.setdefault(name, True)
        if _schema_errors(document, _POLICY_VALIDATOR, errors, name):
            valid.append(document)
    overlays = [d for d in overlays if _schema_errors(d, _OVERLAY_VALIDATOR, errors, None)]
    # each rule's params schema, as shipped: declared, or the types of its defaults (paramtypes.py)
    param_schemas = {
        document.data["metadata"]["name"]: document.data["spec"].get("paramsSchema")
        or inferred_schema(document.data["spec"].get("params") or {})
        for document in valid
    }
    if overlays:
        valid = apply_overlays(valid, overlays, errors, known=frozenset(named))
    for document in valid:
        named[document.data["metadata"]["name"]] = document.data["spec"].get("exceptable", True)

    env = CelEnvironment(Accelerators.from_config(accelerator_settings))
    rules: list[Rule] = []
    seen: dict[str, SourceLocation] = {}
    for document in valid:
        before = len(errors)
        name = document.data["metadata"]["name"]
        rule = _compile_rule(document, env, errors) if _params_fit(document, param_schemas.get(name), errors) else None
        overlaid = (document.data["metadata"].get("annotations") or {}).get(OVERLAID_BY)
        if overlaid and len(errors) > before:
            # the rule compiled as shipped: what broke it is the overlay's value
            errors[before:] = [
                replace(e, message=f"{e.message} (with GPUPolicyOverlay {overlaid})") for e in errors[before:]
            ]
        if rule is None:
            continue
        if rule.name in seen:
            errors.append(
                LoadError(rule.source, f"duplicate rule name (first defined at {seen[rule.name]})", rule.name)
            )
            continue
        seen[rule.name] = rule.source
        rules.append(rule)
    exceptions = _exceptions(exception_documents, named, errors)
    if errors:
        return LoadResult(ruleset=None, errors=errors, exceptions=exceptions)
    return LoadResult(ruleset=RuleSet.build(rules, env, exceptions), exceptions=exceptions)


def exception_errors(documents: list[Document], rules: Mapping[str, bool]) -> list[LoadError]:
    """What loading finds in GPUPolicyException documents among `rules` (name -> exceptable), without
    loading the rules again: an exception changes no rule, so its check costs the exception alone."""
    errors: list[LoadError] = []
    _exceptions(documents, rules, errors)
    return errors


def _params_fit(document: Document, schema: Any, errors: list[LoadError]) -> bool:
    """Whether the rule's params (after overlays) fit its params schema; each problem reported."""
    spec = document.data["spec"]
    name = document.data["metadata"]["name"]
    if not isinstance(schema, Mapping):
        return True
    before = len(errors)
    if "paramsSchema" in spec:
        for path, message in schema_problems(spec["paramsSchema"]):
            where = _location(document, ("spec", "paramsSchema", *path))
            errors.append(LoadError(where, f"{dotted(('spec', 'paramsSchema', *path))}: {message}", name))
        if len(errors) > before:
            return False
    declared = "paramsSchema" in spec
    for path, message in params_problems(spec.get("params") or {}, schema):
        where = _location(document, ("spec", "params", *path))
        origin = "spec.paramsSchema" if declared else "the type of the shipped default"
        errors.append(LoadError(where, f"{dotted(('spec', 'params', *path))}: {message} ({origin})", name))
    return len(errors) == before


def _exceptions(
    documents: list[Document], rules: Mapping[str, bool], errors: list[LoadError]
) -> tuple[PolicyException, ...]:
    """The exception documents, parsed; each must name rules that exist and accept exceptions."""
    found: list[PolicyException] = []
    seen: dict[str, SourceLocation] = {}
    for document in documents:
        if not _schema_errors(document, EXCEPTION_VALIDATOR, errors, None):
            continue
        try:
            exception = parse_exception(document)
        except RuleLoadError as error:
            errors.extend(error.errors)
            continue
        where = exception.source or _location(document, ())
        if exception.key in seen:
            errors.append(
                LoadError(where, f"{EXCEPTION_KIND} {exception.key}: duplicate name (first at {seen[exception.key]})")
            )
            continue
        seen[exception.key] = where
        problems = unknown_rules(exception, rules)
        for problem in problems:
            errors.append(
                LoadError(_location(document, ("spec", "rules")), f"{EXCEPTION_KIND} {exception.key}: {problem}")
            )
        if not problems:
            found.append(exception)
    return tuple(found)


def _rule_name(data: Mapping[str, Any]) -> str | None:
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def _location(document: Document, path: tuple[Any, ...], key: bool = False) -> SourceLocation:
    line, column = document.position(path, key=key)
    return SourceLocation(document.file, line, column)


def _schema_errors(
    document: Document, validator: Draft202012Validator, errors: list[LoadError], rule: str | None
) -> bool:
    """Report every schema violation of one document; True when there were none."""
    content = _content(document.data)
    if content is not None and (id(validator), content) in _VALID:
        return True
    before = len(errors)
    try:
        found = sorted(validator.iter_errors(document.data), key=lambda e: list(map(str, e.absolute_path)))
    except RecursionError:
        errors.append(LoadError(_location(document, ()), "document is nested too deeply", rule))
        return False
    for error in found:
        errors.extend(_explain(document, error, rule))
    if content is not None and len(errors) == before:
        if len(_VALID) >= _VALID_MAX:
            _VALID.clear()
        _VALID.add((id(validator), content))
    return len(errors) == before


# Documents found valid, by content: a reload (one policy object changed among hundreds) checks only what
# is new, as CelEnvironment.compile keeps programs (checking every document again is about half of such a
# reload, bench/policy_scale.py). The validators are module constants, so their ids stay theirs.
_VALID: set[tuple[int, bytes]] = set()
_VALID_MAX = 4096
# only what YAML and the API give as JSON: a datetime or a dataclass is checked every time
_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _content(data: Any) -> bytes | None:
    """The document's data as canonical JSON; None when it is not JSON (then it is checked every time).
    With a null in it too: orjson writes NaN and infinities as null, and a null may be valid where they are not."""
    try:
        content = orjson.dumps(data, option=_CANONICAL)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return None if b"null" in content else content


def _explain(document: Document, error: Any, rule: str | None) -> Iterator[LoadError]:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        allowed = list(error.schema.get("properties", {}))
        for extra in sorted(set(error.instance) - set(allowed), key=str):
            hint = difflib.get_close_matches(str(extra), allowed, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(allowed)})"
            where = _location(document, (*path, extra), key=True)
            yield LoadError(where, f"unknown field {dotted((*path, extra))!r}{suffix}", rule)
        return
    where = _location(document, path)
    field_name = dotted(path) or "document"
    if error.validator == "enum":
        choices = ", ".join(str(c) for c in error.validator_value)
        yield LoadError(where, f"{field_name}: {error.instance!r} is not one of: {choices}", rule)
    elif error.validator == "required":
        yield LoadError(where, f"{field_name}: {error.message.replace(' property', ' field')}", rule)
    elif error.validator == "anyOf" and path == ("spec",):
        yield LoadError(where, "spec: a rule needs `validate`, `mutate` or both", rule)
    elif error.validator == "anyOf" and isinstance(error.instance, Mapping):
        # a mutation's own arguments, or {fromParam: NAME}: explain the branch the author meant
        branch = 1 if "fromParam" in error.instance else 0
        for sub in error.context:
            if sub.relative_schema_path and sub.relative_schema_path[0] == branch:
                yield from _explain(document, sub, rule)
    elif error.validator in ("minProperties", "maxProperties") and "mutate" in path:
        yield LoadError(where, f"{field_name}: each mutate entry names exactly one operation", rule)
    elif error.validator == "oneOf" and path[:3] == ("spec", "match", "kinds"):
        # a kind name, a {kindGroup: NAME} or a kind's API: explain the form the author wrote
        branch = 0 if not isinstance(error.instance, Mapping) else 1 if "kindGroup" in error.instance else 2
        for sub in error.context:
            if sub.relative_schema_path and sub.relative_schema_path[0] == branch:
                yield from _explain(document, sub, rule)
    elif error.validator == "oneOf":
        yield LoadError(where, f"{field_name}: give exactly one of `value` or `valueExpression`", rule)
    elif (
        error.validator == "type"
        and error.validator_value == "string"
        and isinstance(error.instance, bool | int | float)
    ):
        # `message: no`, `value: on`, `value: 1.10`: YAML 1.1 (kubectl's reading) made them no text
        found = "a boolean" if isinstance(error.instance, bool) else "a number"
        yield LoadError(
            where,
            f"{field_name}: expected text, found {found} ({error.instance!r}): unquoted yes/no/on/off/true/false "
            "are booleans and digits are numbers in Kubernetes' YAML; quote the value",
            rule,
        )
    else:
        yield LoadError(where, f"{field_name}: {error.message}", rule)


def _compile_rule(document: Document, env: CelEnvironment, errors: list[LoadError]) -> Rule | None:
    data = document.data
    spec = data["spec"]
    name = data["metadata"]["name"]
    before = len(errors)
    params = spec.get("params") or {}

    def compile_cel(text: str) -> CompiledExpression:
        # params become a constant of each expression, so one activation serves all rules (cel.py)
        return env.compile(text, params=params)

    def expression(path: tuple[Any, ...]) -> CompiledExpression | None:
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else node[part]
            if node is None:
                return None
        try:
            compiled = compile_cel(node)
        except CelCompileError as error:
            where = _text_location(document, path, node, error.line, error.column)
            errors.append(LoadError(where, f"{dotted(path)}: CEL: {error}", name))
            return None
        expected = RESULT_TYPES[path[-1]]
        if compiled.result_type not in expected:
            # e.g. a validate expression that gives an int: every request would end in a rule error
            errors.append(
                LoadError(
                    _location(document, path),
                    f"{dotted(path)}: CEL type error: the expression gives {compiled.result_type}, "
                    f"expected {' or '.join(t for t in expected if t != 'DYN')}",
                    name,
                )
            )
            return None
        return compiled

    match_spec = spec["match"]
    namespaces = match_spec.get("namespaces") or {}
    operations = match_spec.get("operations") or ["CREATE", "UPDATE"]
    match = Match(
        # a {kindGroup: NAME} entry stands for its kinds of the kind table
        kinds=frozenset(KIND_TABLE.kind_names(match_spec["kinds"])),
        declared=tuple(
            KindApi(k["kind"], k["group"], k["version"], k["resource"])
            for k in match_spec["kinds"]
            if isinstance(k, Mapping) and "kind" in k
        ),
        operations=frozenset(("CREATE", "UPDATE", "DELETE", "CONNECT") if "*" in operations else operations),
        namespaces_include=frozenset(namespaces["include"]) if "include" in namespaces else None,
        namespaces_exclude=frozenset(namespaces.get("exclude", ())),
        namespace_selector=selector_of(match_spec.get("namespaceSelector")),
        object_selector=selector_of(match_spec.get("objectSelector")),
        gpu=match_spec.get("gpu"),
        condition=expression(("spec", "match", "condition")),
    )
    validation = None
    if "validate" in spec:
        validate_expression = expression(("spec", "validate", "expression"))
        message_expression = expression(("spec", "validate", "messageExpression"))
        if validate_expression is not None:
            validation = Validation(
                expression=validate_expression,
                message=spec["validate"].get("message"),
                message_expression=message_expression,
            )
    mutations = []
    for index, operation in enumerate(spec.get("mutate") or []):
        ((operation_name, args),) = operation.items()
        where = _location(document, ("spec", "mutate", index))
        if isinstance(args, Mapping) and "fromParam" in args:
            args = params.get(args["fromParam"])
            problems = list(Draft202012Validator(MUTATIONS[operation_name].schema).iter_errors(args))
            if problems:
                detail = problems[0].message if args is not None else "is not set"
                errors.append(
                    LoadError(
                        where, f"spec.mutate[{index}].{operation_name}: params.{_param_name(operation)} {detail}", name
                    )
                )
                continue
        try:
            mutation = build_mutation({operation_name: args}, compile_cel)
        except CelCompileError as error:
            errors.append(LoadError(where, f"spec.mutate[{index}]: CEL: {error}", name))
            continue
        wrong = [e for e in _mutation_expressions(mutation) if e.result_type not in RESULT_TYPES["valueExpression"]]
        for compiled in wrong:
            errors.append(
                LoadError(
                    where,
                    f"spec.mutate[{index}].{operation_name}: CEL type error: {compiled.text!r} gives "
                    f"{compiled.result_type}, expected STRING",
                    name,
                )
            )
        if not wrong:
            mutations.append(mutation)
    if len(errors) > before:
        return None
    used = [e for e in (match.condition, validation.expression if validation else None) if e is not None]
    if validation and validation.message_expression:
        used.append(validation.message_expression)
    used.extend(e for m in mutations for e in _mutation_expressions(m))
    references = frozenset().union(*(e.references for e in used))
    touched = [field for mutation in mutations for field in MUTATIONS[mutation.name].touches]
    inputs = rule_inputs(used, touched, match.object_selector is not None)
    needs_namespace = match.namespace_selector is not None or "namespaceObject" in references
    annotations = data["metadata"].get("annotations") or {}
    return Rule(
        name=name,
        description=annotations.get("gpu-webhook.io/description", ""),
        action=Action(spec.get("action", "Deny")),
        match=match,
        validate=validation,
        mutations=tuple(mutations),
        params=spec.get("params") or {},
        autogen=spec.get("autogen", True),
        ratcheting=spec.get("ratcheting", True),
        exceptable=spec.get("exceptable", True),
        overlaid_by=annotations.get(OVERLAID_BY, ""),
        failure_policy=spec.get("failurePolicy", "Fail"),
        on_missing_context=spec.get("onMissingContext", "Allow"),
        needs_namespace=needs_namespace,
        references=references,
        inputs=inputs,
        source=_location(document, ()),
    )


def _text_location(document: Document, path: tuple[Any, ...], text: str, line: int, column: int) -> SourceLocation:
    """A (line, column) inside an expression's text -> the file's line and column."""
    lines = text.split("\n")
    offset = sum(len(lines[i]) + 1 for i in range(min(line - 1, len(lines)))) + column - 1
    file_line, file_column = document.text_position(path, offset)
    return SourceLocation(document.file, file_line, file_column)


def _param_name(operation: Mapping[str, Any]) -> str:
    (args,) = operation.values()
    return str(args["fromParam"])


def _mutation_expressions(mutation: Mutation) -> list[CompiledExpression]:
    """The CEL a mutation holds, as it declares it."""
    return list(mutation.cel())
