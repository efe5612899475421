"""The Helm chart (manifests/helm/gpu-webhook) with Helm v4 itself: lint strict, values schema, `helm template`
in each mode and with each option, compared object by object with `gpu-webhook manifests`; the generated
files current. (tests/helm/test_chart_apiserver.py applies, installs and upgrades it on a real apiserver.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.helm.chart import CHART, IMAGE, MANIFESTS, comparable, helm, load, manifests, template
from webhook.install.helm import COMMAND, chart_files, release_version


def test_the_generated_files_are_current() -> None:
    """Every file `python -m webhook.commands.generate helm` writes equals the committed one (CRDs, RBAC, registration,
    rules and hardening change elsewhere; the chart follows by regeneration, never by hand)."""
    from webhook.commands.common import default_rules_dir

    expected = chart_files(MANIFESTS, default_rules_dir())
    stale = [
        path for path, text in expected.items() if not (CHART / path).is_file() or (CHART / path).read_text() != text
    ]
    generated = {p.relative_to(CHART).as_posix() for p in (CHART / "templates" / "generated").glob("*.yaml")}
    extra = sorted(generated - set(expected))
    assert not stale and not extra, f"stale chart files {stale}, left-over {extra}: run `{COMMAND}` and commit"


def test_lint_strict_is_clean() -> None:
    for values in (
        {},
        {"mode": "enforce", "image": {"repository": IMAGE.split("@")[0], "digest": IMAGE.split("@")[1]}},
    ):
        report = helm.lint(CHART, values, strict=True, namespace="gpu-webhook", kube_version="v1.36.2")
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report.get("errors", [])
        assert report["total_charts_linted"] == 1 and problems == [], problems


def test_app_version_is_the_release_and_the_default_image_tag() -> None:
    """appVersion is git's last release tag (0.1.0 before the first); `helm package --app-version` stamps a dev build."""
    chart = load()
    assert chart.metadata["appVersion"] == chart.version == release_version()
    (deployment,) = [o for o in template() if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(f":{release_version()}")


def test_defaults_are_the_audit_overlay(ca_dir: Path) -> None:
    """`helm template` with the defaults: what `gpu-webhook manifests --overlay audit --ca DIR` renders, object by object."""
    ours, theirs = comparable(template()), comparable(manifests("audit", [], ca_dir))
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key] == theirs[key], key


def test_enforce_is_the_enforce_overlay(ca_dir: Path) -> None:
    repository, digest = IMAGE.split("@")
    ours = comparable(template({"mode": "enforce", "image": {"repository": repository, "digest": digest}}))
    theirs = comparable(manifests("enforce", [], ca_dir, IMAGE))
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key] == theirs[key], key
    assert {
        w["failurePolicy"] for k, o in ours.items() if k[0].endswith("WebhookConfiguration") for w in o["webhooks"]
    } == {"Fail"}


def test_options_are_the_components(ca_dir: Path) -> None:
    """cert-manager, the audit CronJob, PolicyReports, API fairness and monitoring: each the component of the same name."""
    values = {
        "certificates": {"source": "certManager"},
        "auditCronJob": {"enabled": True},
        "policyReports": {"enabled": True},
        "apiFairness": {"enabled": True},
        "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    }
    ours = comparable(template(values))
    components = ["cert-manager", "audit-cronjob", "policyreports", "api-fairness", "monitoring"]
    theirs = comparable(manifests("audit", components, None))
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key] == theirs[key], key


def test_the_crds_are_those_of_manifests() -> None:
    ours = [d for d in yaml.safe_load_all((CHART / "crds" / "gpu-webhook.yaml").read_text()) if d]
    theirs = [o for o in manifests_with_crds() if o["kind"] == "CustomResourceDefinition"]
    assert ours == theirs and len(ours) == 3


def manifests_with_crds() -> list[dict]:
    from webhook.commands.manifests import render

    return render(MANIFESTS, "audit", ["cert-manager"])


def test_values_reach_their_fields() -> None:
    values = {
        "replicas": 5,
        "failurePolicy": "Fail",
        "mode": "audit",
        "image": {"repository": "reg.example/gw", "tag": "1.2.3"},
        "excludedNamespaces": ["monitoring", "kube-system"],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "podDisruptionBudget": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "site": {
            "overlays": [{"name": "site-taint", "spec": {"rule": "gpu-toleration", "params": {"taintKey": "gpu"}}}],
            "exceptions": [{"name": "legacy", "namespace": "team-a", "spec": {"rules": ["gpu-cost-labels"]}}],
        },
        "monitoring": {"dashboard": {"enabled": True}},
    }
    objects = {(o["kind"], o["metadata"]["name"]): o for o in template(values)}
    deployment = objects["Deployment", "gpu-webhook"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 5 and container["image"] == "reg.example/gw:1.2.3"
    assert container["args"][0] == "--mode=audit"
    # Helm merges a map value into the defaults: requests replaced, the default limits kept
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "512Mi"},
    }
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in next(o for k, o in objects.items() if k[0] == kind)["webhooks"]:
            assert webhook["failurePolicy"] == "Fail"
            (names,) = [
                e["values"]
                for e in webhook["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name"
            ]
            assert names == ["kube-system", "gpu-webhook", "monitoring"]
    assert ("PodDisruptionBudget", "gpu-webhook") not in objects and ("NetworkPolicy", "gpu-webhook") not in objects
    assert objects["GPUPolicyOverlay", "site-taint"]["spec"]["params"] == {"taintKey": "gpu"}
    assert objects["GPUPolicyException", "legacy"]["metadata"]["namespace"] == "team-a"
    dashboard = objects["ConfigMap", "gpu-webhook-dashboard"]
    assert json.loads(dashboard["data"]["gpu-webhook.json"]) == json.loads(
        (MANIFESTS / "components" / "monitoring" / "grafana-dashboard.json").read_text()
    )
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_the_self_signed_certificate_names_the_service_and_the_extra_names() -> None:
    objects = template({"certificates": {"selfSigned": {"dnsNames": ["gw.example.com"], "ipAddresses": ["10.0.0.9"]}}})
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"gpu-webhook.gpu-webhook.svc", "gw.example.com"} <= set(sans.get_values_for_type(x509.DNSName))
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.9"]
    bundles = {
        w["clientConfig"]["caBundle"]
        for o in objects
        if o["kind"].endswith("WebhookConfiguration")
        for w in o["webhooks"]
    }
    assert bundles == {secret["data"]["ca.crt"]}  # one CA for the Secret and all four entries


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"mode": "block"}, "mode"),
        ({"replicas": "three"}, "replicas"),
        ({"replicas": 0}, "replicas"),
        ({"failurePolicy": "Sometimes"}, "failurePolicy"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"certificates": {"source": "vault"}}, "source"),
        ({"excludedNamespaces": ["Not_A_Namespace"]}, "excludedNamespaces"),
        ({"replica": 3}, "replica"),  # a typo is refused, not ignored
        ({"site": {"exceptions": [{"name": "x", "spec": {}}]}}, "namespace"),
    ],
)
def test_a_bad_value_is_refused_by_the_schema(values: dict, named: str) -> None:
    chart = load()
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(chart.merge_values(values))
    assert named in str(refused.value)
    with pytest.raises(helm.HelmError):
        template(values)


@pytest.mark.parametrize(
    ("values", "namespace", "reason"),
    [
        ({"mode": "enforce"}, "gpu-webhook", "placeholder image"),
        ({"failurePolicy": "Fail"}, "gpu-webhook", "placeholder image"),
        ({}, "default", "namespace gpu-webhook"),
        ({"certificates": {"source": "secret"}}, "gpu-webhook", "caBundle"),
    ],
)
def test_values_that_cannot_work_are_refused_with_the_reason(values: dict, namespace: str, reason: str) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        template(values, namespace=namespace)
    assert reason in str(refused.value)


def test_a_given_secret_is_used_with_its_ca(ca_dir: Path) -> None:
    pem = (ca_dir / "ca.crt").read_text()
    objects = template({"certificates": {"source": "secret", "secret": {"name": "my-tls", "caBundle": pem}}})
    assert not [o for o in objects if o["kind"] == "Secret"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert {"name": "tls", "secret": {"secretName": "my-tls", "defaultMode": 0o440}} in deployment["spec"]["template"][
        "spec"
    ]["volumes"]
    bundles = {
        w["clientConfig"]["caBundle"]
        for o in objects
        if o["kind"].endswith("WebhookConfiguration")
        for w in o["webhooks"]
    }
    assert bundles == {base64.b64encode(pem.encode()).decode()}


@pytest.mark.parametrize("mode", ["audit", "enforce"])
def test_notes_say_what_to_do_next(mode: str) -> None:
    values = {"mode": mode, "image": {"repository": "reg.example/gw", "digest": "sha256:" + "2" * 64}}
    notes = load().render(values, name="gpu-webhook", namespace="gpu-webhook", is_install=True)[
        "gpu-webhook/templates/NOTES.txt"
    ]
    assert f"mode {mode}, failurePolicy {'Ignore' if mode == 'audit' else 'Fail'}" in notes
    assert "pod-security.kubernetes.io/enforce=restricted" in notes and "gpu-webhook.io/tenant=true" in notes
    assert "kubectl apply --server-side --force-conflicts -f crds/" in notes  # Helm never upgrades CRDs itself
    assert ("--set mode=enforce" in notes) == (mode == "audit") and ("§6" in notes) == (mode == "enforce")
