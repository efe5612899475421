"""The webhooks' matchConditions as a real kube-apiserver evaluates them, against the model of
tests/deploy/test_match_conditions.py (cel-expr-python with DYN variables) on a sample of its objects.

The apiserver runs matchConditions in its own typed CEL environment with its cost limits
(kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/
matcher.go): a condition that is false skips the webhook, one that errors rejects the request under
failurePolicy Fail. To see which, each rendered webhook (the first of each configuration, as the
deploy test reads them) is installed alone with its rules and matchConditions, every selector removed,
failurePolicy Fail and a `url` where nothing listens: a request the conditions send fails with
"failed calling webhook", one they skip is admitted, and a condition's error is neither.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.deploy.test_match_conditions import CPU_SPEC, GPU_SPEC, HALF_FILLED, dra_spec, workloads
from tests.e2e.conftest import BUILT_IN_GROUPS, CLUSTER_FLAGS, E2E_IMAGE, gpu_pod, gpu_webhook, workload_crd
from tests.e2e.test_export_native import valid
from tests.support.envtest import SKIP_REASON, EnvTest, Response, assets_dir, free_port
from webhook.engine.workloads import KINDS

NAMESPACE = "e2e-match-conditions"
API_VERSIONS = {kind.kind: f"{kind.group}/{kind.versions[0]}".lstrip("/") for kind in KINDS}


def model(webhook: dict[str, Any], obj: Any, operation: str, old: Any = None) -> str:
    """What the DYN model says the apiserver does: sent, skipped, or error."""
    from cel_expr_python import cel

    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    activation = {"object": obj, "oldObject": old, "request": {"operation": operation}}
    for condition in webhook["matchConditions"]:
        result = env.compile(condition["expression"]).eval(env.Activation(activation))
        if result.type() == cel.Type.ERROR:
            return "error"
        if result.value() is not True:
            return "skipped"
    return "sent"


def verdict(answer: Response, without: Response | None = None) -> str:
    """sent (the webhook was called), skipped (the answer is the one without the webhook), else the error."""
    if "failed calling webhook" in answer.message:
        return "sent"
    if answer.ok if without is None else (answer.status, answer.message) == (without.status, without.message):
        return "skipped"
    return f"error: {answer.status} {answer.message[:200]}"


def objects() -> list[tuple[str, dict[str, Any]]]:
    """The deploy test's objects, named and placed so the apiserver takes them."""
    found: list[tuple[str, dict[str, Any]]] = []
    for label, spec in (
        ("gpu", GPU_SPEC),
        ("cpu", CPU_SPEC),
        ("dra", dra_spec([{"name": "gpu", "resourceClaimTemplateName": "t"}])),
    ):
        found += [(f"{kind} ({label})", obj) for kind, obj in workloads(spec).items()]
    found += [(f"half-filled {obj['kind']} {sorted(obj.get('spec', {}))}", obj) for obj in HALF_FILLED]
    placed = []
    for index, (name, obj) in enumerate(found):
        if obj["kind"] not in API_VERSIONS:
            continue  # a kind no rule registers: the apiserver never asks the webhook about it
        obj = copy.deepcopy(obj) if name.startswith("half-filled") else valid(obj)
        obj.setdefault("apiVersion", API_VERSIONS[obj["kind"]])
        obj.setdefault("metadata", {}).update(name=f"mc-{index}", namespace=NAMESPACE)
        placed.append((name, obj))
    return placed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EnvTest, dict[str, dict[str, Any]]]]:
    if assets_dir() is None:
        pytest.skip(SKIP_REASON)
    certs = tmp_path_factory.mktemp("mc-certs")
    gpu_webhook("certs", "--out", str(certs))
    text = gpu_webhook("manifests", "--ca", str(certs), "--image", E2E_IMAGE).stdout
    rendered = [d for d in yaml.safe_load_all(text) if d]
    probes = {}
    nowhere = f"https://127.0.0.1:{free_port()}/nowhere"
    for configuration in rendered:
        if configuration["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        webhook = copy.deepcopy(configuration["webhooks"][0])
        webhook.pop("namespaceSelector", None)
        webhook.pop("objectSelector", None)
        webhook.update(failurePolicy="Fail", timeoutSeconds=2)
        webhook["clientConfig"] = {"url": nowhere, "caBundle": webhook["clientConfig"]["caBundle"]}
        body = {"apiVersion": configuration["apiVersion"], "kind": configuration["kind"], "webhooks": [webhook]}
        probes[configuration["kind"]] = {**body, "metadata": {"name": f"probe-{configuration['kind'].lower()}"}}
    assert set(probes) == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    with EnvTest.start(apiserver_args=CLUSTER_FLAGS) as api:
        api.create_namespace(NAMESPACE)
        crds = [workload_crd(kind) for kind in KINDS if kind.group not in BUILT_IN_GROUPS]
        for crd in crds:
            assert api.create(crd).ok
        deadline = time.monotonic() + 30
        for crd in crds:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
            while not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (api.request("GET", path).body or {}).get("status", {}).get("conditions", [])
            ):
                assert time.monotonic() < deadline, f"CRD {crd['metadata']['name']} not Established"
                time.sleep(0.1)
        yield api, probes


def installed(api: EnvTest, probe: dict[str, Any], send: Any) -> Any:
    """Run `send` with the probe webhook installed (and wait until the apiserver calls it)."""
    created = api.create(probe)
    assert created.ok, created.message
    path = f"/apis/admissionregistration.k8s.io/v1/{probe['kind'].lower()}s/{probe['metadata']['name']}"
    try:
        deadline = time.monotonic() + 15  # webhook configurations reach the admission chain through an informer
        canary = gpu_pod("mc-canary", NAMESPACE)
        while verdict(api.dry_run_create(canary)) != "sent":
            assert time.monotonic() < deadline, "the probe webhook is never called"
            time.sleep(0.2)
        return send()
    finally:
        api.request("DELETE", path)
        deadline = time.monotonic() + 15
        while verdict(api.dry_run_create(gpu_pod("mc-canary", NAMESPACE))) == "sent" and time.monotonic() < deadline:
            time.sleep(0.2)


# Where the typed environment and the DYN model part: on these half-filled objects (a mutating webhook sees
# an object before validation) the apiserver's evaluation of `requests-accelerators` errors, so under
# failurePolicy Fail the create is refused by the condition (403) instead of by validation (422); the
# model reads the condition as false. Fail closed, but the user gets the condition's error, not the
# validation message. An entry that stops erroring, or a new one, fails the test.
TYPED_ERRORS = {
    "MutatingWebhookConfiguration": {
        "half-filled CronJob ['jobTemplate']",
        "half-filled Deployment []",
        "half-filled Deployment ['template']",
        "half-filled Job ['template']",
        "half-filled Pod []",
    },
    "ValidatingWebhookConfiguration": set(),
}


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_creates_are_sent_as_the_model_says(cluster: tuple[EnvTest, dict[str, dict[str, Any]]], kind: str) -> None:
    api, probes = cluster
    webhook = probes[kind]["webhooks"][0]
    cases = objects()
    without = {name: api.dry_run_create(obj) for name, obj in cases}
    if kind.startswith("Validating"):  # validation runs before validating webhooks: they never see these
        cases = [(name, obj) for name, obj in cases if without[name].ok]

    def send() -> dict[str, str]:
        return {name: verdict(api.dry_run_create(obj), without[name]) for name, obj in cases}

    real = installed(api, probes[kind], send)
    expected = {name: model(webhook, obj, "CREATE") for name, obj in cases}
    differing = {name: (expected[name], real[name]) for name in real if real[name] != expected[name]}
    typed = {
        name
        for name, (model_says, _) in differing.items()
        if model_says == "skipped" and real[name].startswith("error: 403")
    }
    assert typed == TYPED_ERRORS[kind], f"typed-environment errors: {sorted(typed)}"
    rest = {name: found for name, found in differing.items() if name not in typed}
    assert not rest, f"{len(rest)} of {len(cases)} (model, apiserver): {rest}"
    sent = sum(v == "sent" for v in real.values())
    assert sent > 0 and (kind.startswith("Validating") or sent < len(cases)), (
        real
    )  # the validating one sees every create
    print(f"\n{kind}: {len(cases)} creates, {sent} sent, as the model says; {len(typed)} typed-environment errors")


def test_updates_are_sent_when_a_rule_input_changes(cluster: tuple[EnvTest, dict[str, dict[str, Any]]]) -> None:
    """rule-inputs-changed: a finalizer or an annotation alone is skipped, a label or a spec change is sent."""
    api, probes = cluster
    stored = api.create(gpu_pod("mc-stored", NAMESPACE))
    assert stored.ok, stored.message
    old = stored.body
    changes = {
        "finalizer": lambda o: o["metadata"].update(finalizers=["example.com/keep"]),
        "annotation": lambda o: o["metadata"].update(annotations={"example.com/note": "x"}),
        "label": lambda o: o["metadata"].update(labels={"team": "other"}),
        "spec": lambda o: o["spec"].update(activeDeadlineSeconds=60),
    }
    updates = {}
    for name, change in changes.items():
        new = copy.deepcopy(old)
        change(new)
        updates[name] = new
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/mc-stored"
    for kind, probe in probes.items():
        webhook = probe["webhooks"][0]

        def send() -> dict[str, str]:
            return {n: verdict(api.request("PUT", path, body, {"dryRun": "All"})) for n, body in updates.items()}

        real = installed(api, probe, send)
        expected = {n: model(webhook, body, "UPDATE", old) for n, body in updates.items()}
        assert real == expected, f"{kind}: apiserver {real}, model {expected}"
        assert real["finalizer"] == "skipped" and real["spec"] == "sent", f"{kind}: {real}"
