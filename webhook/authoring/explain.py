"""`gpu-webhook explain`: why each rule did or did not act on one object, from the engine's trace.

For every rule of the pack: whether it matched each target (and if not, which match
clause failed, or that its kinds or operations leave the object out), its validation
result, its patch operations; then the decision and the mutated object as a unified
diff. The object is evaluated with `Phase.ALL`, as the test runner and audit do.

The lines are rich `Text`s; `console()` decides whether their styles become colour (rich: on a
terminal only; never under NO_COLOR; --color / --no-color decide for it).
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterator
from typing import Literal, TextIO

from rich.console import Console
from rich.text import Text

from webhook.engine import (
    NO_NAMESPACE_CONTEXT,
    AdmissionInput,
    Decision,
    Phase,
    Result,
    Rule,
    RuleOutcome,
    RuleSet,
    evaluate,
    indexed_kinds,
)
from webhook.kubeyaml import plain_yaml

_RESULT_STYLE = {
    "fail": ("red", "FAIL"),
    "error": ("red", "ERROR"),
    "pass": ("green", "pass"),
    "mutated": ("cyan", "mutated"),
    "skip": ("dim", "skip"),
    "excepted": ("magenta", "EXCEPTED"),
}
# a failing target is labelled by what its rule's outcome is (Warn and Audit rules "fail" too)
_OUTCOME_STYLE = {
    Result.FAIL: ("red", "DENY"),
    Result.ERROR: ("red", "ERROR"),
    Result.WARN: ("yellow", "WARN"),
    Result.AUDIT: ("blue", "AUDIT"),
}


Part = str | tuple[str, str]  # plain text, or (text, rich style: "red bold")


def style(text: str, *names: str) -> tuple[str, str]:
    return text, " ".join(names)


def line(*parts: Part) -> Text:
    return Text.assemble(*parts)


def console(file: TextIO, color: bool | None = None) -> Console:
    """Where the lines go. color None: rich decides (styles on a terminal, plain text in a pipe or a
    file), and a non-empty NO_COLOR (no-color.org) means plain text; True/False: --color/--no-color."""
    if color is None and os.environ.get("NO_COLOR"):
        color = False
    system: Literal["auto", "standard"] | None = "auto" if color is None else "standard" if color else None
    # force_terminal None: rich looks at the file; the text as written: no markup, emoji codes or
    # highlighting of numbers, no wrapping at the terminal's width
    return Console(
        file=file,
        force_terminal=color,
        color_system=system,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )


def explain(ruleset: RuleSet, admission: AdmissionInput) -> tuple[Decision, list[Text]]:
    """The decision and its explanation, line by line."""
    decision = evaluate(ruleset, admission, phase=Phase.ALL)
    return decision, list(_lines(ruleset, admission, decision))


def _lines(ruleset: RuleSet, admission: AdmissionInput, decision: Decision) -> Iterator[Text]:
    subject = admission.subject or {}
    kind = admission.kind or str(subject.get("kind", ""))
    metadata = given if isinstance(given := subject.get("metadata"), dict) else {}
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    where = f"{admission.namespace}/" if admission.namespace else ""
    yield line(style(f"{kind} {where}{name} ({admission.operation}), {len(ruleset.rules)} rules", "bold"))
    yield line()
    yield line(style("Rules", "bold"))
    outcomes = {o.rule: o for o in decision.outcomes()}
    # rules not evaluated for want of the Namespace: one line for all of them, as audit folds them
    unevaluated = sorted(name for name, outcome in outcomes.items() if outcome.context_missing)
    for rule in ruleset.rules:
        if rule.name not in unevaluated:
            yield from _rule_lines(rule, kind, admission, decision, outcomes.get(rule.name))
    if unevaluated:
        rules = f"{len(unevaluated)} rule{'s' if len(unevaluated) != 1 else ''}"
        yield line("  ", style(f"{rules} {NO_NAMESPACE_CONTEXT}", "dim"), f": {', '.join(unevaluated)}")
    yield line()
    yield from _decision_lines(decision, list(outcomes.values()))
    if decision.patch:
        yield line()
        count = len(decision.patch)
        yield line(style(f"Patch ({count} operation{'s' if count != 1 else ''})", "bold"))
        for entry in decision.trace:
            for operation in entry.patch:
                yield line(f"  [{entry.rule}] {_operation(operation)}")
        yield line()
        yield line(style("Mutated object", "bold"))
        yield from _diff(subject, decision.mutated or subject, name)


def _rule_lines(
    rule: Rule, kind: str, admission: AdmissionInput, decision: Decision, outcome: RuleOutcome | None
) -> Iterator[Text]:
    entries = [t for t in decision.trace if t.rule == rule.name]
    what = "mutate" if not rule.validate else f"validate, {rule.action.value}"
    if rule.validate and rule.mutations:
        what = f"mutate, {what}"
    source = f"{os.path.relpath(rule.source.file)}:{rule.source.line}"
    yield line("  ", style(rule.name, "bold"), f" ({what})  ", style(source, "dim"))
    if rule.overlaid_by:
        yield line("    ", style("overlaid by", "dim"), f" {rule.overlaid_by}")
    if not entries:
        yield line("    ", style("not matched", "dim"), f": {_unindexed_reason(rule, kind, admission)}")
        return
    for entry in entries:
        if not entry.matched:
            yield line(f"    {entry.target}: ", style("not matched", "dim"), f": {entry.reason}")
            continue
        color, label = _RESULT_STYLE.get(entry.result, ("dim", entry.result))
        if entry.result == "fail" and outcome is not None and outcome.result in _OUTCOME_STYLE:
            color, label = _OUTCOME_STYLE[outcome.result]
        yield line(f"    {entry.target}: matched, ", style(label, color, "bold"), f": {entry.message}" if entry.message else "")
        for operation in entry.patch:
            yield line("      ", style(_operation(operation), "cyan"))


def _unindexed_reason(rule: Rule, kind: str, admission: AdmissionInput) -> str:
    if admission.sub_resource:
        return f"rules never match subresources ({admission.sub_resource})"
    if admission.operation not in rule.match.operations:
        return (
            f"operation {admission.operation} is not in match.operations ({', '.join(sorted(rule.match.operations))})"
        )
    if "*" not in rule.match.kinds and kind not in indexed_kinds(rule):
        autogen = " (autogen: false)" if "Pod" in rule.match.kinds and not rule.autogen else ""
        return f"kind {kind} is not in match.kinds ({', '.join(sorted(rule.match.kinds))}){autogen}"
    if "Pod" in rule.match.kinds and kind not in rule.match.kinds:
        return f"{kind} has no pod template this engine knows (check its apiVersion)"
    return "no target"


_DECISION_LABEL = {
    Result.FAIL: ("deny", "red"),
    Result.ERROR: ("error", "red"),
    Result.WARN: ("warning", "yellow"),
    Result.AUDIT: ("audit", "blue"),
}


def _decision_lines(decision: Decision, outcomes: list[RuleOutcome]) -> Iterator[Text]:
    """The decision, then each rule's outcome that is not a pass: the engine's summary, as audit shows it."""
    if decision.allowed:
        yield line(style("Decision: allowed", "green", "bold"))
    else:
        count = len(decision.violations)
        yield line(style(f"Decision: DENIED ({count} violation{'s' if count != 1 else ''})", "red", "bold"))
    for result in _DECISION_LABEL:
        label, color = _DECISION_LABEL[result]
        for outcome in (o for o in outcomes if o.result == result):
            suffix = " (failurePolicy: Fail, denies)" if result == Result.ERROR and outcome.blocks else ""
            if result == Result.AUDIT and outcome.relaxed:
                label = "would deny"
            for message in outcome.messages:
                yield line("  ", style(label, color), f" [{outcome.rule}] {message}{suffix}")
    for outcome in outcomes:
        if outcome.result == Result.EXCEPTED:
            yield line("  ", style("excepted", "magenta"), f" [{outcome.rule}] {outcome.reason}")
    skipped = [o.rule for o in outcomes if o.context_missing]
    if skipped:
        rules = f"{len(skipped)} rule{'s' if len(skipped) != 1 else ''}"
        yield line("  ", style("skipped", "dim"), f" {rules}: {NO_NAMESPACE_CONTEXT}")


def _operation(operation: dict[str, object]) -> str:
    text = f"{operation['op']} {operation['path']}"
    if "value" in operation:
        text += " " + json.dumps(operation["value"], separators=(", ", ": "))
    return text


def _diff(before: object, after: object, name: str) -> Iterator[Text]:
    def lines(value: object) -> list[str]:
        return plain_yaml(value, width=120).splitlines()

    for text in difflib.unified_diff(
        lines(before), lines(after), f"{name} (original)", f"{name} (mutated)", lineterm=""
    ):
        if text.startswith(("+++", "---")):
            yield line(style(text, "bold"))
        elif text.startswith("@@"):
            yield line(style(text, "cyan"))
        elif text.startswith("+"):
            yield line(style(text, "green"))
        elif text.startswith("-"):
            yield line(style(text, "red"))
        else:
            yield line(text)
