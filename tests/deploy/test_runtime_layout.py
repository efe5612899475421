"""The image's runtime stage reproduced without a Docker engine, and a package that changes under a server.

The Dockerfile's runtime stage is the built wheel installed with `pip install --target`, run by
`python3 -m webhook.cli serve` with PYTHONPATH only (no virtualenv, no site-packages: `-S` here,
the distroless image has none of its own), as uid/gid 65532, on a read-only root: the install
is compiled and made read-only, HOME and /tmp are empty directories of the test (the image's
emptyDir), the certificates and rules come from directories standing for the Secret and ConfigMap
mounts. It must start, serve /healthz and /readyz over TLS, and write nothing outside its mounts.

Then the upgrade of issue 37: `pip install --upgrade` under a running server replaces the
package's files (a new dist-info, new rule files) but not the code in memory. Reproduced on disk
the way pip leaves it, the server must say so (log, `gpu_webhook_package_changed` 1), keep its
rules (generation 1) and not hot-reload the new wheel's pack into the old engine.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, free_port
from tests.support.wheel import build_wheel
from webhook.cli import main
from webhook.version import pack_digest

pytestmark = pytest.mark.slow  # a wheel build, a server process
NONROOT = 65532  # the distroless image's "nonroot" user (Dockerfile USER 65532:65532)
SETPRIV = shutil.which("setpriv")
UPGRADE = "99.0.0"  # the version `pip install --upgrade` brings under the running server


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """A directory every user may traverse (pytest's tmp_path is 0700 root's)."""
    root = Path(tempfile.mkdtemp(prefix="gpu-webhook-image-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def target(world: Path) -> Path:
    """The wheel built from this checkout (git's version), installed with `pip install --target` and
    byte-compiled, as the builder stage does."""
    dist = world / "dist"
    wheel = build_wheel(dist)
    install = world / "opt-gpu-webhook"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(install), str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(install)], check=True)
    return install


def version_of(install: Path) -> str:
    (info,) = install.glob("gpu_webhook-*.dist-info")
    return re.search(r"^Version: (.*)$", (info / "METADATA").read_text(), flags=re.M).group(1)


def read_only(tree: Path) -> None:
    for directory, _dirs, files in os.walk(tree):
        for name in files:
            os.chmod(os.path.join(directory, name), 0o444)
        os.chmod(directory, 0o555)


def snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(tree)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in tree.rglob("*")
        if path.is_file()
    }


def mounts(world: Path, name: str) -> dict[str, Path]:
    """The pod's writable and mounted paths: the TLS Secret, HOME and /tmp (emptyDir), owned by the user."""
    paths = {key: world / name / key for key in ("tls", "home", "tmp")}
    for path in paths.values():
        path.mkdir(parents=True)
    assert main(["certs", "--out", str(paths["tls"]), "--no-service-names", "--dns", "localhost"]) == 0
    for path in paths.values():
        for item in (path, *path.iterdir()):
            os.chown(item, NONROOT, NONROOT)
    return paths


def serve(
    target: Path, paths: dict[str, Path], port: int, metrics: int, rules: Path | None = None
) -> subprocess.Popen[str]:
    """`python3 -S -m webhook.cli serve` as the image's ENTRYPOINT runs it, as uid 65532 when possible."""
    # the image's dependencies are in its --target directory too; here they are the test environment's
    deps = sysconfig.get_paths()["purelib"]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{target}:{deps}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": str(paths["home"]),
        "TMPDIR": str(paths["tmp"]),
    }
    argv = [sys._base_executable, "-S", "-m", "webhook.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--cert-dir", str(paths["tls"]), "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics)]
    argv += ["--reload-interval", "0.2"] + (["--rules", str(rules)] if rules else [])
    if SETPRIV and os.geteuid() == 0:
        argv = [SETPRIV, f"--reuid={NONROOT}", f"--regid={NONROOT}", "--clear-groups", *argv]
    return subprocess.Popen(
        argv, env=env, cwd=str(paths["home"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(condition, server: subprocess.Popen[str], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        if server.poll() is not None:
            raise AssertionError(
                f"the server exited ({server.returncode}) before {what}:\n{server.stdout.read() if server.stdout else ''}"
            )
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.1)


def stop(server: subprocess.Popen[str]) -> str:
    server.terminate()
    try:
        output, _ = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        output, _ = server.communicate()
    return output


@pytest.mark.skipif(SETPRIV is None or os.geteuid() != 0, reason="needs root and setpriv to run as uid 65532")
def test_the_runtime_layout_starts_and_serves_as_nonroot(target: Path, world: Path) -> None:
    paths = mounts(world, "nonroot")
    # the image's rules, as the ConfigMap mount: read-only, outside the install
    rules = world / "nonroot" / "rules"
    shutil.copytree(REPO / "rules", rules)
    read_only(rules)
    install = world / "nonroot" / "install"
    shutil.copytree(target, install)
    read_only(install)
    before = snapshot(install)
    port, metrics = free_port(), free_port()
    server = serve(install, paths, port, metrics, rules)
    try:
        context = ssl.create_default_context(cafile=str(paths["tls"] / "ca.crt"))
        wait_for(
            lambda: get(f"https://localhost:{port}/healthz", context)[0] == 200, server, "served /healthz over TLS"
        )
        wait_for(lambda: get(f"https://localhost:{port}/readyz", context)[0] == 200, server, "became ready")
        status, page = get(f"http://127.0.0.1:{metrics}/metrics")
        info = f'gpu_webhook_build_info{{pack="{pack_digest([rules])}",version="{version_of(install)}"}} 1.0'
        assert status == 200 and info in page
        owner = subprocess.run(["ps", "-o", "uid=", "-p", str(server.pid)], capture_output=True, text=True, check=False)
        assert owner.stdout.strip() == str(NONROOT)
    finally:
        output = stop(server)
    assert snapshot(install) == before, "the server wrote into its install"
    assert not [p for p in install.rglob("__pycache__") if not any(p.iterdir())]
    assert "Traceback" not in output, output


def test_an_upgrade_under_a_running_server_is_reported_and_its_pack_not_loaded(target: Path, world: Path) -> None:
    paths = mounts(world, "upgrade")
    install = world / "upgrade" / "install"
    shutil.copytree(target, install)
    packaged = install / "webhook" / "data" / "rules"
    version = version_of(install)
    port, metrics = free_port(), free_port()
    server = serve(install, paths, port, metrics)  # the default rules: the installed package's own pack
    page = lambda: get(f"http://127.0.0.1:{metrics}/metrics")[1]  # noqa: E731
    try:
        wait_for(lambda: "gpu_webhook_rules_generation 1.0" in page(), server, "loaded its rules")
        first = page()
        assert f'gpu_webhook_build_info{{pack="{pack_digest([packaged])}",version="{version}"}} 1.0' in first
        assert "gpu_webhook_package_changed 0.0" in first
        # `pip install --upgrade gpu-webhook` as it lands on disk: the new version's dist-info replaces the
        # old one, and the new wheel's rule files replace the old ones in place
        (old,) = install.glob("gpu_webhook-*.dist-info")
        new = install / f"gpu_webhook-{UPGRADE}.dist-info"
        old.rename(new)
        metadata = new / "METADATA"
        metadata.write_text(re.sub(r"^Version: .*$", f"Version: {UPGRADE}", metadata.read_text(), count=1, flags=re.M))
        rule = packaged / "gpu-cost-labels.yaml"
        rule.write_text(rule.read_text() + f"\n# a rule of {UPGRADE}\n")
        wait_for(lambda: "gpu_webhook_package_changed 1.0" in page(), server, "reported the changed package")
        wait_for(lambda: "gpu_webhook_rules_reload_failures_total 1.0" in page(), server, "refused the new pack")
        after = page()
        assert "gpu_webhook_rules_generation 1.0" in after  # the rules it started with keep serving
        (info,) = [line for line in after.splitlines() if line.startswith("gpu_webhook_build_info{")]
        assert f'version="{version}"' in info  # the running engine's, not the installed one's
    finally:
        output = stop(server)
    assert "changed under the running server" in output and f'"installed":"{UPGRADE}"' in output, output
    assert "rule reload refused" in output
