"""`pip install` of the built wheel, not editable, outside a checkout: the tool works from an empty directory.

The wheel is built from this checkout and installed into a fresh virtualenv (its dependencies
are borrowed from the test environment through a .pth file, so no index is needed); every
command then runs from an empty temporary directory, where no rules/ or manifests/ exist.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, free_port
from tests.support.wheel import build_wheel

pytestmark = pytest.mark.slow  # ~10 s: a wheel build and a virtualenv


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh virtualenv holding only the built wheel."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    wheel = build_wheel(dist)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # dependencies only: the test environment's site-packages, appended after the venv's own
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    return venv / "bin"


def run(bin_dir: Path, cwd: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_WEBHOOK_RULES", "PYTHONPATH")}
    return subprocess.run(
        [str(bin_dir / "gpu-webhook"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_installed_tool_works_from_an_empty_directory(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    version = run(installed, empty, "--version")
    assert version.returncode == 0 and version.stdout.startswith("gpu-webhook 0.")

    # it is the wheel that runs, not this checkout
    where = subprocess.run(
        [str(installed / "python"), "-c", "import webhook; print(webhook.__file__)"],
        cwd=empty,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(REPO) not in where and "site-packages" in where

    lint = run(installed, empty, "lint")  # the packaged rule pack
    assert lint.returncode == 0, lint.stdout + lint.stderr

    (empty / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a}\n"
        "spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}\n"
    )
    audit = run(installed, empty, "audit", "pod.yaml", "-o", "json")
    assert audit.returncode in (0, 1) and '"objects":' in audit.stdout, audit.stderr
    assert "gpu-toleration" in audit.stdout  # a rule of the packaged pack acted
    assert "site-packages/webhook/data/rules/ (the installed pack)" in audit.stderr, audit.stderr

    certs = run(installed, empty, "certs", "--out", "certs")
    assert certs.returncode == 0, certs.stderr
    manifests = run(installed, empty, "manifests", "--ca", "certs", "--image", "reg.example/gw@sha256:abc")
    assert manifests.returncode == 0, manifests.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(manifests.stdout) if d}
    assert {"Deployment", "ValidatingWebhookConfiguration", "ConfigMap", "Secret"} <= kinds

    port = free_port()
    server = subprocess.Popen(
        [str(installed / "gpu-webhook"), "serve", "--port", str(port), "--cert-dir", str(empty / "dev-certs")],
        cwd=empty,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        context = ssl.create_default_context(cafile=None)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # dev certificates made by serve itself; only liveness matters
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "serve never answered /healthz"
                time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(timeout=20)
