"""`gpu-webhook manifests --native`: every rule of the pack runs in exactly one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli import main
from webhook.engine import RuleSet
from webhook.kubeyaml import plain_documents


def render(ca_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["manifests", "--ca", str(ca_dir), "--image", "reg.example/gw@sha256:abc", *extra]) == 0
    return [d for d in plain_documents(capsys.readouterr().out) if d]


def split(documents: list[dict]) -> tuple[set[str], set[str]]:
    """(rules the webhook's ConfigMap serves, rules the apiserver runs as policies)."""
    (configmap,) = [d for d in documents if d["kind"] == "ConfigMap"]
    served = {
        d["metadata"]["name"] for text in configmap["data"].values() for d in plain_documents(text) if d
    }
    native = {
        d["metadata"]["labels"]["gpu-webhook.io/rule"]
        for d in documents
        if d["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
    }
    return served, native


@pytest.mark.parametrize("claims", ["refuse", "unresolved"])
def test_each_rule_runs_in_exactly_one_place(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], pack: RuleSet, claims: str
) -> None:
    names = {rule.name for rule in pack.rules}
    served, native = split(render(ca_dir, capsys, "--native", "--claims", claims))
    assert native and served  # both halves hold rules of the default pack
    assert served & native == set()
    assert served | native == names


def test_without_native_the_webhook_serves_every_rule(
    ca_dir: Path, capsys: pytest.CaptureFixture[str], pack: RuleSet
) -> None:
    assert split(render(ca_dir, capsys)) == ({rule.name for rule in pack.rules}, set())
