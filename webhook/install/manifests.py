"""The install manifests: manifests/overlays/<overlay> rendered, plus what a static kustomize tree cannot hold.

The overlay (and optional components) is rendered with the built-in kustomize subset
(kustomize.py), then this adds:
  - the ConfigMap `gpu-webhook-rules`, built from the rule paths (a kustomize configMapGenerator
    cannot read files outside its directory, and a copy of rules/ under manifests/ would drift).
    Its name carries no hash suffix on purpose: the server hot-reloads the mounted files, so a rule
    change needs no roll-out;
  - the `caBundle` of both webhook configurations, from CA_DIR/ca.crt;
  - the Secret `gpu-webhook-tls` from CA_DIR/tls.crt and tls.key (left out with `secret=False`, e.g.
    when the Secret is created separately with `kubectl create secret tls`).
With the cert-manager component, cert-manager issues the Secret and injects the caBundle: no CA_DIR.
The enforce overlay rendered alone (`kubectl apply -k`) keeps both webhooks at failurePolicy Ignore;
only this render, which adds the three things above, adds components/fail-closed.

`gpu-webhook manifests` (webhook/commands/manifests.py) loads the rules before the ConfigMap is
built and computes the native policies of `--native`; both reach here as callbacks, so this module
needs nothing of the commands.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from webhook.certs import CA_FILE, CERT_FILE, KEY_FILE, check_bundle
from webhook.engine import rule_files
from webhook.engine.documents import TEST_KIND
from webhook.kubeyaml import document_kinds

from .kustomize import KustomizeError, build, sort_objects
from .registration import configmap_ruleset, derive

SERVICE, NAMESPACE, RULES_CONFIGMAP, TLS_SECRET = "gpu-webhook", "gpu-webhook", "gpu-webhook-rules", "gpu-webhook-tls"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
CONFIGMAP_LIMIT = 1024 * 1024  # the apiserver refuses ConfigMaps over 1 MiB
LABELS = {"app.kubernetes.io/name": "gpu-webhook"}

Object = dict[str, Any]
# given the rules ConfigMap: the admission policies that take over some of its rules (it drops them)
NativePolicies = Callable[[Object], list[Object]]


class RenderError(ValueError):
    """The manifests cannot be rendered as asked (`gpu-webhook manifests` prints it: exit code 2)."""


def render(
    manifests: Path,
    overlay: str,
    components: Sequence[str],
    ca_dir: Path | None,
    rules: Sequence[str],
    image: str | None = None,
    secret: bool = True,
    native: NativePolicies | None = None,
    check_rules: Callable[[Sequence[str]], object] = lambda paths: None,
) -> list[Object]:
    """Every object of the install, in apply order; `check_rules(rules)` runs before the ConfigMap is built."""
    cert_manager = "cert-manager" in components
    if cert_manager and ca_dir is not None:
        raise RenderError("--ca and the cert-manager component are alternatives: cert-manager injects the caBundle")
    if not cert_manager and ca_dir is None:
        raise RenderError(
            "--ca DIR is required (run `gpu-webhook certs --out DIR` first), or use --component cert-manager"
        )
    if ca_dir is not None:
        problems = check_bundle(ca_dir, f"{SERVICE}.{NAMESPACE}.svc", with_key=secret)
        if problems:
            raise RenderError(f"--ca {ca_dir}: " + "; ".join(problems))
    # The enforce overlay alone leaves the webhooks at Ignore (safe under a plain `kubectl apply -k`);
    # they fail closed only here, with the caBundle, the rules ConfigMap and the Secret in the output.
    extra = [*components, *(["fail-closed"] if overlay == "enforce" else [])]
    try:
        objects = build(manifests / "overlays" / overlay, [manifests / "components" / c for c in extra])
    except (KustomizeError, OSError) as error:
        raise RenderError(f"cannot render {manifests}: {error}") from None
    check_rules(rules)  # a broken pack is never shipped
    configmap = rules_configmap(rules)
    objects.append(configmap)
    if native is not None:
        objects.extend(native(configmap))
    # what the apiserver sends follows the rules the webhook will load: the ConfigMap, after --native
    objects = derive(objects, configmap_ruleset(configmap))
    if ca_dir is not None:
        ca = _read(ca_dir / CA_FILE)
        for obj in objects:
            if obj["kind"] in WEBHOOK_KINDS:
                for webhook in obj["webhooks"]:
                    webhook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
        if secret:
            objects.append(tls_secret(ca_dir))
    if image:
        for obj in objects:
            if obj["kind"] in ("Deployment", "CronJob"):
                template = (
                    obj["spec"]["template"]
                    if obj["kind"] == "Deployment"
                    else obj["spec"]["jobTemplate"]["spec"]["template"]
                )
                for container in template["spec"]["containers"]:
                    container["image"] = image
    return sort_objects(objects)


def rules_configmap(rules: Sequence[str] | str) -> Object:
    """Every rule file of every path as one key (test suites left out: they run in CI, not in the cluster)."""
    paths = [rules] if isinstance(rules, str) else rules
    data: dict[str, str] = {}
    origin: dict[str, str] = {}  # key -> the file it holds, to name both of two files that want one key
    for path in paths:
        root = Path(path)
        for file in rule_files([path]):
            text = Path(file).read_text()
            if _only_test_suites(text):
                continue
            relative = Path(file).relative_to(root) if root.is_dir() else Path(Path(file).name)
            # a ConfigMap volume is flat: nested directories become part of the key
            key = "_".join(relative.parts)
            if key in origin:
                raise RenderError(
                    f"{origin[key]} and {file} would both be the file {key} of the rules ConfigMap (its volume is "
                    "one flat directory): rename one of them"
                )
            origin[key] = file
            data[key] = text
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise RenderError(f"rules are {size} bytes; a ConfigMap holds at most {CONFIGMAP_LIMIT}")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": RULES_CONFIGMAP, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "data": data,
    }


def _only_test_suites(text: str) -> bool:
    return TEST_KIND in text and set(document_kinds(text)) == {TEST_KIND}


def tls_secret(ca_dir: Path) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "data": {name: base64.b64encode(_read(ca_dir / name)).decode() for name in (CERT_FILE, KEY_FILE, CA_FILE)},
    }


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise RenderError(f"cannot read {path}: {error.strerror or error}") from None
