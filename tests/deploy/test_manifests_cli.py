"""`gpu-webhook manifests`: every --rules path in the rules ConfigMap, and stdout nothing but the manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import one
from tests.support import RULES
from webhook.cli import main
from webhook.engine import RuleSet, rule_files
from webhook.engine.yamlsource import plain_documents

IMAGE = "reg.example/gpu-webhook@sha256:0123"
SITE_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: site-team-label}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: every pod names its team
"""


def manifests(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["manifests", *argv])
    captured = capsys.readouterr()
    return code, [d for d in plain_documents(captured.out) if d], captured.err


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
