"""A GPUPolicyException beside the rules, through the server over real HTTPS: the request passes the
rule it names, and the response says so (a warning for the user, an audit annotation for the log).

no-visible-devices-without-gpu is not exceptable as shipped (device access, docs/day-two.md): the
site's overlay beside the exception opts it back in, as a platform may."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import LiveServer, cpu_pod, make_review

EXCEPTION = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyOverlay
metadata: {name: allow-device-exceptions}
spec:
  rules:
    - {name: no-visible-devices-without-gpu, exceptable: true}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {name: web-debug, namespace: team-a}
spec:
  rules: [no-visible-devices-without-gpu]
  match: {kinds: [Pod], names: [web]}
  expires: "2099-01-01T00:00:00Z"
  reason: vendor debugging session
"""
VERDICT = "excepted by team-a/web-debug: vendor debugging session"


@pytest.fixture
def rules_dir(rules_dir: Path) -> Path:
    (rules_dir / "site-exceptions.yaml").write_text(EXCEPTION)
    return rules_dir


def visible_devices_pod(name: str = "web", namespace: str = "team-a") -> dict:
    pod = cpu_pod()
    pod["metadata"].update(name=name, namespace=namespace)
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return pod


async def test_the_excepted_pod_is_allowed_and_told_why(live_server: LiveServer) -> None:
    answer = (await live_server.review("validate", make_review(visible_devices_pod())))["response"]
    assert answer["allowed"] is True
    assert answer["warnings"] == [f"[no-visible-devices-without-gpu] {VERDICT}"]
    assert answer["auditAnnotations"] == {"no-visible-devices-without-gpu": VERDICT}


async def test_another_name_or_namespace_is_still_denied(live_server: LiveServer) -> None:
    for pod in (visible_devices_pod(name="api"), visible_devices_pod(namespace="team-b")):
        answer = (await live_server.review("validate", make_review(pod)))["response"]
        assert answer["allowed"] is False
        assert "[no-visible-devices-without-gpu]" in answer["status"]["message"]
        assert "warnings" not in answer
