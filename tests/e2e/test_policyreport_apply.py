"""`audit --cluster -o policyreport --apply` on a real apiserver that has no PolicyReport CRDs says so,
instead of `HTTP 404: no details`."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.conftest import gpu_pod
from tests.support import REPO
from tests.support.envtest import EnvTest


def test_apply_without_the_policyreport_crds_names_what_is_missing(apiserver: EnvTest) -> None:
    apiserver.create_namespace("team-reports", {})
    pod = gpu_pod("reported", "team-reports")
    created = apiserver.create(pod)
    assert created.status == 201, created.body
    audit = ["audit", "--cluster", "--kubeconfig", str(apiserver.kubeconfig), "-n", "team-reports"]
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *audit, "-o", "policyreport", "--apply", "--fail-on", "never"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "does not serve wgpolicyk8s.io/v1alpha2 (the PolicyReport CRDs are not installed)" in done.stderr
    assert "no details" not in done.stderr and "Traceback" not in done.stderr
