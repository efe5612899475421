"""`gpu-webhook manifests`: the install manifests as one multi-document YAML stream.

Renders manifests/overlays/<overlay> (plus optional components) with the built-in
kustomize subset (webhook/install/kustomize.py), then adds what a static kustomize tree cannot hold:
  - the ConfigMap `gpu-webhook-rules`, built from --rules after checking that they load
    (a kustomize configMapGenerator cannot read files outside its directory, and a copy of
    rules/ under manifests/ would drift). Its name carries no hash suffix on purpose: the
    server hot-reloads the mounted files, so a rule change needs no roll-out;
  - the `caBundle` of both webhook configurations, from --ca DIR/ca.crt;
  - the Secret `gpu-webhook-tls` from DIR/tls.crt and tls.key (omit with --no-secret, e.g.
    when the Secret is created separately with `kubectl create secret tls`).
With `--component cert-manager`, cert-manager issues the Secret and injects the caBundle: no --ca.
The enforce overlay rendered alone (`kubectl apply -k`) keeps both webhooks at failurePolicy Ignore;
only this command, which adds the three things above, adds components/fail-closed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from webhook.commands.common import (
    CLAIMS_MODES,
    CLAIMS_REFUSE,
    DEFAULT_KUBERNETES_VERSION,
    UsageError,
    add_rules,
    default_manifests_dir,
    default_rules_dir,
    load_ruleset,
    rule_paths,
    warn,
)

if TYPE_CHECKING:
    from webhook.export.versions import Release

SERVICE, NAMESPACE, RULES_CONFIGMAP, TLS_SECRET = "gpu-webhook", "gpu-webhook", "gpu-webhook-rules", "gpu-webhook-tls"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
CONFIGMAP_LIMIT = 1024 * 1024  # the apiserver refuses ConfigMaps over 1 MiB
LABELS = {"app.kubernetes.io/name": "gpu-webhook"}


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("manifests", help="render the install manifests (multi-document YAML)")
    parser.add_argument("--overlay", choices=["audit", "enforce"], default="enforce", help="roll-out step")
    parser.add_argument(
        "--component",
        action="append",
        default=[],
        choices=["cert-manager", "policyreports", "audit-cronjob", "monitoring"],
        help="add a component (repeatable): cert-manager issues the certificate; policyreports lets the server "
        "write PolicyReports; audit-cronjob runs `audit --cluster -o policyreport --apply` every hour; monitoring "
        "adds the Prometheus Operator's ServiceMonitor and PrometheusRule (docs/operations.md §8)",
    )
    parser.add_argument("--ca", help="directory with ca.crt (and tls.crt/tls.key) from `gpu-webhook certs`")
    parser.add_argument("--no-secret", action="store_true", help="do not emit the TLS Secret")
    add_rules(parser)
    parser.add_argument(
        "--image",
        metavar="IMAGE",
        help="the image you pushed, e.g. REGISTRY/gpu-webhook@sha256:... (required with failurePolicy Fail: "
        "the base's image is a placeholder)",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="mixed mode: rules that export in full run in the apiserver as admission policies (added to the "
        "output) and are left out of the webhook's rules ConfigMap, so each rule runs in exactly one place",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="X.Y",
        default=DEFAULT_KUBERNETES_VERSION,
        help="with --native: the cluster's release",
    )
    parser.add_argument(
        "--claims", choices=CLAIMS_MODES, default=CLAIMS_REFUSE, help="with --native: as `gpu-webhook export --claims`"
    )
    parser.add_argument(
        "--policy-per-rule", action="store_true", help="with --native: as `gpu-webhook export --policy-per-rule`"
    )
    parser.add_argument(
        "--runbook",
        action="store_true",
        help="print the outage runbook instead: the kubectl patches that set every webhook entry to Ignore, "
        "and back to Fail (docs/operations.md §6)",
    )
    parser.add_argument("--manifests", default=default_manifests_dir(), help=argparse.SUPPRESS)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    if args.runbook:
        from webhook.install.runbook import runbook

        sys.stdout.write(runbook())
        return 0

    documents = render(
        manifests=Path(args.manifests),
        overlay=args.overlay,
        components=args.component,
        ca_dir=Path(args.ca) if args.ca else None,
        rules=rule_paths(args.rules, args.site),
        image=args.image,
        secret=not args.no_secret,
        native=native_mode(args.kubernetes_version, args.claims, args.policy_per_rule) if args.native else None,
    )
    if not args.image:
        _check_placeholder_image(documents)
    # libyaml's emitter when PyYAML has it (the pure-Python one takes ~0.2 s on the manifests with the pack)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    yaml.dump_all(documents, sys.stdout, Dumper=dumper, sort_keys=False, default_flow_style=False, width=120)
    return 0


def _check_placeholder_image(documents: list[dict[str, Any]]) -> None:
    """Without --image the Deployment keeps the base's placeholder image, which no registry serves.

    No replica would ever answer; under failurePolicy Fail the apiserver then refuses every
    pod create the webhooks select (all but the exempt namespaces), so that output is refused.
    Under Ignore nothing is refused and the output is useful to look at: a note says so.
    """
    images = [
        container["image"]
        for obj in documents
        if obj["kind"] == "Deployment"
        for container in obj["spec"]["template"]["spec"]["containers"]
    ]
    if not images:
        return
    fail_closed = [
        obj["metadata"]["name"]
        for obj in documents
        if obj["kind"] in WEBHOOK_KINDS and any(w.get("failurePolicy") == "Fail" for w in obj["webhooks"])
    ]
    if fail_closed:
        raise UsageError(
            f"refusing to render webhooks that fail closed (failurePolicy: Fail in {', '.join(fail_closed)}) "
            f"with the placeholder image {images[0]}: it cannot be pulled, no replica would answer, and the "
            "apiserver would refuse every pod create outside the exempt namespaces. Give the image you pushed "
            "with --image REGISTRY/gpu-webhook@sha256:..., or try it out first with --overlay audit "
            "(failurePolicy: Ignore)"
        )
    warn(
        f"note: the image {images[0]} is a placeholder: the webhook cannot start (with failurePolicy Ignore "
        "nothing is refused meanwhile); give --image REGISTRY/gpu-webhook@sha256:... to run it"
    )


def render(
    manifests: Path,
    overlay: str = "enforce",
    components: list[str] = (),  # type: ignore[assignment]
    ca_dir: Path | None = None,
    rules: list[str] | str | None = None,
    image: str | None = None,
    secret: bool = True,
    native: NativeMode | None = None,
) -> list[dict[str, Any]]:
    import base64

    from webhook.certs import CA_FILE, check_bundle
    from webhook.install.kustomize import KustomizeError, build, sort_objects
    from webhook.install.registration import configmap_ruleset, derive

    cert_manager = "cert-manager" in components
    if cert_manager and ca_dir is not None:
        raise UsageError("--ca and the cert-manager component are alternatives: cert-manager injects the caBundle")
    if not cert_manager and ca_dir is None:
        raise UsageError(
            "--ca DIR is required (run `gpu-webhook certs --out DIR` first), or use --component cert-manager"
        )
    if ca_dir is not None:
        problems = check_bundle(ca_dir, f"{SERVICE}.{NAMESPACE}.svc", with_key=secret)
        if problems:
            raise UsageError(f"--ca {ca_dir}: " + "; ".join(problems))
    # The enforce overlay alone leaves the webhooks at Ignore (safe under a plain `kubectl apply -k`);
    # they fail closed only here, with the caBundle, the rules ConfigMap and the Secret in the output.
    extra = [*components, *(["fail-closed"] if overlay == "enforce" else [])]
    try:
        objects = build(manifests / "overlays" / overlay, [manifests / "components" / c for c in extra])
    except (KustomizeError, OSError) as error:
        raise UsageError(f"cannot render {manifests}: {error}") from None
    configmap = rules_configmap(rules or default_rules_dir())
    objects.append(configmap)
    if native is not None:
        objects.extend(native_policies(configmap, rules or default_rules_dir(), native, audit=overlay == "audit"))
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


class NativeMode(NamedTuple):  # not a dataclass: `dataclasses` is 8 ms of imports that --help would pay
    release: Release
    claims: str
    policy_per_rule: bool = False


def native_mode(version: str, claims: str, policy_per_rule: bool = False) -> NativeMode:
    from webhook.export.versions import Release

    try:
        return NativeMode(Release.parse(version), claims, policy_per_rule)
    except ValueError as error:
        raise UsageError(f"--kubernetes-version: {error}") from None


def native_policies(
    configmap: dict[str, Any], rules: list[str] | str, mode: NativeMode, audit: bool = False
) -> list[dict[str, Any]]:
    """The policies of the rules that export in full; their documents leave the ConfigMap.

    A rule exported narrower than it is (e.g. CREATE only) stays with the webhook and is not
    exported at all, so no rule runs in both places; nor is a rule GPUPolicyExceptions may lift
    (webhook.export.EXCEPTABLE: a warning names those that would export). With `audit` (the audit overlay, whose webhook
    runs `--mode=audit` and refuses nothing) the bindings record instead of denying, as the webhook
    does: validationActions Deny becomes Audit, so the roll-out step blocks nothing in either place.
    """
    from webhook.export import export, native_objects
    from webhook.export.mixed import webhook_files

    try:
        # rules_configmap has announced these rules (common.load_ruleset): once is enough
        result = export(load_ruleset(rules, announce=False), "all", mode.release, mode.claims)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if result.lifted:
        from webhook.commands.export import lifted_warning

        warn(f"--native: warning: {lifted_warning(result.lifted)}")
    complete = [rule for rule in result.rules if rule.note is None]
    configmap["data"] = webhook_files(configmap["data"], [rule.rule for rule in complete])
    if audit:
        for rule in complete:
            for obj in rule.objects:
                if obj["kind"] == "ValidatingAdmissionPolicyBinding":
                    actions = obj["spec"]["validationActions"]
                    obj["spec"]["validationActions"] = list(
                        dict.fromkeys("Audit" if a == "Deny" else a for a in actions)
                    )
    return native_objects(complete, mode.policy_per_rule)


def rules_configmap(rules: list[str] | str) -> dict[str, Any]:
    """Every rule file of every path as one key. Loading them first means a broken pack is never shipped."""
    from webhook.engine import rule_files

    paths = [rules] if isinstance(rules, str) else rules
    load_ruleset(paths)
    data: dict[str, str] = {}
    origin: dict[str, str] = {}  # key -> the file it holds, to name both of two files that want one key
    for path in paths:
        root = Path(path)
        for file in rule_files([path]):
            text = Path(file).read_text()
            if _only_test_suites(text):
                continue  # GPUPolicyTest suites run in CI; the cluster needs only the rules
            relative = Path(file).relative_to(root) if root.is_dir() else Path(Path(file).name)
            # a ConfigMap volume is flat: nested directories become part of the key
            key = "_".join(relative.parts)
            if key in origin:
                raise UsageError(
                    f"{origin[key]} and {file} would both be the file {key} of the rules ConfigMap (its volume is "
                    "one flat directory): rename one of them"
                )
            origin[key] = file
            data[key] = text
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise UsageError(f"rules are {size} bytes; a ConfigMap holds at most {CONFIGMAP_LIMIT}")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": RULES_CONFIGMAP, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "data": data,
    }


def _only_test_suites(text: str) -> bool:
    from webhook.engine.documents import TEST_KIND
    from webhook.kubeyaml import document_kinds

    return TEST_KIND in text and set(document_kinds(text)) == {TEST_KIND}


def tls_secret(ca_dir: Path) -> dict[str, Any]:
    import base64

    from webhook.certs import CA_FILE, CERT_FILE, KEY_FILE

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
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
