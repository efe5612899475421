"""The chart against a real kube-apiserver v1.36 (tests/support/envtest.py): what `helm template` renders in each
mode is accepted (server-side dry run), and `helm install` then `helm upgrade` (Helm v4, helm-python-sdk) go through
the real API and keep what the cluster holds: its own GPUPolicies, overlays and exceptions, and the release's CA.

No controller-manager or kubelet runs here, so the Deployment gets no pods: these tests prove what the apiserver
accepts and stores, not that replicas start (tests/deploy/test_runtime_layout.py starts the image's layout).
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import CHART, IMAGE, NAMESPACE, helm, template
from tests.support import RULES
from tests.support.envtest import SKIP_REASON, EnvTest, assets_dir

# kinds whose CRDs this apiserver does not have (cert-manager, the Prometheus Operator): their charts' business
FOREIGN_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
REPOSITORY, DIGEST = IMAGE.split("@")
OVERLAY = {
    "name": "site",
    "spec": {"rules": [{"name": "serving-readiness-probe", "action": "Audit"}]},
}
EXCEPTION = {
    "name": "lora-finetune-sizing",
    "namespace": "ml-research",
    "spec": {
        "rules": ["gpu-container-resources"],
        "match": {"kinds": ["Job"], "names": ["lora-finetune"]},
        "expires": "2099-01-31T00:00:00Z",
        "reason": "memory sizing under measurement",
    },
}


@pytest.fixture(scope="module")
def apiserver() -> Iterator[EnvTest]:
    if assets_dir() is None:
        pytest.skip(SKIP_REASON)
    with EnvTest.start() as env:
        for name in (NAMESPACE, "ml-research"):
            env.create_namespace(name)
        for crd in yaml.safe_load_all((CHART / "crds" / "gpu-webhook.yaml").read_text()):
            if crd:
                created = env.create(crd)
                assert created.ok, created.message
        yield env


def apply_dry_run(env: EnvTest, objects: list[dict[str, Any]]) -> list[str]:
    """Server-side dry-run create of each object the apiserver can know; the refusals."""
    refused = []
    for obj in objects:
        if obj["apiVersion"].startswith(FOREIGN_GROUPS):
            continue
        answer = env.dry_run_create(obj)
        if not answer.ok:
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {answer.status} {answer.message}")
    return refused


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"mode": "enforce", "image": {"repository": REPOSITORY, "digest": DIGEST}},
        {
            "certificates": {"source": "certManager"},
            "auditCronJob": {"enabled": True},
            "policyReports": {"enabled": True},
            "monitoring": {"dashboard": {"enabled": True}},
            "site": {"overlays": [OVERLAY], "exceptions": [EXCEPTION]},
            "excludedNamespaces": ["monitoring"],
        },
    ],
    ids=["audit", "enforce", "options"],
)
def test_every_mode_is_accepted_by_the_apiserver(apiserver: EnvTest, values: dict[str, Any]) -> None:
    objects = template(values)
    assert len(objects) >= 15
    assert apply_dry_run(apiserver, objects) == []


def get(env: EnvTest, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    answer = env.request("GET", f"{env.resource_path(api_version, kind, namespace)}/{name}")
    assert answer.ok, answer.message
    return answer.body


def the_clusters_own(env: EnvTest) -> list[tuple[str, str, str | None, str]]:
    """A GPUPolicy, a GPUPolicyOverlay and a GPUPolicyException made with the API, not by the release."""
    policy = next(
        d for d in yaml.safe_load_all((RULES / "gpu-toleration.yaml").read_text()) if d and d["kind"] == "GPUPolicy"
    )
    policy = copy.deepcopy(policy)
    policy["metadata"] = {"name": "team-gpu-toleration"}
    overlay = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": "team"},
        "spec": {"rules": [{"name": "gpu-cost-labels", "action": "Audit"}]},
    }
    exception = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": "team-exception", "namespace": "ml-research"},
        "spec": {**EXCEPTION["spec"], "reason": "the cluster's own"},
    }
    made = []
    for obj in (policy, overlay, exception):
        created = env.create(obj)
        assert created.ok, created.message
        meta = created.body["metadata"]
        made.append((obj["kind"], meta["name"], meta.get("namespace"), meta["resourceVersion"]))
    return made


def release_status(release: dict[str, Any]) -> tuple[str, int]:
    info = release.get("info") or {}
    return str(info.get("status") or release.get("status")), int(release.get("version") or release.get("revision") or 0)


def test_install_then_upgrade_keeps_the_clusters_policies_and_the_ca(apiserver: EnvTest) -> None:
    config = helm.Config(kubeconfig_path=str(apiserver.kubeconfig), namespace=NAMESPACE)
    release = config.install(
        CHART, "gpu-webhook", {"site": {"overlays": [OVERLAY]}}, namespace=NAMESPACE, wait="hookOnly", timeout=120
    )
    assert release_status(release) == ("deployed", 1), {k: v for k, v in release.items() if k != "manifest"}
    deployment = get(apiserver, "apps/v1", "Deployment", "gpu-webhook", NAMESPACE)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][0] == "--mode=audit"
    secret = get(apiserver, "v1", "Secret", "gpu-webhook-tls", NAMESPACE)
    bundle = get(
        apiserver, "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "gpu-webhook-validating"
    )["webhooks"][0]["clientConfig"]["caBundle"]
    assert bundle == secret["data"]["ca.crt"]
    assert get(apiserver, "gpu-webhook.io/v1alpha1", "GPUPolicyOverlay", "site")["spec"] == OVERLAY["spec"]
    owned = the_clusters_own(apiserver)

    # to enforce mode with a pushed image (failurePolicy Ignore: no replica can answer on this apiserver)
    upgrade = {"mode": "enforce", "failurePolicy": "Ignore", "image": {"repository": REPOSITORY, "digest": DIGEST}}
    release = config.upgrade(
        CHART,
        "gpu-webhook",
        {**upgrade, "site": {"overlays": [OVERLAY]}},
        namespace=NAMESPACE,
        wait="hookOnly",
        timeout=120,
    )
    assert release_status(release) == ("deployed", 2)
    container = get(apiserver, "apps/v1", "Deployment", "gpu-webhook", NAMESPACE)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["args"][0] == "--mode=enforce" and container["image"] == IMAGE
    assert get(apiserver, "v1", "Secret", "gpu-webhook-tls", NAMESPACE)["data"] == secret["data"]  # the CA kept
    webhooks = get(
        apiserver, "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "gpu-webhook-mutating"
    )["webhooks"]
    assert {w["clientConfig"]["caBundle"] for w in webhooks} == {bundle}

    # the release's overlay leaves with its value; the cluster's own objects stay, unchanged
    release = config.upgrade(CHART, "gpu-webhook", upgrade, namespace=NAMESPACE, wait="hookOnly", timeout=120)
    assert release_status(release) == ("deployed", 3)
    gone = apiserver.request("GET", f"{apiserver.resource_path('gpu-webhook.io/v1alpha1', 'GPUPolicyOverlay')}/site")
    assert gone.status == 404
    for kind, name, namespace, version in owned:
        kept = get(apiserver, "gpu-webhook.io/v1alpha1", kind, name, namespace)
        assert kept["metadata"]["resourceVersion"] == version, (kind, name)
    for crd in ("gpupolicies", "gpupolicyoverlays", "gpupolicyexceptions"):
        assert get(apiserver, "apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{crd}.gpu-webhook.io")


def test_helm_leaves_crds_alone_and_the_documented_apply_updates_them(apiserver: EnvTest, tmp_path: Path) -> None:
    """Helm installs crds/ once and never upgrades them (helm.sh/docs/chart_best_practices/custom_resource_definitions:
    "There is no support at this time for upgrading or deleting CRDs using Helm"), so docs/operations.md §3.0 applies
    them first: `kubectl apply --server-side --force-conflicts -f crds/` (the force takes the fields over from Helm)."""
    config = helm.Config(kubeconfig_path=str(apiserver.kubeconfig), namespace=NAMESPACE)
    if apiserver.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/gpu-webhook-tls").status == 404:
        config.install(CHART, "gpu-webhook", {}, namespace=NAMESPACE, wait="hookOnly", timeout=120)
    chart = tmp_path / "gpu-webhook"
    shutil.copytree(CHART, chart)
    crds = [d for d in yaml.safe_load_all((chart / "crds" / "gpu-webhook.yaml").read_text()) if d]
    crds[0]["spec"]["names"]["categories"] = [*crds[0]["spec"]["names"]["categories"], "gpu-next"]
    (chart / "crds" / "gpu-webhook.yaml").write_text(yaml.safe_dump_all(crds))
    name = crds[0]["metadata"]["name"]
    config.upgrade(chart, "gpu-webhook", {}, namespace=NAMESPACE, wait="hookOnly", timeout=120)
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    assert "gpu-next" not in apiserver.request("GET", path).body["spec"]["names"]["categories"]  # Helm left it
    applied = apiserver.request(
        "PATCH",
        path,
        crds[0],
        {"fieldManager": "kubectl", "force": "true"},
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert applied.ok, applied.message
    assert "gpu-next" in apiserver.request("GET", path).body["spec"]["names"]["categories"]
