"""`gpu-webhook manifests --native`: every rule of the pack runs in exactly one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RULES
from webhook.cli import main
from webhook.engine import RuleSet
from webhook.export.merge import rules_of
from webhook.kubeyaml import plain_documents


def render(ca_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["manifests", "--ca", str(ca_dir), "--image", "reg.example/gw@sha256:abc", *extra]) == 0
    return [d for d in plain_documents(capsys.readouterr().out) if d]


def split(documents: list[dict]) -> tuple[set[str], set[str]]:
    """(rules the webhook's ConfigMap serves, rules the apiserver runs as policies)."""
    (configmap,) = [d for d in documents if d["kind"] == "ConfigMap"]
    served = {d["metadata"]["name"] for text in configmap["data"].values() for d in plain_documents(text) if d}
    native = {
        rule
        for d in documents
        if d["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
        for rule in rules_of(d)
    }
    return served, native


@pytest.mark.parametrize("layout", [(), ("--policy-per-rule",)])
@pytest.mark.parametrize("claims", ["refuse", "unresolved"])
def test_each_rule_runs_in_exactly_one_place(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], pack: RuleSet, claims: str, layout: tuple[str, ...]
) -> None:
    names = {rule.name for rule in pack.rules}
    documents = render(ca_dir, capsys, "--native", "--claims", claims, *layout)
    served, native = split(documents)
    validating = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    if layout:  # one policy a rule
        assert all(len(rules_of(d)) == 1 for d in validating)
    else:  # merged: fewer policies than validating rules
        assert len(validating) < sum(len(rules_of(d)) for d in validating)
    assert native and served  # both halves hold rules of the default pack
    assert served & native == set()
    assert served | native == names


def test_without_native_the_webhook_serves_every_rule(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], pack: RuleSet
) -> None:
    assert split(render(ca_dir, capsys)) == ({rule.name for rule in pack.rules}, set())


@pytest.mark.parametrize("layout", [(), ("--policy-per-rule",)])
def test_the_audit_overlay_binds_native_policies_to_audit_not_deny(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], layout: tuple[str, ...]
) -> None:
    # its webhook runs --mode=audit and refuses nothing; the policies must not refuse either
    # (tests/e2e/test_export_native.py proves it on a real apiserver, with its audit log)
    def bindings(overlay: str) -> dict[str, list[str]]:
        documents = render(ca_dir, capsys, "--native", "--overlay", overlay, *layout)
        return {
            rule: d["spec"]["validationActions"]
            for d in documents
            if d["kind"] == "ValidatingAdmissionPolicyBinding"
            for rule in rules_of(d)
        }

    enforce, audit = bindings("enforce"), bindings("audit")
    assert set(enforce) == set(audit) and "Deny" in {a for actions in enforce.values() for a in actions}
    assert all(actions == ["Audit" if a == "Deny" else a for a in enforce[rule]] for rule, actions in audit.items())


def test_exceptable_rules_stay_with_the_webhook_unless_the_site_s_overlay_says_otherwise(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A rule exceptions may lift is not exported, and stderr says which (webhook.export.EXCEPTABLE);
    the site's overlay with exceptable: false moves one to the apiserver, and the ConfigMap the webhook
    loads keeps the overlay without that entry (it would not load naming a rule the webhook lacks)."""
    from webhook.install.registration import configmap_ruleset

    assert main(["manifests", "--ca", str(ca_dir), "--image", "reg.example/gw@sha256:abc", "--native"]) == 0
    captured = capsys.readouterr()
    assert "--native: warning: 4 rules would export but stay with the webhook" in captured.err
    assert "no-node-name-in-tenants" in captured.err
    served, native = split([d for d in plain_documents(captured.out) if d])
    assert "no-node-name-in-tenants" in served and "no-node-name-in-tenants" not in native

    site = tmp_path / "site"
    site.mkdir()
    (site / "native.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicyOverlay\nmetadata: {name: site}\nspec:\n  rules:\n"
        "    - {name: no-node-name-in-tenants, exceptable: false}\n    - {name: gpu-node-affinity, enabled: true}\n"
    )
    documents = render(ca_dir, capsys, "--native", "--rules", str(RULES), "--rules", str(site))
    served, native = split(documents)
    assert "no-node-name-in-tenants" in native and "no-node-name-in-tenants" not in served
    (configmap,) = [d for d in documents if d["kind"] == "ConfigMap"]
    webhook_rules = {rule.name for rule in configmap_ruleset(configmap).rules}
    assert "no-node-name-in-tenants" not in webhook_rules and "gpu-node-affinity" in webhook_rules
    assert "exceptable: false" not in configmap["data"]["native.yaml"]  # the entry left with its rule


NATIVE_POD_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: pods-named}
spec:
  exceptable: false
  action: Deny
  ratcheting: false
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "object.metadata.name != 'forbidden'", message: refused}
"""
WEBHOOK_DEPLOYMENT_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: deployments-read-priority-classes}
spec:
  exceptable: false
  action: Deny
  match: {kinds: [Deployment], operations: [CREATE]}
  validate: {expression: "size(priorityClasses) >= 0", message: refused}
"""


def _validated_resources(documents: list[dict]) -> set[str]:
    (config,) = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    return {
        resource
        for webhook in config["webhooks"]
        if webhook["name"].startswith("validate.")
        for rule in webhook.get("rules") or []
        for resource in rule["resources"]
    }


def test_a_request_only_exported_rules_act_on_is_not_sent_to_the_webhook(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Mixed mode saves the webhook call where it can: the registration follows the rules left to the
    webhook (install/manifests.py derives it from the ConfigMap after --native), so pods, whose one
    rule runs in the apiserver, are no longer sent to /validate; deployments still are."""
    (tmp_path / "pods.yaml").write_text(NATIVE_POD_RULE)
    (tmp_path / "deployments.yaml").write_text(WEBHOOK_DEPLOYMENT_RULE)
    alone = _validated_resources(render(ca_dir, capsys, "--rules", str(tmp_path)))
    mixed_documents = render(ca_dir, capsys, "--rules", str(tmp_path), "--native")
    assert split(mixed_documents) == ({"deployments-read-priority-classes"}, {"pods-named"})
    mixed = _validated_resources(mixed_documents)
    assert "pods" in alone and "deployments" in alone
    assert "pods" not in mixed and "deployments" in mixed
