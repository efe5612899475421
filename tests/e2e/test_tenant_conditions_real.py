"""The tenant mutating entry's matchConditions as a real kube-apiserver evaluates them, against the
DYN model (tests/deploy/test_tenant_conditions.py checks the model against the engine).

`env-missing-or-requests-accelerators` skips an object without accelerators whose every container
already has NVIDIA_VISIBLE_DEVICES (a pod made from a template the webhook patched). The entry is
installed alone as tests/e2e/test_match_conditions_real.py installs the first ones: every selector
removed, failurePolicy Fail, a `url` where nothing listens (sent: "failed calling webhook").
"""

from __future__ import annotations

import copy
from typing import Any

from tests.deploy.test_tenant_conditions import TENANT_ENTRY, _all_voided
from tests.e2e.test_match_conditions_real import cluster, installed, model, objects, verdict
from tests.support.envtest import EnvTest
from webhook.engine import RuleSet
from webhook.install.registration import configurations

__all__ = ["cluster"]  # the module fixture: the apiserver with the workload CRDs

# Where the typed environment and the DYN model part (see TYPED_ERRORS in test_match_conditions_real):
# the apiserver's evaluation errors on these half-filled objects, a refusal under failurePolicy Fail
TYPED_ERRORS = {
    "half-filled CronJob ['jobTemplate']",
    "half-filled Deployment []",
    "half-filled Deployment ['template']",
    "half-filled Job ['template']",
    "half-filled Pod []",
}


def tenant_probe(pack: RuleSet, ca_bundle: str) -> dict[str, Any]:
    mutating = next(c for c in configurations(pack) if c["kind"] == "MutatingWebhookConfiguration")
    webhook = copy.deepcopy(next(w for w in mutating["webhooks"] if w["name"] == TENANT_ENTRY.name))
    webhook.pop("namespaceSelector", None)
    webhook.update(failurePolicy="Fail", timeoutSeconds=2)
    webhook["clientConfig"] = {"url": "https://127.0.0.1:9/nowhere", "caBundle": ca_bundle}
    return {
        "apiVersion": mutating["apiVersion"],
        "kind": mutating["kind"],
        "metadata": {"name": "probe-tenant-mutating"},
        "webhooks": [webhook],
    }


def test_tenant_creates_are_sent_as_the_model_says(
    cluster: tuple[EnvTest, dict[str, dict[str, Any]]], pack: RuleSet
) -> None:
    api, probes = cluster
    ca_bundle = probes["MutatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["caBundle"]
    probe = tenant_probe(pack, ca_bundle)
    cases = objects()
    cases += [
        (f"{name}, void in every container", _all_voided(obj)) for name, obj in cases if "half-filled" not in name
    ]
    without = {name: api.dry_run_create(obj) for name, obj in cases}

    def send() -> dict[str, str]:
        return {name: verdict(api.dry_run_create(obj), without[name]) for name, obj in cases}

    real = installed(api, probe, send)
    expected = {name: model(probe["webhooks"][0], obj, "CREATE") for name, obj in cases}
    differing = {name: (expected[name], real[name]) for name in real if real[name] != expected[name]}
    typed = {name for name, (said, found) in differing.items() if said == "skipped" and found.startswith("error: 403")}
    assert typed == TYPED_ERRORS, f"typed-environment errors: {sorted(typed)}"
    rest = {name: found for name, found in differing.items() if name not in typed}
    assert not rest, f"{len(rest)} of {len(cases)} (model, apiserver): {rest}"
    # what the condition is for: a voided CPU object skips the webhook, a bare one and a GPU one do not
    assert real["Pod (cpu), void in every container"] == "skipped"
    assert real["Deployment (cpu), void in every container"] == "skipped"
    assert real["Pod (cpu)"] == "sent" and real["Pod (gpu), void in every container"] == "sent"
