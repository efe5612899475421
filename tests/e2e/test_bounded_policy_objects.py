"""What a namespace user can write is bounded before the webhook does any work (issue 34, point 4), on a
real kube-apiserver with the shipped CRDs (manifests/base/crds.yaml) and the rendered webhooks.

The apiserver validates a custom resource against its CRD's openAPIV3Schema in the registry's
BeforeCreate/BeforeUpdate, before the validating admission webhooks are called (kubernetes/kubernetes,
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go: `rest.BeforeCreate` then
`createValidation`), so an object over a `maxItems` never reaches `/policies`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import WebhookServer
from tests.e2e.test_policy_objects import GROUP_VERSION, crds, wait_for  # noqa: F401 (crds: a fixture)
from tests.support.envtest import EnvTest

NAMESPACE = "e2e-bounded-exceptions"


def exception(name: str, rules: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"rules": rules, "reason": "bounded e2e"},
    }


@pytest.mark.usefixtures("crds")
def test_an_oversized_exception_is_refused_by_the_apiserver_before_the_webhook(
    apiserver: EnvTest, webhook_server: WebhookServer
) -> None:
    """The attack of issue 34 failure 1: 45,000 near-miss rule names, 1.2 MB, as a dry run."""
    apiserver.create_namespace(NAMESPACE)
    # the webhook is called for an exception of normal size: the count below can move
    before = webhook_server.answered("policies")
    small = apiserver.create(exception("e2e-small", ["gpu-container-resources"]), dry_run=True)
    assert small.ok, small.body
    wait_for("the /policies check counted", lambda: webhook_server.answered("policies") > before, timeout=5)

    names = [f"gpu-container-resourcez-{i:05d}" for i in range(45_000)]
    oversized = exception("e2e-oversized", names)
    size = len(str(oversized))
    assert size > 1_200_000
    checked = webhook_server.answered("policies")
    answer = apiserver.create(oversized, dry_run=True)
    assert answer.status == 422, (answer.status, str(answer.body)[:500])
    assert answer.body["reason"] == "Invalid"
    assert "spec.rules: Too many: 45000: must have at most 128 items" in answer.message, answer.message[:500]
    assert webhook_server.answered("policies") == checked, "the webhook was called for an oversized exception"

    # strings and maps too: a reason of 1 KiB + 1, a selector of 65 labels
    long_reason = exception("e2e-long-reason", ["gpu-container-resources"])
    long_reason["spec"]["reason"] = "x" * 1025
    answer = apiserver.create(long_reason, dry_run=True)
    assert answer.status == 422 and "spec.reason: Too long" in answer.message, answer.message
    many_labels = exception("e2e-many-labels", ["gpu-container-resources"])
    many_labels["spec"]["match"] = {"objectSelector": {"matchLabels": {f"k{i}": "v" for i in range(65)}}}
    answer = apiserver.create(many_labels, dry_run=True)
    assert answer.status == 422 and "must have at most 64 items" in answer.message, answer.message
    long_key = exception("e2e-long-key", ["gpu-container-resources"])
    long_key["spec"]["match"] = {"objectSelector": {"matchLabels": {"k" * 318: "v"}}}
    answer = apiserver.create(long_key, dry_run=True)
    assert answer.status == 422 and "keys are at most 317 characters" in answer.message, answer.message
    assert webhook_server.answered("policies") == checked
