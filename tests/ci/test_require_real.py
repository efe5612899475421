"""GPU_WEBHOOK_REQUIRE_REAL (tests/support/require_real.py): with it set, as .ci/run sets it when the binaries
are there, a skipped real-apiserver test fails the run, and so does a run that covers tests/e2e but runs
none of it; the summary says how many ran. Each case is a pytest run as CI makes it (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO

SMOKE = "tests/e2e/test_smoke.py"


def pytest_run(*args: str, require: str | None, assets: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "GPU_WEBHOOK_REQUIRE_REAL")}
    if require is not None:
        env["GPU_WEBHOOK_REQUIRE_REAL"] = require
    if assets is not None:
        env["KUBEBUILDER_ASSETS"] = assets
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_without_the_requirement_a_skip_is_a_skip() -> None:
    done = pytest_run(SMOKE, require=None)
    assert done.returncode == 0, done.stdout
    assert "real-apiserver tests: 0 ran, 3 skipped\n" in done.stdout
    assert "3 skipped" in done.stdout


def test_with_the_requirement_a_skip_fails_and_says_why() -> None:
    done = pytest_run(SMOKE, require="envtest")
    assert done.returncode == 1, done.stdout
    assert (
        "GPU_WEBHOOK_REQUIRE_REAL requires the envtest layer (real-apiserver tests), but this test skipped: "
        in done.stdout
    )
    assert "KUBEBUILDER_ASSETS is unset" in done.stdout
    assert "real-apiserver tests: 0 ran, 3 skipped (required)" in done.stdout
    assert "GPU_WEBHOOK_REQUIRE_REAL=envtest: no test of tests/e2e ran" in done.stdout
    assert "3 errors" in done.stdout


def test_a_run_that_deselects_the_layer_fails() -> None:
    done = pytest_run(SMOKE, "-m", "not slow", require="envtest")
    assert done.returncode == 1, done.stdout
    assert "GPU_WEBHOOK_REQUIRE_REAL=envtest: no test of tests/e2e ran (real-apiserver tests)" in done.stdout


def test_a_run_outside_the_layer_is_not_held_to_it() -> None:
    done = pytest_run("tests/engine/test_pointer_edges.py", require="envtest,cluster")
    assert done.returncode == 0, done.stdout
    assert "real-apiserver tests: 0 ran, 0 skipped (required)" in done.stdout


def test_an_unknown_layer_is_a_usage_error() -> None:
    done = pytest_run("tests/engine/test_pointer_edges.py", require="envtset")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "GPU_WEBHOOK_REQUIRE_REAL: unknown layer(s) envtset; known: envtest, cluster" in done.stderr
