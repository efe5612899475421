"""What the install manifests can and cannot do: plain kustomize never fails closed, `manifests --ca`
checks what it embeds, the audit CronJob has exactly the access it needs, replicas spread honouring taints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.deploy.conftest import MANIFESTS, by_kind, one
from webhook.audit.cluster import CONTEXT_RESOURCES, RESOURCES
from webhook.certs import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    generate_bundle,
    generate_ca,
    generate_serving,
    service_dns_names,
    write_bundle,
)
from webhook.cli import build_parser
from webhook.commands.common import UsageError
from webhook.commands.manifests import render
from webhook.install.kustomize import build
from webhook.kube.policies import RULE_RESOURCES

WEBHOOKS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@pytest.mark.parametrize("overlay", ["audit", "enforce"])
def test_plain_kustomize_never_renders_a_fail_closed_webhook_without_what_it_needs(overlay):
    """`kubectl apply -k manifests/overlays/X`: the built-in renderer is checked against kubectl kustomize
    (test_render.py), so this is what kubectl would apply. No caBundle, no Secret, no ConfigMap: then
    nothing may fail closed, or every pod of the cluster would be refused."""
    objects = build(MANIFESTS / "overlays" / overlay)
    kinds = {o["kind"] for o in objects}
    assert "Secret" not in kinds and "ConfigMap" not in kinds
    for kind in WEBHOOKS:
        for webhook in one(objects, kind)["webhooks"]:
            assert not webhook["clientConfig"].get("caBundle")
            assert webhook["failurePolicy"] == "Ignore", (overlay, kind)


def test_the_rendered_enforce_install_fails_closed(rendered):
    for variant in ("enforce", "cert-manager"):
        for kind in WEBHOOKS:
            webhook = one(rendered[variant], kind)["webhooks"][0]
            assert webhook["failurePolicy"] == "Fail", (variant, kind)
            has_ca = bool(webhook["clientConfig"].get("caBundle"))
            injected = "cert-manager.io/inject-ca-from" in one(rendered[variant], kind)["metadata"].get(
                "annotations", {}
            )
            assert has_ca or injected
        assert one(rendered[variant], "ConfigMap")["metadata"]["name"] == "gpu-webhook-rules"
    for kind in WEBHOOKS:  # the audit overlay never fails closed
        assert one(rendered["audit"], kind)["webhooks"][0]["failurePolicy"] == "Ignore"


def _bundle(directory: Path, names: list[str]) -> Path:
    write_bundle(generate_bundle(names), directory)
    return directory


def test_manifests_checks_the_ca_dir_before_embedding_it(tmp_path):
    good = _bundle(tmp_path / "good", service_dns_names("gpu-webhook", "gpu-webhook"))
    assert render(MANIFESTS, ca_dir=good)

    wrong_name = _bundle(tmp_path / "wrong-name", ["localhost"])
    with pytest.raises(UsageError, match=r"does not name gpu-webhook\.gpu-webhook\.svc"):
        render(MANIFESTS, ca_dir=wrong_name)

    other_ca = tmp_path / "other-ca"
    shutil.copytree(good, other_ca)
    ca_cert, ca_key = generate_ca(days=30)
    cert, _ = generate_serving(ca_cert, ca_key, service_dns_names("gpu-webhook", "gpu-webhook"), days=10)
    (other_ca / CERT_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(UsageError, match="is not signed by") as error:
        render(MANIFESTS, ca_dir=other_ca)
    assert "is not the key of" in str(error.value)  # and tls.key no longer matches either

    garbage = tmp_path / "garbage"
    shutil.copytree(good, garbage)
    (garbage / CA_FILE).write_text("not a certificate\n")
    with pytest.raises(UsageError, match=r"ca\.crt: not a readable PEM certificate"):
        render(MANIFESTS, ca_dir=garbage)

    no_key = tmp_path / "no-key"
    shutil.copytree(good, no_key)
    (no_key / KEY_FILE).unlink()
    with pytest.raises(UsageError, match=r"tls\.key"):
        render(MANIFESTS, ca_dir=no_key)
    assert render(MANIFESTS, ca_dir=no_key, secret=False)  # --no-secret: the key is not ours to check


def test_the_audit_cronjob_runs_the_cluster_audit_with_just_the_access_it_needs(rendered, ca_dir):
    objects = rendered["cert-manager"]  # rendered with the audit-cronjob component
    (cronjob,) = by_kind(objects, "CronJob")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "webhook.cli"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "audit" and args.cluster and args.output == "policyreport" and args.apply
    assert args.fail_on == "never" and args.rules == ["/etc/gpu-webhook/rules"]
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == {"gpu-webhook-rules"}
    assert cronjob["metadata"]["labels"]["app.kubernetes.io/name"] != "gpu-webhook"  # not the Service's pods

    account = pod["serviceAccountName"]
    (binding,) = [b for b in by_kind(objects, "ClusterRoleBinding") if b["subjects"][0]["name"] == account]
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == binding["roleRef"]["name"]]
    allowed = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {(r.group, r.plural, "list") for r in RESOURCES}
    # the cluster context, as the server reads it: namespaces, PriorityClasses, DRA claims and templates
    needed |= {(group, plural, "list") for group, plural in CONTEXT_RESOURCES}
    needed |= {(group, plural, "list") for group, plural in RULE_RESOURCES}  # the cluster's policy objects
    needed |= {("", "namespaces", "get")}  # audit --cluster -n NAME
    needed |= {
        ("wgpolicyk8s.io", p, v) for p in ("policyreports", "clusterpolicyreports") for v in ("get", "create", "update")
    }
    assert allowed == needed  # everything the audit does, and nothing more (no secrets, no writes elsewhere)

    image = "registry.example.com/gpu-webhook@sha256:" + "0" * 64
    again = render(MANIFESTS, components=["cert-manager", "audit-cronjob"], image=image)
    (cronjob,) = by_kind(again, "CronJob")
    assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_hostname_spread_honours_taints(rendered):
    spec = one(rendered["enforce"], "Deployment")["spec"]["template"]["spec"]
    (hostname,) = [c for c in spec["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"]
    assert hostname["whenUnsatisfiable"] == "DoNotSchedule"
    # the replicas tolerate no GPU taint: tainted GPU nodes must not count as empty domains
    assert hostname["nodeTaintsPolicy"] == "Honor"
