"""Fixtures for audit tests: the CLI runner, rule directories and the stand-in API server."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.apistub import ApiStub
from webhook.cli import main
from webhook.kubeyaml import plain_documents

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
# Report formats and cluster listing are mechanics: their exact counts are pinned to a small
# rule set that does not grow with the default pack (tests/fixtures/README.md).
RULES = str(ROOT / "tests" / "fixtures" / "rules-basic")
PACK_RULES = str(ROOT / "rules")
EXTRA_RULES = str(FIXTURES / "rules")
NS_RULES = str(FIXTURES / "nsrules")
WORKLOADS = str(FIXTURES / "workloads.yaml")


@pytest.fixture
def run(capsys, monkeypatch) -> Callable[..., tuple[int, str, str]]:
    """Run `gpu-webhook audit ARGS`, optionally with stdin; returns (exit code, stdout, stderr)."""

    def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(["audit", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def _pod(name: str, namespace: str, gpus: int = 0, owner: str | None = None, **spec) -> dict:
    container: dict = {"name": "main", "image": "cuda:12"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    metadata: dict = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": owner, "name": "x", "uid": "u", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container], **spec}}


@pytest.fixture
def stub(tmp_path) -> Iterator[ApiStub]:
    """A cluster with three namespaces, five pods (one owned by a Job), a Job and a PyTorchJob."""
    api = ApiStub()
    api.add_namespace("team-a", {"gpu-access": "full"})
    api.add_namespace("team-b", {"gpu-access": "none"})
    api.add_namespace("kube-system")
    for index in range(3):
        api.add(_pod(f"gpu-{index}", "team-a", gpus=2))
    api.add(_pod("sneaky", "team-b", gpus=1))
    api.add(_pod("job-pod", "team-a", gpus=1, owner="Job"))
    api.add(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"template": {"spec": _pod("t", "team-a", gpus=1)["spec"]}},
        }
    )
    api.add(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "llama", "namespace": "team-b"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": _pod("w", "team-b", gpus=4)["spec"]}}}},
        }
    )
    for collection in ("apps/v1/deployments", "apps/v1/statefulsets", "apps/v1/daemonsets", "apps/v1/replicasets"):
        api.serve(collection.rsplit("/", 1)[0], collection.rsplit("/", 1)[1])
    api.serve("batch/v1", "cronjobs")
    with api.running():
        api.kubeconfig(tmp_path / "kubeconfig")
        yield api


@pytest.fixture
def kubeconfig(stub, tmp_path) -> str:
    return str(tmp_path / "kubeconfig")


def documents(text: str) -> list[dict]:
    return [d for d in plain_documents(text) if d]


@pytest.fixture
def cli_main(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run any `gpu-webhook ARGS` in-process; returns (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke
