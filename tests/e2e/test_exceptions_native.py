"""GPUPolicyExceptions on a real kube-apiserver, beside exported native policies and device-access rules.

Two failures of issue 34, re-run as a user meets them, with the session's `gpu-webhook serve` (the
pack from files plus the cluster's policy objects, tests/e2e/conftest.py) and its rendered webhook
configurations:

- an exception and the exported policies never disagree: with an active exception lifting
  gpu-container-resources for one Deployment, `gpu-webhook export --claims unresolved` (whose merged
  `gpu-webhook-deny-fail` used to hold that rule and deny the Deployment) keeps the rule with the
  webhook and says so, so with the policies installed the excepted Deployment is admitted exactly
  as the webhook admits it, and its twin is denied by the webhook. A site that opts the rule into
  native enforcement (exceptable: false, a GPUPolicyOverlay given to export and applied to the
  cluster) gets it exported, and then neither the policy nor the webhook lets an exception lift it.
  Why a policy cannot honour exceptions: webhook.export.EXCEPTABLE, docs/native.md "Exceptions".
- device access is not exceptable: an exception naming no-visible-devices-without-gpu is refused at
  apply by the policies webhook with the reason, a namespace cannot hold an overlay (the kind is
  cluster-scoped), and the platform's cluster-scoped overlay opts the rule back in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import WebhookServer, gpu_webhook
from tests.e2e.test_policy_objects import (
    GROUP_VERSION,
    answer_when,
    crds,  # noqa: F401 (a fixture: the CRDs, watched by the server)
    create,
    denial,
    path_of,
    wait_for,
)
from tests.export.native_site import NO_ALLOCATORS, overlay_text
from tests.support import RULES
from tests.support.envtest import EnvTest, Response
from webhook.export.merge import rules_of

NATIVE_DENIAL = "ValidatingAdmissionPolicy 'gpu-webhook-"
TENANT = {"gpu-webhook.io/tenant": "true"}


def gpu_deployment(name: str, namespace: str) -> dict[str, Any]:
    """A GPU Deployment whose container sets no CPU or memory: gpu-container-resources denies it."""
    labels = {"app": name}
    container = {
        "name": "main",
        "image": "registry.example.com/train:1",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def privileged_pod(name: str, namespace: str) -> dict[str, Any]:
    """no-privileged-in-tenants (not exceptable, exported in every mode) denies it in a tenant namespace."""
    container = {"name": "main", "image": "registry.example.com/x:1", "securityContext": {"privileged": True}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container]},
    }


def exception(name: str, namespace: str, rule: str, kind: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"rules": [rule], "match": {"kinds": [kind], "names": [target]}, "reason": "e2e: vendor image"},
    }


def exported(tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    """`export --claims unresolved` of the pack (and `args`' rules) at a site without annotation-marked
    GPU allocators, whose shares the native count cannot see (webhook.export.policies)."""
    config = tmp_path / "no-allocators"
    config.mkdir(exist_ok=True)
    (config / "no-allocators.yaml").write_text(NO_ALLOCATORS)
    rules = [*args] if args else ["--rules", str(RULES)]
    done = gpu_webhook("export", "--target", "vap", "--claims", "unresolved", *rules, "--rules", str(config))
    return [d for d in yaml.safe_load_all(done.stdout) if d], done.stderr


class Installed:
    """Exported objects created on the apiserver, deleted again (they are cluster-wide)."""

    def __init__(self, apiserver: EnvTest) -> None:
        self.apiserver = apiserver
        self.paths: list[str] = []

    def apply(self, documents: list[dict[str, Any]]) -> None:
        for document in documents:
            made = self.apiserver.create(document)
            assert made.ok, f"{document['metadata']['name']}: {made.status} {made.message}"
            collection = self.apiserver.resource_path(document["apiVersion"], document["kind"], None)
            self.paths.append(f"{collection}/{document['metadata']['name']}")

    def remove(self) -> None:
        for path in reversed(self.paths):
            self.apiserver.request("DELETE", path)
        self.paths.clear()


@pytest.fixture
def installed(apiserver: EnvTest) -> Iterator[Installed]:
    objects = Installed(apiserver)
    yield objects
    objects.remove()


def native_in_effect(apiserver: EnvTest, probe: dict[str, Any]) -> Response:
    """Wait until the policies just created decide (the apiserver loads them asynchronously)."""
    return wait_for(
        "the exported policies in effect",
        answer_when(lambda: apiserver.dry_run_create(probe), lambda a: NATIVE_DENIAL in a.message),
    )


@pytest.mark.usefixtures("crds")
def test_an_excepted_deployment_gets_the_same_answer_from_exported_policies_and_the_webhook(
    apiserver: EnvTest, webhook_server: WebhookServer, installed: Installed, tmp_path: Path
) -> None:
    namespace = "e2e-exceptions-native"
    apiserver.create_namespace(namespace, TENANT)
    train, twin = gpu_deployment("train", namespace), gpu_deployment("twin", namespace)
    assert "gpu-container-resources" in denial(apiserver.dry_run_create(train))
    create(apiserver, exception("train-sizing", namespace, "gpu-container-resources", "Deployment", "train"))
    wait_for(
        f"the webhook honours the exception\n{webhook_server.logs()}",
        answer_when(lambda: apiserver.dry_run_create(train), lambda a: a.ok),
    )

    # the export that used to deny it: gpu-container-resources stays with the webhook, and says why
    documents, stderr = exported(tmp_path)
    assert "gpu-container-resources: not exported: a GPUPolicyException may lift it" in stderr
    assert "warning:" in stderr and "gpu-container-resources" in stderr.split("warning:")[1]
    native_rules = {rule for d in documents if d["kind"] == "ValidatingAdmissionPolicy" for rule in rules_of(d)}
    assert native_rules and "gpu-container-resources" not in native_rules
    installed.apply(documents)
    native_in_effect(apiserver, privileged_pod("probe", namespace))
    # the excepted Deployment: admitted by the policies and the webhook alike
    answer = apiserver.dry_run_create(train)
    assert answer.ok, answer.message
    # its twin: denied, by the webhook (the rule is the webhook's), not by a policy
    message = denial(apiserver.dry_run_create(twin))
    assert "gpu-container-resources" in message and NATIVE_DENIAL not in message
    installed.remove()

    # the site opts the rule into native enforcement: exceptable false, given to export and to the cluster
    site = tmp_path / "site"
    site.mkdir()
    (site / "native.yaml").write_text(overlay_text(["gpu-container-resources"]))
    documents, stderr = exported(tmp_path, "--rules", str(RULES), "--rules", str(site))
    assert "gpu-container-resources: not exported" not in stderr
    overlay = yaml.safe_load(overlay_text(["gpu-container-resources"]))
    create(apiserver, overlay)
    try:
        # the webhook follows the overlay: the stored exception no longer lifts the rule
        message = wait_for(
            f"the webhook applies the overlay\n{webhook_server.logs()}",
            answer_when(lambda: apiserver.dry_run_create(train), lambda a: not a.ok),
        ).message
        assert "gpu-container-resources" in message
        # a new exception for it is refused at apply, with the reason
        refused = apiserver.create(exception("again", namespace, "gpu-container-resources", "Deployment", "train"))
        assert not refused.ok and "cannot be excepted (spec.exceptable: false)" in refused.message, refused.body
        installed.apply(documents)
        native_in_effect(apiserver, privileged_pod("probe", namespace))
        # the policy denies the excepted Deployment too: the two agree again
        message = wait_for(
            "the exported gpu-container-resources in effect",
            answer_when(
                lambda: apiserver.dry_run_create(train),
                lambda a: NATIVE_DENIAL in a.message and "[gpu-container-resources]" in a.message,
            ),
        ).message
        assert "requests GPUs but sets no" in message
    finally:
        apiserver.request("DELETE", path_of("gpupolicyoverlays", overlay["metadata"]["name"]))


@pytest.mark.usefixtures("crds")
def test_an_exception_cannot_lift_no_visible_devices_without_gpu_unless_the_platform_opts_in(
    apiserver: EnvTest, webhook_server: WebhookServer
) -> None:
    namespace = "e2e-device-access"
    apiserver.create_namespace(namespace)
    legacy = privileged_pod("legacy-cuda", namespace)
    del legacy["spec"]["containers"][0]["securityContext"]
    legacy["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert "no-visible-devices-without-gpu" in denial(apiserver.dry_run_create(legacy))

    lift = exception("legacy-image", namespace, "no-visible-devices-without-gpu", "Pod", "legacy-cuda")
    refused = apiserver.create(lift)
    assert not refused.ok and "policies.gpu-webhook.io" in refused.message, refused.body
    assert "rule 'no-visible-devices-without-gpu' cannot be excepted (spec.exceptable: false)" in refused.message
    assert apiserver.request("GET", path_of("gpupolicyexceptions", "legacy-image", namespace)).status == 404
    # a namespace cannot hold its own overlay: the kind is cluster-scoped
    opt_in = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": "e2e-device-exceptions"},
        "spec": {"rules": [{"name": "no-visible-devices-without-gpu", "exceptable": True}]},
    }
    namespaced = apiserver.request("POST", path_of("gpupolicyoverlays", namespace=namespace), opt_in)
    assert namespaced.status == 404, namespaced.body

    # the platform opts the rule back in: the exception is accepted and lifts it for that pod alone
    create(apiserver, opt_in)
    try:
        wait_for(
            f"the exception accepted once the overlay is loaded\n{webhook_server.logs()}",
            answer_when(lambda: apiserver.create(lift), lambda a: a.ok),
        )
        wait_for("the exception in effect", answer_when(lambda: apiserver.dry_run_create(legacy), lambda a: a.ok))
        other = privileged_pod("other", namespace)
        del other["spec"]["containers"][0]["securityContext"]
        other["spec"]["containers"][0]["env"] = legacy["spec"]["containers"][0]["env"]
        assert "no-visible-devices-without-gpu" in denial(apiserver.dry_run_create(other))
    finally:
        apiserver.request("DELETE", path_of("gpupolicyexceptions", "legacy-image", namespace))
        apiserver.request("DELETE", path_of("gpupolicyoverlays", "e2e-device-exceptions"))
