"""Rendered manifests, shared by the deploy tests: each overlay rendered once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from webhook.certs import generate_bundle, service_dns_names, write_bundle
from webhook.commands.manifests import render
from webhook.kubeyaml import plain_documents

MANIFESTS = REPO / "manifests"
OVERLAYS = ("audit", "enforce")


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("deploy-certs")
    write_bundle(generate_bundle(service_dns_names("gpu-webhook", "gpu-webhook")), directory)
    return directory


@pytest.fixture(scope="session")
def rendered(ca_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """What `gpu-webhook manifests --ca DIR --overlay X` prints, parsed back, per overlay."""
    out = {}
    for overlay in OVERLAYS:
        text = yaml.dump_all(render(MANIFESTS, overlay=overlay, ca_dir=ca_dir), Dumper=yaml.CSafeDumper, sort_keys=False)
        out[overlay] = plain_documents(text)
    out["cert-manager"] = render(
        MANIFESTS, overlay="enforce", components=["cert-manager", "policyreports", "audit-cronjob"]
    )
    return out


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


@pytest.fixture(scope="session")
def entrypoint() -> list[str]:
    """The image's ENTRYPOINT after `python3 -m webhook.cli`, as argv for the CLI parser."""
    from tests.deploy.test_dockerfile import dockerfile_entrypoint

    argv = dockerfile_entrypoint()
    assert argv[:3] == ["python3", "-m", "webhook.cli"]
    return argv[3:]
