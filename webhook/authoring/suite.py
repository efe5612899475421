"""`gpu-webhook test`: run GPUPolicyTest suites against the rules with the server's engine.

A suite names cases (an object, the operation, optional oldObject, namespace object and
user) and what should happen: per rule (allowed / denied / warned / audited / mutated /
skipped / error / excepted, the message, the rule's patch), and for the whole pack (allowed, the
object after mutation, the exact patch). Every case is evaluated with `evaluate(...,
Phase.ALL)`, so a suite sees what the mutating and validating webhooks together do.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.audit.context import NamespaceContext
from webhook.engine import (
    AdmissionInput,
    Decision,
    LoadError,
    Phase,
    Result,
    RuleLoadError,
    RuleOutcome,
    RuleSet,
    SourceLocation,
    evaluate,
    load_rules,
    parse_exception,
    parse_time,
    rule_files,
)
from webhook.engine.documents import EXCEPTION_KIND, TEST_KIND
from webhook.kubeyaml import Document, ParseError, YamlError, kubectl_documents, load_documents, styles

from .suiteschema import schema_problems


class SuiteError(Exception):
    """Suites or rules that cannot be run: reported as configuration errors (exit 2)."""


@dataclass(slots=True)
class CaseResult:
    suite: str  # file of the suite
    name: str  # the case's name
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    excepted: list[str] = field(default_factory=list)  # "RULE excepted by NS/NAME: REASON", for the report

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def id(self) -> str:
        return f"{self.suite}::{self.name}"


@dataclass(slots=True)
class Suite:
    document: Document
    rules: tuple[str, ...]  # the rules paths the cases run against, their rules merged

    @property
    def file(self) -> str:
        return self.document.file

    @property
    def cases(self) -> list[dict[str, Any]]:
        return list(self.document.data["spec"]["cases"])


def discover(
    path: str,
    rules: Sequence[str] | str | None = None,
    default_rules: str | Sequence[str] | None = None,
    unreadable: Callable[[str], None] | None = None,
    site: Sequence[str] = (),
) -> list[Suite]:
    """Every GPUPolicyTest document under path; raises SuiteError listing every schema problem.

    The rules a suite runs against: `rules` (the command line's --rules, every path merged) if
    given, else the suite's own `spec.rules` (relative to its file), else `default_rules`, else path;
    then the `site` paths (the command line's --site: overlays and exceptions on top of any of those).
    A file that is not UTF-8 text is told to `unreadable` and skipped (else it is a problem).
    """
    given = (rules,) if isinstance(rules, str) else tuple(rules or ())
    suites: list[Suite] = []
    problems: list[LoadError] = []
    for file in rule_files([path]):
        try:
            documents = load_documents(Path(file).read_text(encoding="utf-8"), file)
        except UnicodeDecodeError as error:
            message = f"{file}: not UTF-8 text (byte {error.start}): is it a binary file?"
            if unreadable is None:
                problems.append(LoadError(SourceLocation(file, 1, 1), message))
            else:
                unreadable(message)
            continue
        except YamlError as error:
            problems.append(LoadError(SourceLocation(file, error.line, error.column), f"invalid YAML: {error}"))
            continue
        for document in documents:
            data = document.data
            if not isinstance(data, Mapping) or data.get("kind") != TEST_KIND:
                continue
            errors = schema_problems(document)
            problems.extend(errors)
            if errors:
                continue
            own = data["spec"].get("rules")
            if given:
                suite_rules = given
            elif own:
                suite_rules = (str(Path(file).parent / own),)
            elif default_rules:
                suite_rules = (default_rules,) if isinstance(default_rules, str) else tuple(default_rules)
            else:
                suite_rules = (path,)
            suites.append(Suite(document, (*suite_rules, *site)))
    if problems:
        raise SuiteError("\n".join(str(p) for p in problems))
    return suites


def run(suites: list[Suite], load: Callable[[Sequence[str]], RuleSet] | None = None) -> Iterator[CaseResult]:
    """Run every case, one result each, in file order; `load` loads each distinct set of rules once."""
    rulesets: dict[tuple[str, ...], RuleSet] = {}
    for suite in suites:
        key = tuple(os.path.realpath(p) for p in suite.rules)  # rules/tests/.. and rules/ load once
        if key not in rulesets:
            rulesets[key] = (load or _load)(suite.rules)
        ruleset = rulesets[key]
        known = {rule.name for rule in ruleset.rules}
        for case in suite.cases:
            started = time.perf_counter()
            result = CaseResult(_display(suite.file), str(case["name"]))
            try:
                decision = evaluate(ruleset, admission(case, Path(suite.file).parent), Phase.ALL, trace=True)
                result.failures = check(case, decision, known)
                result.excepted = [f"{rule} {verdict}" for rule, verdict in decision.excepted.items()]
            except (OSError, YamlError, ValueError, ParseError) as error:
                result.failures = [f"cannot run the case: {error}"]
            result.seconds = time.perf_counter() - started
            yield result


def _load(paths: Sequence[str]) -> RuleSet:
    try:
        return load_rules(list(paths)).require()
    except RuleLoadError as error:
        raise SuiteError(str(error)) from None


def _display(file: str) -> str:
    relative = os.path.relpath(file)
    return file if relative.startswith("..") else relative


def admission(case: Mapping[str, Any], base: Path | str) -> AdmissionInput:
    """The case as the engine's input, with the CEL `request` filled as an AdmissionRequest would be."""
    obj = _resource(case, "object", base)
    old = _resource(case, "oldObject", base)
    namespace_object = _resource(case, "namespaceObject", base)
    # GPUPolicyExceptions among the cluster objects: the cluster's, as the server's watch gives them
    exceptions = tuple(
        parse_exception(obj, f"clusterObjects[{index}]")
        for index, obj in enumerate(case.get("clusterObjects") or ())
        if isinstance(obj, Mapping) and obj.get("kind") == EXCEPTION_KIND
    )
    now = None
    if "now" in case:  # the instant exceptions' expiries are compared with
        now = parse_time(case["now"])
        if now is None:
            raise ValueError(f"now: {case['now']!r} is not an RFC 3339 time with a zone (2026-12-01T00:00:00Z)")
    # the same input audit and explain build: the case's namespace (else the object's, else
    # `default`) written into a namespace-less object, as the apiserver does before admission
    return NamespaceContext(default_namespace=case.get("namespace")).admission(
        obj,
        operation=case.get("operation", "CREATE"),
        old_object=old,
        namespace=case.get("namespace"),
        namespace_object=namespace_object,
        user_info=case.get("userInfo") or {"username": "gpu-webhook-test"},
        cluster_objects=case.get("clusterObjects"),
        exceptions=exceptions,
        now=now,
    )


def _resource(case: Mapping[str, Any], key: str, base: Path | str) -> dict[str, Any] | None:
    if case.get(key) is not None:
        return dict(case[key])
    file = case.get(f"{key}File")
    if not file:
        return None
    try:
        text = (Path(base) / file).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{key}File {file}: not UTF-8 text: is it a binary file?") from None
    # as kubectl reads the file (the objects written in the suite are read so too: located.py)
    (document, *_) = [d for d in kubectl_documents(text) if d] or [None]
    if not isinstance(document, dict):
        raise ValueError(f"{key}File {file}: not a YAML object")
    return document


# -- expectations ------------------------------------------------------------------------------------


# The GPUPolicyTest vocabulary (`result:` of a rule expectation) is the engine's Result in the
# words a suite author writes; the one place that translates between the two.
EXPECTATION: dict[Result, str] = {
    Result.FAIL: "denied",
    Result.ERROR: "error",
    Result.WARN: "warned",
    Result.AUDIT: "audited",
    Result.EXCEPTED: "excepted",
    Result.PASS: "allowed",  # "mutated" when the rule patched
    Result.SKIP: "skipped",
}


def expectation(outcome: RuleOutcome | None) -> str:
    """What a suite calls this outcome: denied, error, warned, audited, excepted, mutated, allowed or skipped."""
    if outcome is None:
        return "skipped"
    if outcome.result == Result.PASS and outcome.patched:
        return "mutated"
    return EXPECTATION[outcome.result]


def check(case: Mapping[str, Any], decision: Decision, known: Collection[str] | None = None) -> list[str]:
    """What differs from the case's expectations, each as readable text (with a diff where it helps).

    `known`: the names of the rules the case ran against; an expectation about any other rule is a
    failure (a typo or a renamed rule would otherwise pass as "skipped" for ever).
    """
    expect = case.get("expect") or {}
    failures: list[str] = []
    outcomes = {o.rule: o for o in decision.outcomes()}
    if "allowed" in expect and expect["allowed"] != decision.allowed:
        detail = decision.denial_message or "no rule denied it"
        failures.append(
            f"expected allowed: {str(expect['allowed']).lower()}, got {str(decision.allowed).lower()} ({detail})"
        )
    for wanted in expect.get("rules") or []:
        if known is not None and wanted["rule"] not in known:
            # a typo in a rule name reads as a failing rule: name the nearest one
            near = difflib.get_close_matches(str(wanted["rule"]), sorted(known), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            failures.append(f"rule {wanted['rule']}: no such rule in the rules under test{hint}")
            continue
        failures.extend(_check_rule(wanted, outcomes.get(wanted["rule"])))
    if "patch" in expect and expect["patch"] != decision.patch:
        failures.append(
            "the pack's patch differs:\n" + diff(expect["patch"], decision.patch, "expected patch", "actual patch")
        )
    if "patchContains" in expect:
        failures.extend(_missing_operations("the pack's patch", expect["patchContains"], decision.patch))
    if "object" in expect:
        actual = decision.mutated if decision.mutated is not None else case.get("object")
        match = expect.get("objectMatch", "subset")
        if match == "exact":
            if expect["object"] != actual:
                failures.append(
                    "the object after mutation differs:\n"
                    + diff(expect["object"], actual, "expected object", "actual object")
                )
        elif match == "contains":
            if not contains(expect["object"], actual):
                failures.append(
                    "the object after mutation does not contain the expected fields and list items:\n"
                    + diff(expect["object"], actual, "expected (contained)", "actual object")
                )
        elif not is_subset(expect["object"], actual):
            shown = project(actual, expect["object"])
            failures.append(
                "the object after mutation does not contain the expected fields:\n"
                + diff(expect["object"], shown, "expected (subset)", "actual (same fields)")
            )
    return failures


def _missing_operations(whose: str, expected: list[Any], actual: list[dict[str, Any]]) -> list[str]:
    """One failure naming the expected operations that no operation of `actual` contains.

    Both sides are compared as their `add` leaves (add_leaves): a rule adds `/spec/tolerations` with
    a list when it is first, `/spec/tolerations/-` with an item when another rule made the list."""
    leaves = [leaf for op in actual for leaf in add_leaves(op)]
    wanted = [leaf for op in expected for leaf in add_leaves(op)]
    missing = [op for op in wanted if not any(contains(op, a) for a in leaves)]
    if not missing:
        return []
    return [
        f"{whose} does not contain {len(missing)} of the expected operations:\n"
        + diff(missing, actual, "missing operations", "actual patch")
    ]


def _check_rule(wanted: Mapping[str, Any], outcome: RuleOutcome | None) -> list[str]:
    name = wanted["rule"]
    result = expectation(outcome)
    messages = list(outcome.messages) if outcome is not None else []
    patch = list(outcome.patch) if outcome is not None else []
    why = (outcome.reason if outcome is not None else "") or (
        "kind or operation not matched" if result == "skipped" else ""
    )
    failures: list[str] = []
    if "result" in wanted and wanted["result"] != result:
        detail = f" ({why})" if why else (f": {'; '.join(messages)}" if messages else "")
        failures.append(f"rule {name}: expected {wanted['result']}, got {result}{detail}")
    # an excepted rule's message is its exception ("excepted by NS/NAME: REASON")
    text = "; ".join(messages) or (outcome.reason if outcome is not None and result == "excepted" else "")
    if "message" in wanted and wanted["message"] not in text:
        failures.append(f"rule {name}: message does not contain {wanted['message']!r}\n  message: {text or '(none)'}")
    if "messageRegex" in wanted and not re.search(wanted["messageRegex"], text):
        failures.append(
            f"rule {name}: message does not match /{wanted['messageRegex']}/\n  message: {text or '(none)'}"
        )
    if "patch" in wanted and wanted["patch"] != patch:
        failures.append(
            f"rule {name}: patch differs:\n" + diff(wanted["patch"], patch, "expected patch", "actual patch")
        )
    if "patchContains" in wanted:
        failures.extend(_missing_operations(f"rule {name}: its patch", wanted["patchContains"], patch))
    return failures


def is_subset(expected: Any, actual: Any) -> bool:
    """Maps: every expected key, recursively. Lists: same length, item by item. Else equal."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and is_subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(is_subset, expected, actual))
    return expected == actual


def add_leaves(operation: Any) -> list[Any]:
    """An `add` of a non-empty list as the appends of its items (`path/-`), of a non-empty map as the
    adds of its entries (recursively); every other operation as itself."""
    if not isinstance(operation, Mapping) or operation.get("op") != "add":
        return [operation]
    path, value = operation.get("path"), operation.get("value")
    if not isinstance(path, str) or path.endswith("/-"):
        return [operation]
    if isinstance(value, list) and value:
        return [{"op": "add", "path": f"{path}/-", "value": item} for item in value]
    if isinstance(value, Mapping) and value:
        return [
            leaf
            for key, item in value.items()
            for leaf in add_leaves({"op": "add", "path": f"{path}/{_escape(str(key))}", "value": item})
        ]
    return [operation]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def contains(expected: Any, actual: Any) -> bool:
    """`objectMatch: contains`: maps as is_subset (every expected key, recursively); a list contains
    the expected one when every expected item is contained in some actual item (in any order, with
    other items beside: what other rules of the pack added). Else equal."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and all(any(contains(e, a) for a in actual) for e in expected)
    return expected == actual


def project(actual: Any, shape: Any) -> Any:
    """The part of actual that the expected shape talks about, so a diff shows only what matters."""
    if isinstance(shape, Mapping) and isinstance(actual, Mapping):
        return {k: project(actual[k], v) for k, v in shape.items() if k in actual}
    if isinstance(shape, list) and isinstance(actual, list):
        return [project(a, s) for a, s in zip(actual, shape, strict=False)] + actual[len(shape) :]
    return actual


def diff(expected: Any, actual: Any, from_name: str, to_name: str) -> str:
    def lines(value: Any) -> list[str]:
        return styles.SUITE_DIFF.dump(value).splitlines()

    return "\n".join(difflib.unified_diff(lines(expected), lines(actual), from_name, to_name, lineterm=""))
