"""`gpu-webhook manifests --native`: every rule of the pack runs in exactly one place."""

from __future__ import annotations

from pathlib import Path

import pytest

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
