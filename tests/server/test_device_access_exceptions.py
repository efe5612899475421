"""`POST /policies` over real TLS refuses a GPUPolicyException that names a device-access rule, with
the reason, and accepts it once a platform's GPUPolicyOverlay opts that rule back in (the threat
model of docs/day-two.md; the rules' headers cite NVIDIA/nvidia-container-toolkit
internal/config/image/cuda_image.go). The real apiserver's part: tests/e2e/test_exceptions_native.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.server.test_policy_objects import Cluster, serve
from tests.support import RULES, make_review

DEVICE_ACCESS = ("no-visible-devices-without-gpu", "visible-devices-void", "no-device-env-in-tenants")


def exception(rule: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": f"lift-{rule}", "namespace": "team-a", "uid": f"uid-{rule}", "generation": 1},
        "spec": {"rules": [rule], "match": {"kinds": ["Pod"]}, "reason": "the vendor image needs it"},
    }


OPT_IN = {
    "apiVersion": "gpu-webhook.io/v1alpha1",
    "kind": "GPUPolicyOverlay",
    "metadata": {"name": "platform-allows-device-exceptions", "uid": "uid-opt-in", "generation": 1},
    "spec": {"rules": [{"name": "no-visible-devices-without-gpu", "exceptable": True}]},
}


@pytest.mark.parametrize("opted_in", [False, True], ids=["as-shipped", "overlay-opts-in"])
async def test_an_exception_for_device_access_is_refused_unless_a_platform_overlay_opts_in(
    cert_dir: Path, opted_in: bool
) -> None:
    cluster = Cluster([OPT_IN] if opted_in else [])
    async with serve(cert_dir, RULES, cluster) as live:
        for rule in DEVICE_ACCESS:
            answer = (await live.review("policies", make_review(exception(rule))))["response"]
            if opted_in and rule == "no-visible-devices-without-gpu":
                assert answer["allowed"] is True, answer
                continue
            assert answer["allowed"] is False and answer["status"]["code"] == 422, answer
            assert f"rule {rule!r} cannot be excepted (spec.exceptable: false)" in answer["status"]["message"]
