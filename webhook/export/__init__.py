"""Export the rule pack to the apiserver's own CEL admission: ValidatingAdmissionPolicy and MutatingAdmissionPolicy.

result = export(ruleset, target="all", release=Release.parse("1.36"))
result.objects      # policies and bindings, ready to apply: the validating rules merged (merge.py)
result.refused      # (rule, why) for every rule that stays with the webhook
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


@dataclass(slots=True)
class Refusal:
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: not exported: {self.reason}"


@dataclass(slots=True)
class Export:
    release: Release
    claims: str = CLAIMS_REFUSE
    rules: list[NativeRule] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    policy_per_rule: bool = False
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
    result = Export(release, claims=claims, policy_per_rule=policy_per_rule)
    # a native policy cannot read GPUPolicyExceptions (nor compare their expiry with the time): a rule
    # the given exceptions name stays with the webhook, so the cluster answers as `audit` does
    excepted = {rule: exception.key for exception in ruleset.exceptions for rule in sorted(exception.rules)}
    for rule in ruleset.rules:
        if rule.name in excepted:
            result.refused.append(
                Refusal(
                    rule.name,
                    f"GPUPolicyException {excepted[rule.name]} lets objects through it, and an admission policy "
                    "cannot read exceptions: the webhook keeps the rule",
                )
            )
            continue
        try:
            result.rules.append(exporter.export(rule, want_vap=target != "map", want_map=target != "vap"))
        except NotNative as reason:
            result.refused.append(Refusal(rule.name, str(reason)))
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
    "TARGETS",
    "Export",
    "NativeRule",
    "Refusal",
    "Release",
    "export",
    "exported_rule_names",
    "native_objects",
]
