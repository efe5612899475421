"""Export the rule pack to the apiserver's own CEL admission: ValidatingAdmissionPolicy and MutatingAdmissionPolicy.

result = export(ruleset, target="all", release=Release.parse("1.36"))
result.objects      # policies and bindings, ready to apply: the validating rules merged (merge.py)
result.refused      # (rule, why) for every rule that stays with the webhook
                    # (a rule exceptions may lift among them: spec.exceptable true is never exported)
result.rules[i].note  # set when the export is narrower than the rule (CREATE only): the webhook keeps it too
exported_rule_names(ruleset)   # what `manifests --native` leaves out of the webhook's rules
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.engine import RuleSet

from .celenv import NativeEnvironment
from .merge import merge
from .nativecel import NotNative
from .policies import CLAIMS_MODES, CLAIMS_REFUSE, CLAIMS_UNRESOLVED, NativeRule, RuleExporter, policy_name
from .versions import DEFAULT_VERSION, Release

TARGETS = ("vap", "map", "all")


# Why a rule that translates is still not exported while exceptions may lift it. A native policy
# cannot honour GPUPolicyExceptions exactly (docs/native.md, "Exceptions"): with a paramKind of
# GPUPolicyException and a paramRef selector, the apiserver evaluates the policy once per exception
# found and ANDs the results (kubernetes pkg/apis/admissionregistration/types.go, ParamRef.selector),
# while an exception lifts a rule when any one covers the object; with none found the binding either
# passes every request (parameterNotFoundAction: Allow) or applies failurePolicy to every request
# (Deny); and the apiserver's CEL has no clock to compare an exception's expiry with. A gate written
# from the exceptions known at export time would be stale the moment a namespace adds one. So a rule
# runs natively only when no exception can lift it, in the webhook too: spec.exceptable false.
EXCEPTABLE = (
    "a GPUPolicyException may lift it (spec.exceptable: true) and an admission policy cannot honour "
    "exceptions: the webhook keeps the rule, or set exceptable: false (in the rule, or a GPUPolicyOverlay "
    "the webhook loads too) to export it"
)


@dataclass(slots=True)
class Refusal:
    rule: str
    reason: str
    exceptable: bool = False  # it would export, but exceptions may lift it (EXCEPTABLE)

    def __str__(self) -> str:
        return f"{self.rule}: not exported: {self.reason}"


@dataclass(slots=True)
class Export:
    release: Release
    claims: str = CLAIMS_REFUSE
    rules: list[NativeRule] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    policy_per_rule: bool = False
    exceptable: frozenset[str] = frozenset()  # the rules of the set that exceptions may lift
    _objects: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def objects(self) -> list[dict[str, Any]]:
        """native_objects(rules), made on first use: merging takes tens of milliseconds that a caller
        reading only which rules export (`manifests --native`, exported_rule_names) need not pay.
        Sets each rule's `policy`."""
        if self._objects is None:
            self._objects = native_objects(self.rules, self.policy_per_rule)
        return self._objects

    @property
    def exported(self) -> list[str]:
        return [rule.rule for rule in self.rules]

    @property
    def lifted(self) -> list[Refusal]:
        """The refusals of rules that would export but exceptions may lift (EXCEPTABLE)."""
        return [refusal for refusal in self.refused if refusal.exceptable]


def native_objects(rules: list[NativeRule], policy_per_rule: bool = False) -> list[dict[str, Any]]:
    """The objects that run `rules` in the apiserver: a MutatingAdmissionPolicy (+ binding) per mutating
    rule, and the validating rules merged into few ValidatingAdmissionPolicies (merge.py), or one
    per rule with policy_per_rule. Sets each rule's `policy`."""
    mutating = [o for rule in rules for o in rule.objects if o["kind"].startswith("Mutating")]
    if policy_per_rule:
        for rule in rules:
            rule.policy = policy_name(rule.rule) if rule.validating is not None else None
        return [*mutating, *(o for rule in rules for o in rule.objects if o["kind"].startswith("Validating"))]
    return [*mutating, *merge(rules)]


def export(
    ruleset: RuleSet,
    target: str = "all",
    release: Release | None = None,
    claims: str = CLAIMS_REFUSE,
    policy_per_rule: bool = False,
) -> Export:
    """Every rule of the set, exported or refused with a reason: none is dropped silently.

    A rule that exceptions may lift (spec.exceptable, the default) is refused even when it translates
    (EXCEPTABLE), so an exported policy and the webhook never disagree about an excepted object.

    claims: what to do with rules that count accelerators (policies.py CLAIMS_MODES): refuse them
    (the default), or export them as the engine decides without claim context ("unresolved").
    policy_per_rule: a ValidatingAdmissionPolicy per validating rule instead of merged ones.
    """
    if target not in TARGETS:
        raise ValueError(f"--target {target!r}: expected one of {', '.join(TARGETS)}")
    release = release or Release.parse(DEFAULT_VERSION)
    if release.vap_version() is None:
        raise ValueError(f"Kubernetes {release}: ValidatingAdmissionPolicy is GA from 1.30; export needs 1.30 or later")
    exporter = RuleExporter(ruleset.accelerators, release, NativeEnvironment(), claims)
    exceptable = frozenset(rule.name for rule in ruleset.rules if rule.exceptable)
    result = Export(release, claims=claims, policy_per_rule=policy_per_rule, exceptable=exceptable)
    for rule in ruleset.rules:
        try:
            native = exporter.export(rule, want_vap=target != "map", want_map=target != "vap")
        except NotNative as reason:
            result.refused.append(Refusal(rule.name, str(reason)))
            continue
        if rule.exceptable:
            result.refused.append(Refusal(rule.name, EXCEPTABLE, exceptable=True))
            continue
        result.rules.append(native)
    return result


def exported_rule_names(
    ruleset: RuleSet, target: str = "all", release: Release | None = None, claims: str = CLAIMS_REFUSE
) -> list[str]:
    """Rules that run natively in full: `manifests --native` leaves these out of the webhook's ConfigMap.

    A rule exported narrower than it is (NativeRule.note: CREATE only) stays in the webhook too.
    """
    return [rule.rule for rule in export(ruleset, target, release, claims).rules if rule.note is None]


__all__ = [
    "CLAIMS_MODES",
    "CLAIMS_REFUSE",
    "CLAIMS_UNRESOLVED",
    "EXCEPTABLE",
    "TARGETS",
    "Export",
    "NativeRule",
    "Refusal",
    "Release",
    "export",
    "exported_rule_names",
    "native_objects",
]
