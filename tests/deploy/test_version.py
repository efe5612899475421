"""A real version: git's, through setuptools-scm; the rule pack's digest beside it in `--version`,
`gpu_webhook_build_info` and the start-up log (tests/deploy/test_runtime_layout.py runs the installed
wheel, its start-up line and an upgrade under a running server)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, RULES
from webhook.cli import main
from webhook.install.manifests import rules_configmap
from webhook.server.build import BuildGuard
from webhook.server.metrics import Metrics
from webhook.server.reload import RuleStore
from webhook.version import pack_digest

GIT = (REPO / ".git").exists()


def test_version_names_the_program_and_the_pack(capsys, monkeypatch) -> None:
    monkeypatch.delenv("GPU_WEBHOOK_RULES", raising=False)
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    program, pack = capsys.readouterr().out.splitlines()
    assert program == f"gpu-webhook {metadata.version('gpu-webhook')}"
    assert program != "gpu-webhook 0.1.0"  # the constant it used to be, whatever the commit
    assert pack == f"rule pack sha256:{pack_digest([RULES])} ({RULES})"


@pytest.mark.skipif(not GIT, reason="not a git checkout")
def test_the_version_is_gits() -> None:
    """setuptools-scm with this pyproject: the commit is in the version (X.Y.devN+gHASH, or a tag's X.Y.Z)."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, check=True
    )
    tag = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--tags", "--exact-match"], capture_output=True, check=False
    )
    done = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    version = done.stdout.strip()
    assert tag.returncode == 0 or f"+g{head.stdout.strip()}" in version, version


def test_a_tree_without_git_builds_as_an_unknown_version(tmp_path: Path) -> None:
    """An exported tree (no .git, no PKG-INFO, no SETUPTOOLS_SCM_PRETEND_VERSION) says so and is 0+unknown."""
    for name in ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    (tmp_path / "webhook").mkdir()
    (tmp_path / "webhook" / "__init__.py").write_text("")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=tmp_path, capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0+unknown"
    assert "no git metadata" in done.stderr


def test_the_pack_digest_is_the_same_in_the_configmap(tmp_path: Path) -> None:
    """The cluster's mount is flat and leaves test suites out; its digest is the checkout's."""
    configmap = rules_configmap(str(RULES))
    for key, text in configmap["data"].items():
        (tmp_path / key).write_text(text)
    assert pack_digest([tmp_path]) == pack_digest([RULES])
    first = sorted(configmap["data"])[0]
    (tmp_path / first).write_text(configmap["data"][first] + "\n# changed\n")
    assert pack_digest([tmp_path]) != pack_digest([RULES])


def test_build_info_follows_the_pack_in_use(tmp_path: Path) -> None:
    """A server that runs 9.9.9 while another version is installed says so, and still reloads rules
    that are not the installed package's (an admin's directory, a ConfigMap mount)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text((RULES / "gpu-toleration.yaml").read_text())
    metrics = Metrics()
    store = RuleStore(paths=[str(rules)], metrics=metrics, build=BuildGuard(metrics.registry, version="9.9.9"))
    assert store.load()
    first = pack_digest([rules])
    assert f'gpu_webhook_build_info{{pack="{first}",version="9.9.9"}} 1.0' in metrics.render().decode()
    document = yaml.safe_load((rules / "r.yaml").read_text())
    document["metadata"]["annotations"] = {"gpu-webhook.io/description": "changed"}
    (rules / "r.yaml").write_text(yaml.safe_dump(document))
    assert store.load()
    page = metrics.render().decode()
    assert f'pack="{first}"' not in page  # one series: the pack in use
    assert f'gpu_webhook_build_info{{pack="{pack_digest([rules])}",version="9.9.9"}} 1.0' in page
    assert "gpu_webhook_package_changed 1.0" in page
    assert store.generation == 2


def test_an_unreadable_installation_is_an_unknown_version_not_an_error(monkeypatch) -> None:
    """Read in the reload thread before every reload: a dist-info caught mid-upgrade must not stop reloads."""
    from webhook import version as module

    def unreadable(name: str) -> str:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(metadata, "version", unreadable)
    assert module.installed_version() == module.UNKNOWN
    monkeypatch.setattr(metadata, "version", lambda name: None)  # METADATA without a Version
    assert module.installed_version() == module.UNKNOWN
