"""Device access is not exceptable: no GPUPolicyException lifts the rules that keep a container from
seeing GPUs it was not allocated, unless the platform opts a rule back in with a GPUPolicyOverlay.

Why (the rule headers, docs/day-two.md "Threat model"): the NVIDIA container toolkit reads the
container's NVIDIA_VISIBLE_DEVICES as its device list, `all` being every GPU of the node
(NVIDIA/nvidia-container-toolkit internal/config/image/cuda_image.go, CUDA.DevicesFromEnvvars), the
same cross-tenant reach as a privileged container, whose rule was already not exceptable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RULES, cpu_pod
from webhook.engine import AdmissionInput, Result, evaluate, load_rules

DEVICE_ACCESS = ("no-visible-devices-without-gpu", "visible-devices-void", "no-device-env-in-tenants")
NOT_EXCEPTABLE = (
    *DEVICE_ACCESS,
    "no-privileged-in-tenants",
    "no-host-namespaces-on-gpu-pods",
    "no-gpu-device-hostpath",
)


def exception(rule: str, namespace: str = "team-a") -> str:
    return f"""
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {{name: lift-{rule}, namespace: {namespace}}}
spec:
  rules: [{rule}]
  match: {{kinds: [Pod], names: [legacy]}}
  reason: the vendor image needs it
"""


OPT_IN = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyOverlay
metadata: {name: platform-allows-device-exceptions}
spec:
  rules:
    - {name: no-visible-devices-without-gpu, exceptable: true}
"""


def site(tmp_path: Path, *documents: str) -> Path:
    directory = tmp_path / "site"
    directory.mkdir(parents=True)
    (directory / "site.yaml").write_text("---\n".join(documents))
    return directory


def visible_devices_pod(namespace: str = "team-a") -> dict:
    pod = cpu_pod()
    pod["metadata"].update(name="legacy", namespace=namespace)
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return pod


def test_the_pack_marks_device_access_rules_not_exceptable(pack) -> None:
    exceptable = {rule.name: rule.exceptable for rule in pack.rules}
    assert {name: exceptable[name] for name in NOT_EXCEPTABLE} == dict.fromkeys(NOT_EXCEPTABLE, False)
    assert sum(exceptable.values()) == len(exceptable) - len(NOT_EXCEPTABLE)  # the rest stay exceptable


@pytest.mark.parametrize("rule", DEVICE_ACCESS)
def test_an_exception_naming_a_device_access_rule_is_refused_at_load(tmp_path: Path, rule: str) -> None:
    result = load_rules([str(RULES), str(site(tmp_path, exception(rule)))])
    assert not result.ok
    messages = [str(error) for error in result.errors]
    assert any(
        f"GPUPolicyException team-a/lift-{rule}: spec.rules: rule {rule!r} cannot be excepted (spec.exceptable: false)"
        in message
        for message in messages
    ), messages


def test_a_platform_overlay_opts_one_rule_back_in(tmp_path: Path) -> None:
    result = load_rules([str(RULES), str(site(tmp_path, OPT_IN, exception("no-visible-devices-without-gpu")))])
    assert result.ok, "\n".join(map(str, result.errors))
    ruleset = result.require()
    decision = evaluate(ruleset, AdmissionInput.offline(visible_devices_pod()))
    (outcome,) = [o for o in decision.outcomes() if o.rule == "no-visible-devices-without-gpu"]
    assert outcome.result == Result.EXCEPTED
    assert "excepted by team-a/lift-no-visible-devices-without-gpu" in outcome.reason
    # the same pod in another namespace: the exception is the namespace's own, the rule still denies
    elsewhere = evaluate(ruleset, AdmissionInput.offline(visible_devices_pod("team-b")))
    assert not elsewhere.allowed and "no-visible-devices-without-gpu" in {v.rule for v in elsewhere.violations}
    # the overlay opted in that rule alone
    refused = load_rules([str(RULES), str(site(tmp_path / "b", OPT_IN, exception("no-device-env-in-tenants")))])
    assert not refused.ok and "'no-device-env-in-tenants' cannot be excepted" in str(refused.errors[0])


def test_without_the_overlay_the_pod_is_denied_even_beside_a_stored_exception(pack) -> None:
    """An exception that reached the cluster anyway (written before the upgrade, or while the policies
    webhook was down) lifts nothing: evaluation ignores exceptions on a rule that is not exceptable."""
    from webhook.engine import RuleSet, parse_exception

    stored = parse_exception(
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicyException",
            "metadata": {"name": "old", "namespace": "team-a"},
            "spec": {"rules": ["no-visible-devices-without-gpu"], "reason": "from before the upgrade"},
        }
    )
    ruleset = RuleSet.build(list(pack.rules), pack.env, (stored,))
    decision = evaluate(ruleset, AdmissionInput.offline(visible_devices_pod()))
    assert not decision.allowed
    assert "no-visible-devices-without-gpu" in {v.rule for v in decision.violations}


def test_an_exception_cannot_carry_exceptable_itself(tmp_path: Path) -> None:
    """Only an overlay (cluster-scoped: manifests/base/crds.yaml) sets exceptable; a namespace's
    exception that tries is a schema error, not a switch."""
    flipped = exception("no-visible-devices-without-gpu").replace("  reason:", "  exceptable: true\n  reason:")
    result = load_rules([str(RULES), str(site(tmp_path, flipped))])
    assert not result.ok
    assert any("exceptable" in str(error) for error in result.errors), result.errors
