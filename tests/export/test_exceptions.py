"""Exported policies and GPUPolicyExceptions never disagree: a rule an exception may lift is not exported.

A native policy cannot honour exceptions exactly (webhook.export.EXCEPTABLE, docs/native.md
"Exceptions": a paramRef selector ANDs one evaluation per exception, and the apiserver's CEL has no
clock for their expiry), so `export` keeps every exceptable rule with the webhook, and a site opts a
rule into native enforcement by making it not exceptable, which the webhook then enforces too. The
real apiserver's part: tests/e2e/test_exceptions_native.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.export.native_site import overlay_text
from webhook.engine import compile_documents, load_rules
from webhook.export import EXCEPTABLE, export
from webhook.export.mixed import webhook_files
from webhook.kubeyaml import load_documents

RULE = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: no-host-network}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "!has(object.spec.hostNetwork) || !object.spec.hostNetwork", message: no host network}
"""
EXCEPTION = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {name: ingress, namespace: edge}
spec: {rules: [no-host-network], reason: the ingress controller}
"""


def site(tmp_path: Path, **files: str) -> Path:
    directory = tmp_path / "site"
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(text)
    return directory


def test_no_exported_rule_of_the_pack_is_exceptable(pack) -> None:
    exceptable = {rule.name for rule in pack.rules if rule.exceptable}
    for claims in ("refuse", "unresolved"):
        result = export(pack, claims=claims)
        assert result.exported and not set(result.exported) & exceptable
        lifted = {refusal.rule for refusal in result.lifted}
        assert lifted and lifted <= exceptable
        assert all(refusal.reason == EXCEPTABLE for refusal in result.lifted)
        # every rule is accounted for once: exported, or refused with one reason
        assert sorted([*result.exported, *(r.rule for r in result.refused)]) == sorted(r.name for r in pack.rules)


def test_an_exceptable_rule_stays_and_the_overlay_that_makes_it_not_exceptable_exports_it(tmp_path: Path) -> None:
    alone = export(load_rules(str(site(tmp_path / "a", rule=RULE))).require())
    assert alone.exported == [] and [(r.rule, r.reason) for r in alone.refused] == [("no-host-network", EXCEPTABLE)]
    # with an exception in the input too: the same (the rule is exceptable; the exception proves it)
    excepted = export(load_rules(str(site(tmp_path / "b", rule=RULE, exception=EXCEPTION))).require())
    assert excepted.exported == [] and excepted.lifted[0].rule == "no-host-network"
    # the site's overlay: the rule exports, and the same input can no longer hold an exception for it
    opted = site(tmp_path / "c", rule=RULE, overlay=overlay_text(["no-host-network"]))
    assert export(load_rules(str(opted)).require()).exported == ["no-host-network"]
    (opted / "exception.yaml").write_text(EXCEPTION)
    refused = load_rules(str(opted))
    assert not refused.ok
    assert "rule 'no-host-network' cannot be excepted (spec.exceptable: false)" in str(refused.errors[0])


def test_mixed_mode_drops_the_overlay_entries_of_exported_rules(tmp_path: Path) -> None:
    """The webhook's ConfigMap keeps the site's overlay without its entries for the rules that left:
    an overlay naming a rule the webhook does not have would not load."""
    keep = RULE.replace("no-host-network", "kept-rule")
    overlay = overlay_text(["no-host-network"]).replace(
        "  - name: no-host-network\n", "  - name: kept-rule\n    action: Warn\n  - name: no-host-network\n"
    )
    data = {
        "rules.yaml": RULE + "---\n" + keep,
        "overlay.yaml": overlay,
        "only.yaml": overlay_text(["no-host-network"]),
    }
    kept = webhook_files(data, ["no-host-network"])
    assert set(kept) == {"rules.yaml", "overlay.yaml"}  # an overlay left with no entry goes
    documents = [d for key, text in kept.items() for d in load_documents(text, key)]
    ruleset = compile_documents(documents).require()
    assert [(rule.name, str(rule.action)) for rule in ruleset.rules] == [("kept-rule", "Warn")]
    # an exception for the exported rule: the webhook does not have the rule, so it refuses it
    with_exception = compile_documents([*documents, *load_documents(EXCEPTION, "exception.yaml")])
    assert not with_exception.ok and "no rule named 'no-host-network'" in str(with_exception.errors[0])
