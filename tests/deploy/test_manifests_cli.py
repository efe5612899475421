"""`gpu-webhook manifests` fails safe: no fail-closed webhook in front of the placeholder image, every
--rules path in the rules ConfigMap, and stdout nothing but the manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import MANIFESTS, by_kind, one
from tests.support import RULES, SITE_RULE
from webhook.cli import main
from webhook.engine import RuleSet, rule_files
from webhook.install.kustomize import build
from webhook.kubeyaml import plain_documents

IMAGE = "reg.example/gpu-webhook@sha256:0123"
WEBHOOKS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@pytest.fixture(scope="module")
def placeholder() -> str:
    """The base's image, as the Deployment carries it until --image replaces it."""
    return str(one(build(MANIFESTS / "base"), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"])


def manifests(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["manifests", *argv])
    captured = capsys.readouterr()
    return code, [d for d in plain_documents(captured.out) if d], captured.err


def failure_policies(documents: list[dict[str, Any]]) -> set[str]:
    return {w["failurePolicy"] for kind in WEBHOOKS for obj in by_kind(documents, kind) for w in obj["webhooks"]}


@pytest.mark.parametrize("source", [["--ca", "CA"], ["--component", "cert-manager"]], ids=["ca", "cert-manager"])
def test_fail_closed_with_the_placeholder_image_is_refused(
    capsys: pytest.CaptureFixture[str], ca_dir: Path, placeholder: str, source: list[str]
) -> None:
    argv = [str(ca_dir) if arg == "CA" else arg for arg in source]
    code, documents, err = manifests(capsys, *argv)
    assert code == 2 and documents == []  # nothing to apply
    message = err.splitlines()[-1]
    assert "failurePolicy: Fail" in message and f"placeholder image {placeholder}" in message
    assert "refuse every pod create" in message  # why
    assert "--image REGISTRY/gpu-webhook@sha256:..." in message and "--overlay audit" in message  # what to do


def test_enforce_renders_with_an_image(capsys: pytest.CaptureFixture[str], ca_dir: Path, placeholder: str) -> None:
    code, documents, err = manifests(capsys, "--ca", str(ca_dir), "--image", IMAGE)
    assert code == 0
    assert failure_policies(documents) == {"Fail"}
    assert one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert placeholder not in err


def test_audit_overlay_renders_with_the_placeholder_and_says_so(
    capsys: pytest.CaptureFixture[str], ca_dir: Path, placeholder: str
) -> None:
    code, documents, err = manifests(capsys, "--ca", str(ca_dir), "--overlay", "audit")
    assert code == 0
    assert failure_policies(documents) == {"Ignore"}
    (note,) = [line for line in err.splitlines() if placeholder in line]
    assert note.startswith("gpu-webhook: note: ") and "placeholder" in note and "--image" in note


def test_two_rules_paths_fill_one_configmap(
    capsys: pytest.CaptureFixture[str], ca_dir: Path, pack: RuleSet, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "site-team-label.yaml").write_text(SITE_RULE)
    code, documents, err = manifests(
        capsys, "--ca", str(ca_dir), "--image", IMAGE, "--rules", str(RULES), "--rules", str(site)
    )
    assert code == 0
    data = one(documents, "ConfigMap")["data"]
    pack_files = {Path(f).name for f in rule_files([str(RULES)]) if "/tests/" not in f}
    assert set(data) == pack_files | {"site-team-label.yaml"}
    assert data["site-team-label.yaml"] == SITE_RULE
    (line,) = [line for line in err.splitlines() if " rules from " in line]
    assert line.startswith(f"gpu-webhook: {len(pack.rules) + 1} rules from ") and line.endswith("site/")


def test_two_files_for_one_configmap_key_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], ca_dir: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "gpu-toleration.yaml").write_text(SITE_RULE)  # the name of a file of the pack
    code, documents, err = manifests(
        capsys, "--ca", str(ca_dir), "--image", IMAGE, "--rules", str(RULES), "--rules", str(site)
    )
    assert code == 2 and documents == []
    assert f"{RULES / 'gpu-toleration.yaml'} and {site / 'gpu-toleration.yaml'}" in err
    assert "the file gpu-toleration.yaml of the rules ConfigMap" in err and "rename one of them" in err
