"""The manifests render the same through kubectl kustomize and our renderer, and validate
against the Kubernetes 1.37 OpenAPI schema (kubernetes-validate, strict: unknown fields fail)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import MANIFESTS, OVERLAYS, by_kind, kubectl_kustomize, needs_kubectl, one
from webhook.cli import main
from webhook.commands.common import UsageError
from webhook.commands.manifests import render
from webhook.engine import load_rules
from webhook.install.kustomize import KustomizeError, build

K8S_VERSION = "1.37.0"
CRD_GROUPS = ("cert-manager.io/",)  # not in the Kubernetes schema; checked by shape below


def key(obj: dict[str, Any]) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


@needs_kubectl
@pytest.mark.parametrize("directory", ["base", "overlays/audit", "overlays/enforce"])
def test_builtin_renderer_matches_kubectl_kustomize(directory: str) -> None:
    ours = {key(o): o for o in build(MANIFESTS / directory)}
    theirs = {key(o): o for o in kubectl_kustomize(MANIFESTS / directory)}
    assert ours == theirs


@needs_kubectl
def test_components_render_the_same_through_kubectl(tmp_path: Path) -> None:
    components = [MANIFESTS / "components" / c for c in ("cert-manager", "policyreports")]
    # kustomize refuses absolute paths in a kustomization: a wrapper with relative ones
    wrapper = {
        "resources": [os.path.relpath(MANIFESTS / "overlays/enforce", tmp_path)],
        "components": [os.path.relpath(c, tmp_path) for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(wrapper))
    theirs = {key(o): o for o in kubectl_kustomize(tmp_path)}
    ours = {key(o): o for o in build(MANIFESTS / "overlays/enforce", components)}
    assert ours == theirs


@pytest.mark.parametrize("variant", [*OVERLAYS, "cert-manager"])
def test_every_object_validates_against_the_kubernetes_schema(rendered: dict, variant: str) -> None:
    checked = 0
    for obj in rendered[variant]:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 13


def test_the_schema_check_is_strict() -> None:
    """A misspelt field must fail, or the test above would prove little."""
    deployment = one(build(MANIFESTS / "base"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"port": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_rules_configmap_is_the_rule_pack_and_loads(rendered: dict, tmp_path: Path) -> None:
    configmap = one(rendered["enforce"], "ConfigMap")
    assert configmap["metadata"]["name"] == "gpu-webhook-rules"
    repo_rules = sorted(p.name for p in (MANIFESTS.parent / "rules").glob("*.yaml"))
    assert sorted(configmap["data"]) == repo_rules
    for name, text in configmap["data"].items():  # what the pod will mount
        (tmp_path / name).write_text(text)
    result = load_rules([str(tmp_path)])
    assert result.ruleset is not None and len(result.ruleset.rules) == len(repo_rules)
    deployment = one(rendered["enforce"], "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["rules"]["configMap"]["name"] == "gpu-webhook-rules"


def test_ca_bundle_and_secret_come_from_the_ca_dir(rendered: dict, ca_dir: Path) -> None:
    ca = (ca_dir / "ca.crt").read_bytes()
    for overlay in OVERLAYS:
        objects = rendered[overlay]
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in one(objects, kind)["webhooks"]:
                assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca
        secret = one(objects, "Secret")
        assert secret["type"] == "kubernetes.io/tls" and secret["metadata"]["name"] == "gpu-webhook-tls"
        assert base64.b64decode(secret["data"]["tls.crt"]) == (ca_dir / "tls.crt").read_bytes()
        volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
        assert {"name": "tls", "secret": {"secretName": "gpu-webhook-tls", "defaultMode": 0o440}} in volumes


def test_cert_manager_variant_injects_instead_of_embedding(rendered: dict) -> None:
    objects = rendered["cert-manager"]
    assert not by_kind(objects, "Secret")
    serving = next(c for c in by_kind(objects, "Certificate") if c["metadata"]["name"] == "gpu-webhook-serving")
    assert serving["spec"]["secretName"] == "gpu-webhook-tls"
    assert serving["spec"]["dnsNames"][-1] == "gpu-webhook.gpu-webhook.svc.cluster.local"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = one(objects, kind)
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "gpu-webhook/gpu-webhook-serving"
        }
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    writes = [
        r
        for o in by_kind(objects, "ClusterRole")
        # the audit CronJob's own role (test_install_safety.py); the exception admins' role, bound by the platform team
        if o["metadata"]["name"] not in ("gpu-webhook-audit", "gpu-webhook-exception-admin")
        for r in o["rules"]
        if {"create", "update", "patch", "delete"} & set(r["verbs"])
    ]
    assert writes == [
        STATUS_RULE,  # the base's (below)
        *REGISTRATION_RULES,
        {
            "apiGroups": ["wgpolicyk8s.io"],
            "resources": ["policyreports", "clusterpolicyreports"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
    ]


# the policy objects it loads (serve --policies) and the exceptions it applies: read only
POLICY_READ_RULE = {
    "apiGroups": ["gpu-webhook.io"],
    "resources": ["gpupolicies", "gpupolicyoverlays", "gpupolicyexceptions"],
    "verbs": ["list", "watch"],
}
# each replica's entry in a policy's status: the status subresource only, GET + PUT
STATUS_RULE = {
    "apiGroups": ["gpu-webhook.io"],
    "resources": ["gpupolicies/status", "gpupolicyoverlays/status"],
    "verbs": ["get", "update"],
}

# the server keeps these two, and no other webhook configuration, in step with its rules
# (webhook/server/registration_sync.py): by name, GET + PUT only; no list/watch (resourceNames cannot limit them)
REGISTRATION_RULES = [
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations"],
        "resourceNames": ["gpu-webhook-mutating"],
        "verbs": ["get", "update"],
    },
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations"],
        "resourceNames": ["gpu-webhook-validating"],
        "verbs": ["get", "update"],
    },
]


def test_base_rbac_reads_the_context_and_writes_only_its_own_registration(rendered: dict) -> None:
    roles = by_kind(rendered["enforce"], "ClusterRole")
    assert [r["metadata"]["name"] for r in roles] == ["gpu-webhook", "gpu-webhook-exception-admin"]
    # the exception admins may write exceptions and nothing else of the webhook's
    admin = roles[1]["rules"]
    assert [r["resources"] for r in admin if {"create", "update", "patch", "delete"} & set(r["verbs"])] == [
        ["gpupolicyexceptions"]
    ]
    assert roles[0]["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["localqueues", "clusterqueues", "resourceflavors"],
            "verbs": ["list", "watch"],
        },
        POLICY_READ_RULE,
        STATUS_RULE,
        *REGISTRATION_RULES,
    ]
    # a Role in its own namespace: get pods, to drop a gone replica's entry from a policy's status, list
    # them to see replicas without a needs record; the registration's Leases (webhook/server/registration_leases.py)
    (role,) = by_kind(rendered["enforce"], "Role")
    assert role["metadata"]["namespace"] == "gpu-webhook"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update", "delete"],
        },
    ]
    names = {w["metadata"]["name"] for w in rendered["enforce"] if w["kind"].endswith("WebhookConfiguration")}
    assert names == {n for rule in REGISTRATION_RULES for n in rule["resourceNames"]}


def test_cli_prints_multi_document_yaml(ca_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifests", "--ca", str(ca_dir), "--overlay", "audit", "--image", "reg.example/gw@sha256:abc"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs[0]["kind"] == "Namespace" and docs[-1]["kind"] == "ValidatingWebhookConfiguration"
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg.example/gw@sha256:abc"


def test_usage_errors(ca_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--ca DIR is required"):
        render(MANIFESTS)
    with pytest.raises(UsageError, match="alternatives"):
        render(MANIFESTS, components=["cert-manager"], ca_dir=ca_dir)
    broken = tmp_path / "rules"
    broken.mkdir()
    (broken / "bad.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: x}\nspec: {}\n"
    )
    with pytest.raises(UsageError):
        render(MANIFESTS, ca_dir=ca_dir, rules=str(broken))


def test_renderer_refuses_what_it_does_not_understand(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(KustomizeError, match="unsupported"):
        build(tmp_path)
