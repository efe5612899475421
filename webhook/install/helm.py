"""The Helm chart's derived parts, generated from what `gpu-webhook manifests` renders, so the two never disagree.

`python -m webhook.commands.generate helm [CHART_DIR]` (default manifests/helm/gpu-webhook) writes:
  - `crds/gpu-webhook.yaml`: the three CRDs, as rendered (webhook/install/crds.py);
  - `templates/generated/*.yaml`: every other object of the enforce overlay and of the optional
    components (policyreports, audit-cronjob, cert-manager, api-fairness, monitoring), each a template where the
    chart's values go: the image, replicas, --mode, failurePolicy, the caBundle or cert-manager's
    injection, the excluded namespaces, resources, the TLS Secret's name, the audit schedule;
    an optional object is wrapped in its `enabled` value. The registration (`rules`,
    `matchConditions`) is derived from the rules, as `manifests` derives it; the rules ConfigMap
    holds the shipped pack;
  - `files/grafana-dashboard.json`: the monitoring component's dashboard, for templates/dashboard.yaml;
  - `Chart.yaml`: `version` and `appVersion` are the release (the last `vX.Y.Z` tag of git).
What is the chart's own (values, schema, helpers, the self-signed Secret, the site's overlays and
exceptions, NOTES) is written by hand beside them. tests/helm fails when a generated file is stale,
and compares every object `helm template` renders with `gpu-webhook manifests`.

Values enter through sentinels: a string `HELM_VALUE_<name>` in a field becomes `{{ EXPR }}` in
place; a key whose value is `HELM_BLOCK_<name>` becomes that key with the value's YAML indented
under it; a key `HELM_LINE_<name>` becomes an `include` of the named template at its indentation
(fields that are present or absent by a value). The objects are otherwise dumped as rendered.
"""

from __future__ import annotations

import re
import subprocess  # nosec B404: `git describe` with a fixed argv, for the chart version (a generator, not the server)
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.certs import generate_bundle, service_dns_names, write_bundle
from webhook.kubeyaml import styles

from .manifests import NAMESPACE, SERVICE, TLS_SECRET, WEBHOOK_KINDS, render

Object = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
DEFAULT_CHART = REPO / "manifests" / "helm" / "gpu-webhook"
COMMAND = "python -m webhook.commands.generate helm"
HEADER = f"# Generated from `gpu-webhook manifests` by `{COMMAND}`; do not edit (tests/helm fails when stale).\n"
# optional parts: the component -> the value that enables it in the chart
COMPONENTS = {
    "policyreports": ".Values.policyReports.enabled",
    "audit-cronjob": ".Values.auditCronJob.enabled",
    "cert-manager": 'eq .Values.certificates.source "certManager"',
    "api-fairness": ".Values.apiFairness.enabled",
}
MONITORING = {
    "ServiceMonitor": ".Values.monitoring.serviceMonitor.enabled",
    "PrometheusRule": ".Values.monitoring.prometheusRule.enabled",
}
OPTIONAL_BASE = {
    "PodDisruptionBudget": ".Values.podDisruptionBudget.enabled",
    "NetworkPolicy": ".Values.networkPolicy.enabled",
}
VALUES = {
    "image": 'include "gpu-webhook.image" . | quote',
    "replicas": ".Values.replicas",
    "mode": ".Values.mode",
    "failurePolicy": 'include "gpu-webhook.failurePolicy" .',
    "tlsSecret": 'include "gpu-webhook.tlsSecret" .',
    "schedule": ".Values.auditCronJob.schedule | quote",
}
BLOCKS = {
    "resources": "toYaml .Values.resources",
    "auditResources": "toYaml .Values.auditCronJob.resources",
    "excludedNamespaces": 'include "gpu-webhook.excludedNamespaces" .',
}
LINES = {"caBundle": "gpu-webhook.caBundle", "webhookAnnotations": "gpu-webhook.webhookAnnotations"}
PLACEHOLDER_IMAGE = "HELM_VALUE_image"


def chart_files(manifests: Path, rules: str) -> dict[str, str]:
    """Relative path -> text of every generated file of the chart."""
    with tempfile.TemporaryDirectory(prefix="gpu-webhook-chart-") as scratch:
        write_bundle(generate_bundle(service_dns_names(SERVICE, NAMESPACE)), scratch)
        ca = Path(scratch)

        def objects(components: list[str], ca_dir: Path | None = ca) -> list[Object]:
            return render(manifests, "enforce", components, ca_dir, [rules], PLACEHOLDER_IMAGE, secret=False)

        base = objects([])
        optional: dict[tuple[str, str], str] = {}
        extra: list[Object] = []
        for component, condition in COMPONENTS.items():
            rendered = objects([component], None) if component == "cert-manager" else objects([component])
            for obj in rendered:
                if key(obj) not in {key(o) for o in base}:
                    optional[key(obj)] = condition
                    extra.append(obj)
        for obj in objects(["monitoring"]):
            if obj["kind"] in MONITORING:
                optional[key(obj)] = MONITORING[obj["kind"]]
                extra.append(obj)
    files: dict[str, str] = {}
    crds = [o for o in base if o["kind"] == "CustomResourceDefinition"]
    files["crds/gpu-webhook.yaml"] = HEADER + "---\n".join(dump(o) for o in crds)
    for obj in [*base, *extra]:
        if obj["kind"] in ("CustomResourceDefinition", "Namespace"):
            continue  # CRDs: crds/; the Namespace: `helm install --create-namespace` (NOTES says how to label it)
        condition = optional.get(key(obj)) or OPTIONAL_BASE.get(obj["kind"], "")
        text = template(place_values(obj))
        if condition:
            text = f"{{{{- if {condition} }}}}\n{text}{{{{- end }}}}\n"
        files[f"templates/generated/{file_name(obj)}"] = HEADER + text
    dashboard = manifests / "components" / "monitoring" / "grafana-dashboard.json"
    files["files/grafana-dashboard.json"] = dashboard.read_text()
    files["Chart.yaml"] = chart_yaml(release_version())
    return files


def key(obj: Object) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def file_name(obj: Object) -> str:
    kind = re.sub(r"(?<!^)(?=[A-Z])", "-", obj["kind"]).lower()
    return f"{kind}-{obj['metadata']['name']}.yaml"


def place_values(obj: Object) -> Object:
    """The object with a sentinel wherever a value of the chart goes."""
    kind = obj["kind"]
    if kind == "Deployment":
        spec = obj["spec"]
        spec["replicas"] = "HELM_VALUE_replicas"
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert container["args"][0].startswith("--mode="), container["args"][0]  # the overlays' contract
        container["args"][0] = "--mode=HELM_VALUE_mode"
        container["resources"] = "HELM_BLOCK_resources"
        for volume in pod["volumes"]:
            if volume.get("secret", {}).get("secretName") == TLS_SECRET:
                volume["secret"]["secretName"] = "HELM_VALUE_tlsSecret"
    elif kind == "CronJob":
        obj["spec"]["schedule"] = "HELM_VALUE_schedule"
        obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["resources"] = (
            "HELM_BLOCK_auditResources"
        )
    elif kind in WEBHOOK_KINDS:
        assert "annotations" not in obj["metadata"], "the base webhook configurations carry no annotations"
        obj["metadata"] = {**obj["metadata"], "HELM_LINE_webhookAnnotations": ""}
        for webhook in obj["webhooks"]:
            webhook["failurePolicy"] = "HELM_VALUE_failurePolicy"
            client = webhook["clientConfig"]
            client.pop("caBundle")
            client["HELM_LINE_caBundle"] = ""
            for expression in webhook["namespaceSelector"]["matchExpressions"]:
                if expression["key"] == "kubernetes.io/metadata.name":
                    assert expression["operator"] == "NotIn" and expression["values"] == ["kube-system", NAMESPACE]
                    expression["values"] = "HELM_BLOCK_excludedNamespaces"
    return obj


def dump(obj: Object) -> str:
    return styles.HELM.dump(obj)


def template(obj: Object) -> str:
    """The object's YAML with its sentinels turned into Helm template actions."""
    text = escape_actions(dump(obj))
    text = re.sub(r"HELM_VALUE_(\w+)", lambda m: f"{{{{ {VALUES[m.group(1)]} }}}}", text)
    text = re.sub(
        r"^( *)(- )?([^\s:]+): HELM_BLOCK_(\w+)$",
        lambda m: (
            f"{m.group(1)}{m.group(2) or ''}{m.group(3)}:\n"
            f"{{{{- {BLOCKS[m.group(4)]} | nindent {len(m.group(1)) + len(m.group(2) or '') + 2} }}}}"
        ),
        text,
        flags=re.M,
    )
    text = re.sub(
        r"^( *)HELM_LINE_(\w+): ''$",
        lambda m: f'{{{{- include "{LINES[m.group(2)]}" . | nindent {len(m.group(1))} }}}}',
        text,
        flags=re.M,
    )
    leftover = re.findall(r"HELM_\w+", text)
    assert not leftover, f"sentinels left in {obj['kind']} {obj['metadata']['name']}: {leftover}"
    return text


def escape_actions(text: str) -> str:
    """Text that Helm must leave as it is (the alerts' `{{ $labels.x }}`), as template actions printing it."""
    return re.sub(r"\{\{(.*?)\}\}", lambda m: '{{ "{{" }}' + m.group(1) + '{{ "}}" }}', text)


def release_version(run: Callable[..., Any] = subprocess.run) -> str:
    """The last release tag `vX.Y.Z` reachable from HEAD, without the v; 0.1.0 before the first release."""
    done = run(
        ["git", "-C", str(REPO), "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"],
        capture_output=True,
        text=True,
        check=False,
    )
    tag = done.stdout.strip() if done.returncode == 0 else ""
    return tag.removeprefix("v") if re.fullmatch(r"v\d+\.\d+\.\d+", tag) else "0.1.0"


def chart_yaml(version: str) -> str:
    return HEADER + dump(
        {
            "apiVersion": "v2",
            "name": "gpu-webhook",
            "description": "Admission policy for GPU workloads on shared Kubernetes clusters: denies what wastes or "
            "leaks GPUs, fills in tolerations, affinity, Kueue labels and priority classes",
            "type": "application",
            "version": version,
            "appVersion": version,
            "kubeVersion": ">=1.30.0-0",
            "keywords": ["gpu", "admission-webhook", "policy", "kueue", "nvidia"],
        }
    )


def write(chart: Path, files: dict[str, str]) -> list[str]:
    """Write the generated files, removing generated templates no longer rendered; the paths written."""
    generated = chart / "templates" / "generated"
    if generated.is_dir():
        for stale in generated.glob("*.yaml"):
            if f"templates/generated/{stale.name}" not in files:
                stale.unlink()
    for relative, text in files.items():
        path = chart / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(files)
